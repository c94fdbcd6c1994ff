"""The timeline page: an inline SVG of throughput, errors and fault bands, no external assets."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from oncelog.verify.history import Fault, FinalRead, Leaders, Op, Poll, Record, Send, Txn
from oncelog.verify.timeline import Band, build, fault_labels, render, write_timeline


def synthetic() -> list[Op]:
    t0 = 1_000.0
    ops: list[Op] = []
    for i in range(10):
        ops.append(Send("p", i, "invoke", "t", 0, f"v{i}", time=t0 + i))
        ops.append(Send("p", i, "ok", "t", 0, f"v{i}", offset=i, time=t0 + i + 0.1))
    ops.append(Send("p", 10, "info", "t", 0, "v10", error="timed out", time=t0 + 3.5))
    ops.append(Txn("q", 0, "fail", "commit", "tid", 1, error="fenced", time=t0 + 4.5))
    recs = (Record("t", 0, 0, "v0"), Record("t", 0, 1, "v1"))
    ops.append(Poll("c", 0, "ok", "assign", "read_committed", recs, time=t0 + 2.2))
    ops.append(Fault("kill", "start", "broker-0", time=t0 + 3))
    ops.append(Fault("kill", "end", "broker-0", time=t0 + 5))
    ops.append(Fault("pause", "start", "broker-0", time=t0 + 7))  # never healed
    ops.append(FinalRead("t", 0, "read_uncommitted", recs, time=t0 + 100))
    return ops


def test_build_buckets_per_second_and_pairs_fault_windows() -> None:
    tl = build(synthetic())
    assert tl.seconds == 11  # final reads do not stretch the time axis
    assert sum(tl.throughput[0].counts) == 10
    assert tl.throughput[1].counts[2] == 2
    assert tl.errors[0].counts[4] == 1 and tl.errors[1].counts[3] == 1
    assert [(b.kind, b.start, b.end) for b in tl.bands] == [
        ("kill", 3.0, 5.0),
        ("pause", 7.0, pytest.approx(9.1)),
    ]


def test_render_is_self_contained_with_fault_bands(tmp_path: Path) -> None:
    page = render(synthetic(), "t <1>")
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "</svg>" in page
    assert ">#1 kill broker-0</text>" in page and ">#2 pause broker-0</text>" in page
    assert page.count('<g class="fault">') == 2
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "t &lt;1&gt;" in page
    path = tmp_path / "t.html"
    write_timeline([], path)
    assert "<svg" in path.read_text() and "none" in path.read_text()


def test_verdict_and_anomaly_table_come_before_the_charts() -> None:
    """A reader sees first whether the broker passed, and which anomalies it had."""
    every = tuple(Record("t", 0, i, f"v{i}") for i in range(10))
    ops = [*synthetic()[:-1], FinalRead("t", 0, "read_uncommitted", every, time=2_000)]
    clean = render(ops)
    assert 0 <= clean.find("OK: no anomalies") < clean.find('<table class="anomalies">')
    assert clean.index('<table class="anomalies">') < clean.index("<svg")
    dup = (*every, Record("t", 0, 11, "v1"))  # v1 at offsets 1 and 11: one duplicate
    page = render([*synthetic()[:-1], FinalRead("t", 0, "read_uncommitted", dup, time=2_000)])
    charts = page.index("<svg")
    verdict = page.find("FAIL: 1 anomalies")
    table = page.find('<table class="anomalies">')
    row = page.find('<tr class="hit"><td>duplicate</td><td class="n">1</td>')
    assert 0 <= verdict < table < row < charts
    assert "OK: no anomalies" not in page


def label_boxes(page: str) -> list[tuple[float, float, float, str]]:
    """(left, right, baseline, text) of every fault label, its width at 7 px a character."""
    found = re.findall(
        r'<g class="fault">.*?<text x="([\d.]+)" y="([\d.]+)"[^>]*>([^<]*)</text>', page
    )
    return [(float(x), float(x) + 7.0 * len(t), float(y), t) for x, y, t in found]


def test_fault_labels_on_the_page_do_not_overlap() -> None:
    """Five faults within two seconds (a crash loop, a kill during a pause): readable labels."""
    ops = synthetic()[:-4]
    t0 = 1_000.0
    for n, kind in enumerate(("pause", "kill", "crash", "kill", "pause")):
        ops.append(Fault(kind, "start", f"target{n}", time=t0 + 5 + 0.4 * n))
        ops.append(Fault(kind, "end", f"target{n}", time=t0 + 5.3 + 0.4 * n))
    ops.append(Fault("crash", "start", "last", time=t0 + 9.05))  # at the right edge
    page = render(ops)
    boxes = label_boxes(page)
    assert len(boxes) == 6
    for i, a in enumerate(boxes):
        assert a[1] <= 960  # inside the picture
        for b in boxes[i + 1 :]:
            same_row = abs(a[2] - b[2]) < 11
            assert not (same_row and a[0] < b[1] and b[0] < a[1]), (a, b)
    # The line from a label down to its band crosses no other label.
    lines = re.findall(r'<line x1="([\d.]+)" y1="([\d.]+)" x2="[\d.]+" y2="([\d.]+)"', page)
    assert len(lines) == 6
    for x, top, bottom in ((float(x), float(y1), float(y2)) for x, y1, y2 in lines):
        for left, right, baseline, text in boxes:
            crosses = left <= x <= right and top < baseline and baseline - 10 < bottom
            assert not crosses, (x, top, bottom, text)


def test_close_fault_windows_get_labels_in_separate_lanes() -> None:
    """Labels go in the first lane they clear; far apart windows share the first lane."""
    bands = [
        Band(1, "kill", "b", 0.0, 2.0),
        Band(2, "pause", "b", 0.5, 1.0),  # overlaps #1's label
        Band(3, "crash", "c", 1.0, 1.5),  # overlaps both
        Band(4, "kill", "b", 10.0, 12.0),  # far away: back in lane 0
        Band(5, "pause", "b", 10.2, 11.0),
        Band(6, "kill", "b", 15.5, 16.0),  # clears lane 0, not lane 1 below it: lane 2
        Band(7, "crash", "c", 88.0, 88.0),  # at the right edge: kept inside the picture
    ]
    labels = fault_labels(bands, x_scale=10.0)
    assert [lb.lane for lb in labels] == [0, 1, 2, 0, 1, 2, 0]
    assert labels[-1].x + labels[-1].width <= 960 - 20
    for lane in {lb.lane for lb in labels}:
        row = sorted((lb.x, lb.x + lb.width) for lb in labels if lb.lane == lane)
        assert all(end <= start for (_, end), (start, _) in itertools.pairwise(row))


def test_role_lanes_show_who_led_from_each_change_to_the_next() -> None:
    """The leaders observations become one lane for the controller and one per partition."""
    ops = synthetic()
    ops.insert(0, Leaders(1, (("t", 0, 2), ("t", 1, 3)), time=1_000.0))
    ops.insert(5, Leaders(1, (("t", 0, 3), ("t", 1, 3)), time=1_004.0))
    ops.insert(9, Leaders(2, (("t", 0, -1), ("t", 1, 3)), time=1_006.0))
    tl = build(ops)
    lanes = {lane.name: lane.segments for lane in tl.roles}
    assert lanes["controller"] == [(0.0, 6.0, 1), (6.0, pytest.approx(9.1), 2)]
    assert lanes["t-0"] == [(0.0, 4.0, 2), (4.0, 6.0, 3), (6.0, pytest.approx(9.1), -1)]
    assert lanes["t-1"] == [(0.0, pytest.approx(9.1), 3)]
    page = render(ops)
    assert page.count('<g class="role"') == 6
    assert 'data-lane="t-0" data-node="-1"' in page and "who led" in page


def test_a_history_without_leaders_has_no_role_lanes() -> None:
    assert build(synthetic()).roles == []
    assert "who led" not in render(synthetic())
