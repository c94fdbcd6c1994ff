"""`oncelog verify run` end to end: a short faulted workload against a broker it starts itself.

Why a subprocess: it exercises the command users run, including the broker it starts, the
kill/restart and pause/resume faults, the history it writes and the exit code of the check.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from oncelog.verify.history import Fault, FinalRead, Poll, Send, read_history


def test_verify_run_with_faults_is_clean(tmp_path: Path) -> None:
    history, report = tmp_path / "history.jsonl", tmp_path / "report.json"
    args = [sys.executable, "-m", "oncelog", "verify", "run", "--start-broker"]
    args += ["--duration", "20", "--faults", "kill,pause", "--rate", "60", "--partitions", "2"]
    args += ["--producers", "1", "--txn-producers", "1", "--consumers", "2"]
    timeline = tmp_path / "timeline.html"
    args += ["--history", str(history), "--report", str(report), "--timeline", str(timeline)]
    proc = subprocess.run(args, check=False, capture_output=True, text=True, timeout=55)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "OK: no anomalies" in proc.stdout
    assert "faults" in proc.stderr  # the progress line
    ops = read_history(history)
    sends = [o for o in ops if isinstance(o, Send) and o.phase == "ok"]
    assert sends and any(s.txn is not None for s in sends)
    assert any(isinstance(o, Poll) and o.records for o in ops)
    finals = [o for o in ops if isinstance(o, FinalRead)]
    assert {f.partition for f in finals} == {0, 1}
    kinds = {(o.kind, o.phase) for o in ops if isinstance(o, Fault)}
    assert {("kill", "start"), ("kill", "end"), ("pause", "start"), ("pause", "end")} <= kinds
    data = json.loads(report.read_text())
    assert data["ok"] is True
    assert data["run"]["faults"] >= 2
    page = timeline.read_text()
    assert "<svg" in page and '<g class="fault">' in page
    assert ">kill</text>" in page and ">pause</text>" in page
