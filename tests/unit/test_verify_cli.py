"""`oncelog verify check` as users run it: exit 0 on a clean history, 1 on a dirty one."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from oncelog.verify.history import FinalRead, Op, Record, Send, write_history


def history(final_values: list[str]) -> list[Op]:
    ops: list[Op] = []
    for i, value in enumerate(("a", "b")):
        ops.append(Send("p", i, "invoke", "t", 0, value))
        ops.append(Send("p", i, "ok", "t", 0, value, offset=i))
    records = tuple(Record("t", 0, o, v) for o, v in enumerate(final_values))
    ops.append(FinalRead("t", 0, "read_committed", records))
    return ops


def run(path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oncelog", "verify", "check", str(path), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_clean_history_exits_0(tmp_path: Path) -> None:
    path = tmp_path / "clean.jsonl"
    write_history(path, history(["a", "b"]))
    result = run(path)
    assert result.returncode == 0, result.stderr
    assert "OK: no anomalies" in result.stdout
    assert "duplicate" in result.stdout  # the table lists every kind


def test_dirty_history_exits_1_and_writes_report(tmp_path: Path) -> None:
    path = tmp_path / "dirty.jsonl"
    write_history(path, history(["a", "b", "b"]))  # b duplicated at offsets 1 and 2
    report = tmp_path / "report.json"
    result = run(path, "--json", str(report))
    assert result.returncode == 1, result.stderr
    assert "FAIL" in result.stdout
    data = json.loads(report.read_text())
    assert data["ok"] is False and data["counts"]["duplicate"] == 1


def test_unreadable_history_exits_2(tmp_path: Path) -> None:
    result = run(tmp_path / "missing.jsonl")
    assert result.returncode == 2
    assert "cannot read history" in result.stderr


def test_progress_line_draws_a_bar() -> None:
    from oncelog.verify.workload import RunStats, progress_line

    line = progress_line(10, 20, RunStats(ops=5, errors=1, faults=2), width=10)
    assert line.startswith("[#####-----]")
    assert "10s/20s" in line and "ops 5" in line and "errors 1" in line and "faults 2" in line
    assert progress_line(99, 20, RunStats(), width=4).startswith("[####]")
