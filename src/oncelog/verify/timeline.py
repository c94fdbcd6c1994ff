"""The timeline page of a history: verdict, anomalies and counts, then throughput, errors and faults
over time, as one HTML page.

Why HTML with an inline SVG: it needs nothing but the standard library to write and a browser to
look at, has no external assets (a report can be mailed or archived as one file), and its text
(fault labels, axis values) stays searchable.

The page opens with what a reader looks for first: the verdict (worded as on the terminal) and the
anomaly table, then the history's counts (``history.COUNTS``, the same numbers under the same names
as the progress line and the JSON report), then the charts, then the numbered fault windows.

Per second of the history: acknowledged sends (by the time of their ``ok``; a transactional send
only when its transaction committed), polled records, and failed (``fail``) and indeterminate
(``info``) outcomes of sends, transactions and polls; each series adds up to its count. Faults are
shaded bands from their start to their end (to the end of the history when never healed), labelled
``#n kind``; labels that would overlap are stacked in lanes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from pathlib import Path

from oncelog.verify.checker import ALLOWED, Anomaly, CheckResult, check
from oncelog.verify.history import (
    COUNTS,
    Fault,
    FinalRead,
    Leaders,
    Note,
    Op,
    Poll,
    Send,
    tally,
)

WIDTH, PLOT_H, GAP, LEFT, RIGHT = 960, 180, 40, 60, 20
LANE_H, LABEL_TOP = 14, 6  # one lane of fault labels, and the margin above the first
CHAR_W, LABEL_PAD = 7.0, 6.0  # a generous width per character of the 11px labels, and spacing
LEGEND_STEP = 300
FAULT_COLOURS = {
    "kill": "#f4a6a6",
    "pause": "#a6c8f4",
    "crash": "#f4d9a6",
    "partition": "#c9a6f4",
    "etcd": "#a6f4c9",
    "bounce": "#f4a6e0",
    "move": "#e0f4a6",
}
ROLE_H = 14  # one role lane (the controller, a partition's leader)
BROKER_COLOURS = ("#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462", "#b3de69")
OTHER_FAULT = "#d9d9d9"
STYLE = (
    "body{font-family:sans-serif;margin:1em 2em}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}td.n{text-align:right}"
    "tr.hit td{background:#fde0e0;font-weight:bold}.verdict{font-size:1.6em;font-weight:bold}"
    ".ok{color:#1a7f37}.fail{color:#c62828}"
)


@dataclass(frozen=True, slots=True)
class Band:
    """One fault window, numbered in start order, in seconds from the start of the history."""

    number: int
    kind: str
    target: str
    start: float
    end: float
    detail: str | None = None
    heal_detail: str | None = None

    @property
    def label(self) -> str:
        return f"#{self.number} {self.kind} {self.target}"


@dataclass(frozen=True, slots=True)
class Label:
    """Where a band's label goes: its left edge and width in pixels, and its lane (row)."""

    band: Band
    x: float
    width: float
    lane: int


@dataclass(frozen=True, slots=True)
class Series:
    """Counts per second of one of the history's counts (``name`` is its ``COUNTS`` key)."""

    name: str
    colour: str
    counts: list[int]


@dataclass(frozen=True, slots=True)
class RoleLane:
    """Who held one role over time (the controller, a partition's leadership): segments of
    (start, end, node id) in seconds from the start of the history; -1 is nobody."""

    name: str
    segments: list[tuple[float, float, int]]


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the picture shows: per-second series in two panels, the fault bands, and the role
    lanes (empty when the history recorded no leaders)."""

    seconds: int
    throughput: list[Series]
    errors: list[Series]
    bands: list[Band]
    roles: list[RoleLane] = field(default_factory=list)


def role_lanes(ops: list[Op], t0: float, t1: float) -> list[RoleLane]:
    """From the history's ``leaders`` observations: one lane for the controller, one per
    partition, each holder shown from the observation until the next one that differs."""
    observed = [op for op in ops if isinstance(op, Leaders)]
    if not observed:
        return []
    changes: dict[str, list[tuple[float, int]]] = {"controller": []}
    for op in observed:
        at = max(0.0, op.time - t0)
        changes["controller"].append((at, op.controller))
        for topic, partition, leader in op.leaders:
            changes.setdefault(f"{topic}-{partition}", []).append((at, leader))
    end = max(0.0, t1 - t0)
    lanes = []
    for name, points in changes.items():
        segments: list[tuple[float, float, int]] = []
        for at, node in points:
            if segments and segments[-1][2] == node:
                continue
            if segments:
                segments[-1] = (segments[-1][0], at, segments[-1][2])
            segments.append((at, end, node))
        lanes.append(RoleLane(name, segments))
    return lanes


def build(ops: list[Op], result: CheckResult | None = None) -> Timeline:
    """Bucket a history into seconds from its first timed operation (final reads excluded);
    operations without a time count in the first second, so every series adds up to its count."""
    if result is None:
        result = check(ops)
    counted = tally(ops)  # whose transactions committed, for the acknowledged series
    timed = [op for op in ops if not isinstance(op, FinalRead) and op.time > 0]
    t0 = min((op.time for op in timed), default=0.0)
    t1 = max((op.time for op in timed), default=0.0)
    seconds = max(1, math.ceil(t1 - t0) + 1)
    acked, polled, failed, infos = ([0] * seconds for _ in range(4))
    for op in ops:
        if isinstance(op, Fault | FinalRead | Leaders | Note):
            continue
        i = max(0, min(seconds - 1, int(op.time - t0)))
        if op.phase == "fail":
            failed[i] += 1
        elif op.phase == "info":
            infos[i] += 1
        elif isinstance(op, Send) and counted.acknowledged(op):
            acked[i] += 1
        elif isinstance(op, Poll) and op.phase == "ok":
            polled[i] += len(op.records)
    bands = [
        Band(
            n,
            w.kind,
            w.target,
            max(0.0, w.start - t0),
            max(0.0, (t1 if w.end is None else w.end) - t0),
            w.detail,
            w.heal_detail,
        )
        for n, w in enumerate(result.faults, start=1)
    ]
    return Timeline(
        seconds,
        [Series("acknowledged", "#1f77b4", acked), Series("polled_records", "#2ca02c", polled)],
        [Series("failed", "#d62728", failed), Series("indeterminate", "#ff7f0e", infos)],
        bands,
        role_lanes(ops, t0, t1),
    )


def fault_labels(bands: list[Band], x_scale: float) -> list[Label]:
    """Place each band's label just right of the band's left edge (kept inside the picture), in
    the first lane it clears, and that every lane below it clears too (so the line from the label
    down to its band crosses no label): close fault windows get stacked labels."""
    lane_ends: list[float] = []
    out: list[Label] = []
    for b in sorted(bands, key=lambda b: (b.start, b.number)):
        width = len(b.label) * CHAR_W
        x = min(LEFT + b.start * x_scale + 2, WIDTH - RIGHT - width)
        lane = next(
            (
                i
                for i in range(len(lane_ends))
                if all(end + LABEL_PAD <= x for end in lane_ends[i:])
            ),
            len(lane_ends),
        )
        if lane == len(lane_ends):
            lane_ends.append(x + width)
        else:
            lane_ends[lane] = x + width
        out.append(Label(b, x, width, lane))
    return out


def render(
    ops: list[Op], title: str = "oncelog verify timeline", result: CheckResult | None = None
) -> str:
    """A self-contained HTML page (inline CSS and SVG, no scripts, no external assets)."""
    if result is None:
        result = check(ops)
    tl = build(ops, result)
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
        f"<h1>{escape(title)}</h1>\n"
        f'<p class="verdict {"ok" if result.ok else "fail"}">{escape(result.verdict)}</p>\n'
        + _anomaly_table(result)
        + _counts_table(result.stats)
        + "<h2>Timeline</h2>\n"
        + _svg(tl)
        + "\n<h2>Faults</h2>\n"
        + _fault_table(tl.bands)
        + "</body></html>\n"
    )


def _anomaly_table(result: CheckResult) -> str:
    """Every anomaly kind with its count and the first example, as the terminal summary."""
    first: dict[str, Anomaly] = {}
    for a in reversed(result.anomalies):
        first[a.kind] = a
    rows = []
    for kind, n in result.counts.items():
        example = ""
        if kind in first:
            a = first[kind]
            proof = ", ".join(o.label() for o in a.ops)
            note = a.fault_note(result.faults)
            example = escape(
                f"{a.topic}-{a.partition}: {a.details} by {proof}" + (f" ({note})" if note else "")
            )
        hit = ' class="hit"' if n else ""
        rows.append(
            f'<tr{hit}><td>{escape(kind)}</td><td class="n">{n}</td><td>{example}</td></tr>'
        )
    return (
        '<h2>Anomalies</h2>\n<table class="anomalies"><tr><th>anomaly</th><th>count</th>'
        "<th>first example</th></tr>\n" + "\n".join(rows) + "</table>\n"
        f"<p>Allowed by Kafka's design, not checked: {escape(', '.join(ALLOWED))}.</p>\n"
    )


def _counts_table(stats: dict[str, int]) -> str:
    rows = "\n".join(
        f'<tr><td>{escape(name)}</td><td class="n">{stats.get(name, 0)}</td>'
        f"<td>{escape(meaning)}</td></tr>"
        for name, meaning in COUNTS.items()
    )
    return (
        '<h2>Counts</h2>\n<table class="counts"><tr><th>count</th><th>value</th>'
        f"<th>what it counts</th></tr>\n{rows}</table>\n"
    )


def _fault_table(bands: list[Band]) -> str:
    if not bands:
        return "<p>none</p>\n"
    rows = "\n".join(
        f"<tr><td>#{b.number}</td><td>{escape(b.kind)}</td><td>{escape(b.target)}</td>"
        f'<td class="n">{b.start:.1f}s</td><td class="n">{b.end:.1f}s</td>'
        f"<td>{escape(b.detail or '')}</td><td>{escape(b.heal_detail or '')}</td></tr>"
        for b in bands
    )
    return (
        '<table class="faults"><tr><th>#</th><th>fault</th><th>target</th><th>from</th>'
        f"<th>to</th><th>detail</th><th>healed</th></tr>\n{rows}</table>\n"
    )


def _svg(tl: Timeline) -> str:
    plot_w = WIDTH - LEFT - RIGHT
    x_scale = plot_w / tl.seconds
    labels = fault_labels(tl.bands, x_scale)
    lanes = max((lb.lane + 1 for lb in labels), default=0)
    top = LABEL_TOP + lanes * LANE_H + 8
    roles_h = (len(tl.roles) * ROLE_H + GAP // 2) if tl.roles else 0
    shaded = 2 * PLOT_H + GAP + roles_h
    height = top + shaded + 24
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for lb in labels:
        b = lb.band
        x = LEFT + b.start * x_scale
        w = max(1.0, (b.end - b.start) * x_scale)
        colour = FAULT_COLOURS.get(b.kind, OTHER_FAULT)
        baseline = LABEL_TOP + lb.lane * LANE_H + 10
        parts.append(
            f'<g class="fault"><title>{escape(b.label)} '
            f"{b.start:.1f}s-{b.end:.1f}s</title>"
            f'<rect x="{x:.1f}" y="{top}" width="{w:.1f}" height="{shaded}" '
            f'fill="{colour}" fill-opacity="0.5"/>'
            f'<line x1="{x:.1f}" y1="{baseline + 2}" x2="{x:.1f}" y2="{top}" stroke="#999"/>'
            f'<text x="{lb.x:.1f}" y="{baseline}" fill="#444" data-lane="{lb.lane}">'
            f"{escape(b.label)}</text></g>"
        )
    for panel, series in enumerate((tl.throughput, tl.errors)):
        parts.append(_panel(series, top + panel * (PLOT_H + GAP), plot_w, x_scale))
    if tl.roles:
        parts.append(_role_lanes(tl.roles, top + 2 * PLOT_H + GAP + GAP // 2, x_scale))
    bottom = top + shaded
    step = max(1, math.ceil(tl.seconds / 20))
    for s in range(0, tl.seconds + 1, step):
        x = LEFT + s * x_scale
        parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{s}s</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _role_lanes(lanes: list[RoleLane], top: int, x_scale: float) -> str:
    """One row per role: segments coloured by the broker holding it, its id written inside."""
    out = [f'<text x="{LEFT}" y="{top - 6}" fill="#444">who led (from metadata)</text>']
    for row, lane in enumerate(lanes):
        y = top + row * ROLE_H
        out.append(
            f'<text x="{LEFT - 4}" y="{y + ROLE_H - 4}" text-anchor="end" font-size="9">'
            f"{escape(_short(lane.name))}</text>"
        )
        for start, end, node in lane.segments:
            x, w = LEFT + start * x_scale, max(1.0, (end - start) * x_scale)
            colour = BROKER_COLOURS[node % len(BROKER_COLOURS)] if node >= 0 else "#eeeeee"
            who = f"broker {node}" if node >= 0 else "none"
            out.append(
                f'<g class="role" data-lane="{escape(lane.name)}" data-node="{node}">'
                f"<title>{escape(lane.name)}: {who} {start:.1f}s-{end:.1f}s</title>"
                f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{ROLE_H - 2}" '
                f'fill="{colour}"/>'
                + (
                    f'<text x="{x + 2:.1f}" y="{y + ROLE_H - 4}" font-size="9">'
                    f"{node if node >= 0 else '-'}</text>"
                    if w > 10
                    else ""
                )
                + "</g>"
            )
    return "\n".join(out)


def _short(name: str, width: int = 9) -> str:
    """A lane name that fits left of the plot: the end of it (the partition number shows)."""
    return name if len(name) <= width else "…" + name[-(width - 1) :]


def _panel(series: list[Series], top: int, plot_w: int, x_scale: float) -> str:
    peak = max((max(s.counts) for s in series), default=0) or 1
    y_scale = (PLOT_H - 10) / peak
    out = [
        f'<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PLOT_H}" fill="none" '
        'stroke="#888"/>',
        f'<text x="{LEFT - 4}" y="{top + 10}" text-anchor="end">{peak}</text>',
        f'<text x="{LEFT - 4}" y="{top + PLOT_H}" text-anchor="end">0</text>',
    ]
    for n, s in enumerate(series):
        points = " ".join(
            f"{LEFT + (i + 0.5) * x_scale:.1f},{top + PLOT_H - c * y_scale:.1f}"
            for i, c in enumerate(s.counts)
        )
        out.append(
            f'<polyline class="series" fill="none" stroke="{s.colour}" stroke-width="1.5" '
            f'points="{points}"><title>{escape(s.name)} per second</title></polyline>'
        )
        out.append(
            f'<text x="{LEFT + 8 + n * LEGEND_STEP}" y="{top + 14}" fill="{s.colour}" '
            f'data-count="{escape(s.name)}">{escape(s.name)} per second'
            f" (total {sum(s.counts)})</text>"
        )
    return "\n".join(out)


def write_timeline(
    ops: list[Op],
    path: str | Path,
    title: str = "oncelog verify timeline",
    result: CheckResult | None = None,
) -> None:
    """Write the timeline page of a history (checking it unless its result is given)."""
    Path(path).write_text(render(ops, title, result), encoding="utf-8")
