"""The timeline picture of a history: throughput, errors and faults over time, as one HTML page.

Why HTML with an inline SVG: it needs nothing but the standard library to write and a browser to
look at, has no external assets (a report can be mailed or archived as one file), and its text
(fault labels, axis values) stays searchable.

Per second of the history: acknowledged sends (``send`` ``ok``), polled records (records of
``poll`` ``ok``), definite failures (``fail``) and indeterminate outcomes (``info``) of sends,
transactions and polls; faults are shaded bands from their ``start`` to their ``end`` (to the end
of the history when never healed), labelled with their kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from html import escape
from pathlib import Path

from oncelog.verify.history import Fault, FinalRead, Op, Poll, Send, Txn

WIDTH, PLOT_H, GAP, LEFT, RIGHT, TOP = 960, 180, 40, 60, 20, 30
FAULT_COLOURS = {"kill": "#f4a6a6", "pause": "#a6c8f4", "crash": "#f4d9a6"}
OTHER_FAULT = "#d9d9d9"


@dataclass(frozen=True, slots=True)
class Band:
    """One fault window, in seconds from the start of the history."""

    kind: str
    target: str
    start: float
    end: float


@dataclass(frozen=True, slots=True)
class Series:
    """Counts per second of one quantity."""

    name: str
    colour: str
    counts: list[int]


@dataclass(frozen=True, slots=True)
class Timeline:
    """What the picture shows: per-second series in two panels, and the fault bands."""

    seconds: int
    throughput: list[Series]
    errors: list[Series]
    bands: list[Band]


def build(ops: list[Op]) -> Timeline:
    """Bucket a history into seconds from its first timed operation (final reads excluded)."""
    timed = [op for op in ops if not isinstance(op, FinalRead) and op.time > 0]
    t0 = min((op.time for op in timed), default=0.0)
    t1 = max((op.time for op in timed), default=0.0)
    seconds = max(1, math.ceil(t1 - t0) + 1)
    sends, polled, fails, infos = ([0] * seconds for _ in range(4))
    open_faults: dict[tuple[str, str], float] = {}
    bands: list[Band] = []
    for op in timed:
        at = op.time - t0
        i = min(seconds - 1, int(at))
        if isinstance(op, Fault):
            key = (op.kind, op.target)
            if op.phase == "start":
                open_faults[key] = at
            elif key in open_faults:
                bands.append(Band(op.kind, op.target, open_faults.pop(key), at))
            continue
        if isinstance(op, Send | Txn | Poll):
            if op.phase == "fail":
                fails[i] += 1
            elif op.phase == "info":
                infos[i] += 1
            elif op.phase == "ok":
                if isinstance(op, Send):
                    sends[i] += 1
                elif isinstance(op, Poll):
                    polled[i] += len(op.records)
    bands += [Band(k, t, start, t1 - t0) for (k, t), start in open_faults.items()]
    bands.sort(key=lambda b: b.start)
    return Timeline(
        seconds,
        [
            Series("acknowledged sends/s", "#1f77b4", sends),
            Series("polled records/s", "#2ca02c", polled),
        ],
        [Series("failures/s", "#d62728", fails), Series("indeterminate/s", "#ff7f0e", infos)],
        bands,
    )


def render(ops: list[Op], title: str = "oncelog verify timeline") -> str:
    """A self-contained HTML page (inline SVG, no scripts, no external assets)."""
    tl = build(ops)
    plot_w = WIDTH - LEFT - RIGHT
    height = TOP + 2 * PLOT_H + GAP + 40
    x_scale = plot_w / tl.seconds
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
    ]
    for b in tl.bands:
        x = LEFT + b.start * x_scale
        w = max(1.0, (b.end - b.start) * x_scale)
        colour = FAULT_COLOURS.get(b.kind, OTHER_FAULT)
        label = escape(b.kind)
        parts.append(
            f'<g class="fault"><title>{label} {escape(b.target)} '
            f"{b.start:.1f}s-{b.end:.1f}s</title>"
            f'<rect x="{x:.1f}" y="{TOP}" width="{w:.1f}" height="{2 * PLOT_H + GAP}" '
            f'fill="{colour}" fill-opacity="0.5"/>'
            f'<text x="{x + 2:.1f}" y="{TOP - 4}" fill="#444">{label}</text></g>'
        )
    for panel, series in enumerate((tl.throughput, tl.errors)):
        top = TOP + panel * (PLOT_H + GAP)
        parts.append(_panel(series, top, plot_w, x_scale))
    bottom = TOP + 2 * PLOT_H + GAP
    step = max(1, math.ceil(tl.seconds / 20))
    for s in range(0, tl.seconds + 1, step):
        x = LEFT + s * x_scale
        parts.append(f'<text x="{x:.1f}" y="{bottom + 14}" text-anchor="middle">{s}s</text>')
    parts.append("</svg>")
    faults = "".join(
        f"<li>{escape(b.kind)} {escape(b.target)}: {b.start:.1f}s to {b.end:.1f}s</li>"
        for b in tl.bands
    )
    return (
        '<!DOCTYPE html>\n<html><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title></head><body>\n<h1>{escape(title)}</h1>\n"
        + "\n".join(parts)
        + f"\n<h2>Faults</h2><ul>{faults or '<li>none</li>'}</ul>\n</body></html>\n"
    )


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
            f'points="{points}"><title>{escape(s.name)}</title></polyline>'
        )
        out.append(
            f'<text x="{LEFT + 8 + n * 200}" y="{top + 14}" fill="{s.colour}">{escape(s.name)}'
            f" (total {sum(s.counts)})</text>"
        )
    return "\n".join(out)


def write_timeline(ops: list[Op], path: str | Path, title: str = "oncelog verify timeline") -> None:
    """Write the timeline page of a history."""
    Path(path).write_text(render(ops, title), encoding="utf-8")
