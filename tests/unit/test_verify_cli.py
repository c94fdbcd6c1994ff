"""`oncelog verify check` as users run it: exit 0 on a clean history, 1 on a dirty one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from oncelog.verify.history import (
    Fault,
    FinalRead,
    HistoryWriter,
    Op,
    Poll,
    Record,
    Send,
    Txn,
    write_history,
)


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
    from oncelog.verify.workload import progress_line

    counts = {"operations": 5, "sends": 4, "acknowledged": 3, "indeterminate": 1, "faults": 2}
    line = progress_line(10, 20, counts, width=10)
    assert line.startswith("[#####-----]")
    assert "10s/20s" in line and "operations 5" in line and "sends 4" in line
    assert "acknowledged 3" in line and "indeterminate 1" in line and "faults 2" in line
    assert progress_line(99, 20, {}, width=4).startswith("[####]")


def counted_history() -> list[Op]:
    """Every kind of count: a committed and an aborted transaction, an indeterminate send, a send
    cut short (invoked only), an indeterminate poll, and three fault windows, one never healed."""
    t = 1_000.0
    tid = "tid"

    def send(p: str, i: int, value: str, at: float, off: int | None, txn: int | None) -> list[Op]:
        done: list[Op] = [Send(p, i, "invoke", "t", 0, value, None, tid if txn else None, txn)]
        if off is not None:
            done.append(Send(p, i, "ok", "t", 0, value, None, tid if txn else None, txn, off))
        return [
            Send(**{**vars_of(o), "time": at + 0.05 * n})  # type: ignore[arg-type]
            for n, o in enumerate(done)
        ]

    def txn(i: int, action: str, n: int, at: float) -> list[Op]:
        return [
            Txn("q.0", i, "invoke", action, tid, n, time=at),  # type: ignore[arg-type]
            Txn("q.0", i, "ok", action, tid, n, time=at + 0.1),  # type: ignore[arg-type]
        ]

    recs = (Record("t", 0, 0, "a"), Record("t", 0, 1, "b"))
    ops: list[Op] = [
        *send("p.0", 0, "a", t, 0, None),
        Fault("kill", "start", "broker", "SIGKILL", time=t + 0.5),
        *txn(1, "begin", 1, t + 0.2),
        *send("q.0", 2, "b", t + 0.3, 1, 1),
        *send("q.0", 3, "c", t + 0.4, 2, 1),
        *txn(4, "commit", 1, t + 1.5),
        *txn(5, "begin", 2, t + 1.7),
        *send("q.0", 6, "d", t + 1.8, 4, 2),
        *txn(7, "abort", 2, t + 1.9),
        Poll("c.0", 0, "invoke", "assign", "read_committed", time=t + 2.0),
        Poll("c.0", 0, "ok", "assign", "read_committed", recs, time=t + 2.1),
        Fault("kill", "end", "broker", "restarted", time=t + 2.5),
        Fault("pause", "start", "broker", "SIGSTOP", time=t + 2.6),
        Fault("pause", "end", "broker", "SIGCONT", time=t + 2.7),
        Fault("crash", "start", "producer0", "SIGKILL", time=t + 2.8),
        Poll("c.0", 1, "invoke", "assign", "read_committed", time=t + 3.0),
        Poll("c.0", 1, "info", "assign", "read_committed", error="timed out", time=t + 3.2),
        *send("p.0", 8, "e", t + 3.3, None, None),
        Send("p.0", 8, "info", "t", 0, "e", error="timed out", time=t + 3.4),
        *send("p.0", 9, "f", t + 3.5, None, None),  # cut short: no outcome
    ]
    final = tuple(Record("t", 0, o, v) for o, v in ((0, "a"), (1, "b"), (2, "c"), (4, "d")))
    ops.append(FinalRead("t", 0, "read_uncommitted", final, time=t + 9))
    return ops


def vars_of(op: Send) -> dict[str, object]:
    return {k: getattr(op, k) for k in Send.__slots__}


EXPECTED = {
    "operations": 12,  # 6 sends, 4 transaction steps, 2 polls
    "sends": 6,
    "acknowledged": 3,  # a, and b and c of the committed transaction (not d, not e, not f)
    "failed": 0,
    "indeterminate": 2,
    "polls": 1,
    "polled_records": 2,
    "transactions": 2,
    "committed": 1,
    "faults": 3,
    "final_reads": 1,
}


def pairs(text: str) -> dict[str, int]:
    """`name 12` pairs, as the progress line and the summary print counts."""
    return {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", text)}


def test_progress_line_summary_report_and_timeline_agree_on_counts(tmp_path: Path) -> None:
    """One definition per count: the same numbers, under the same names, everywhere."""
    path, report, page = tmp_path / "h.jsonl", tmp_path / "r.json", tmp_path / "t.html"
    write_history(path, counted_history())
    result = run(path, "--json", str(report), "--timeline", str(page))
    assert result.returncode == 0, result.stdout + result.stderr
    summary_line = next(x for x in result.stdout.splitlines() if x.startswith("history:"))
    assert pairs(summary_line) == EXPECTED
    assert json.loads(report.read_text())["stats"] == EXPECTED
    assert len(json.loads(report.read_text())["faults"]) == EXPECTED["faults"]
    html = page.read_text()
    counts_table = html.partition('<table class="counts">')[2].partition("</table>")[0]
    table = dict(re.findall(r'<tr><td>([a-z_]+)</td><td class="n">(\d+)</td>', counts_table))
    assert {k: int(v) for k, v in table.items()} == EXPECTED
    totals = re.findall(r'data-count="([a-z_]+)"[^>]*>[^<]*\(total (\d+)\)', html)
    assert {k: int(v) for k, v in totals} == {
        k: EXPECTED[k] for k in ("acknowledged", "polled_records", "failed", "indeterminate")
    }
    assert html.count('<g class="fault">') == EXPECTED["faults"]
    # The progress line counts the operations as they are recorded.
    from oncelog.verify.workload import PROGRESS_COUNTS, Recorder, progress_line

    with HistoryWriter.open(tmp_path / "live.jsonl") as writer:
        recorder = Recorder(writer, 0.0)
        for op in counted_history():
            recorder.write(op)
    line = progress_line(20, 20, recorder.counts())
    assert pairs(line) == {k: EXPECTED[k] for k in PROGRESS_COUNTS}
