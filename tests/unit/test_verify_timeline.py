"""The timeline page: an inline SVG of throughput, errors and fault bands, no external assets."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.verify.history import Fault, FinalRead, Op, Poll, Record, Send, Txn
from oncelog.verify.timeline import build, render, write_timeline


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
    assert ">kill</text>" in page and ">pause</text>" in page
    assert page.count('<g class="fault">') == 2
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "t &lt;1&gt;" in page
    path = tmp_path / "t.html"
    write_timeline([], path)
    assert "<svg" in path.read_text() and "none" in path.read_text()
