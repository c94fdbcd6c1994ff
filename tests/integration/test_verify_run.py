"""`oncelog verify run` end to end: a short faulted workload against a broker it starts itself.

Why a subprocess: it exercises the command users run, including the broker it starts, the
kill/restart and pause/resume faults, the history it writes and the exit code of the check.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from oncelog.verify.history import Fault, FinalRead, Poll, Send, read_history
from oncelog.verify.workload import PROGRESS_COUNTS
from tests.broker_process import BrokerProcess


def verify_run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "oncelog", "verify", "run", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)


def test_verify_run_with_faults_is_clean(tmp_path: Path) -> None:
    """Broker SIGKILL and SIGSTOP, client process crashes, a copier: zero anomalies."""
    history, report = tmp_path / "history.jsonl", tmp_path / "report.json"
    args = ["--start-broker", "--duration", "24", "--faults", "kill,crash,pause,crash"]
    args += ["--fault-interval", "2", "--rate", "60", "--partitions", "2"]
    args += ["--producers", "1", "--txn-producers", "1", "--consumers", "2", "--copiers", "1"]
    timeline = tmp_path / "timeline.html"
    args += ["--history", str(history), "--report", str(report), "--timeline", str(timeline)]
    proc = verify_run(*args)
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
    assert {("crash", "start"), ("crash", "end")} <= kinds
    crashed = {o.target for o in ops if isinstance(o, Fault) and o.kind == "crash"}
    assert len(crashed) >= 2  # the rotation reaches more than one writer
    copies = [o for o in ops if isinstance(o, Send) and o.source is not None and o.phase == "ok"]
    assert copies
    assert {f.topic for f in finals} == {copies[0].topic, copies[0].source.topic}
    data = json.loads(report.read_text())
    assert data["ok"] is True
    assert data["stats"]["faults"] == len(data["faults"]) >= 2
    page = timeline.read_text()
    assert "<svg" in page and page.count('<g class="fault">') == data["stats"]["faults"]
    assert re.search(r"#\d+ kill broker@[\d.:]+</text>", page)
    assert re.search(r"#\d+ pause broker@[\d.:]+</text>", page)
    assert page.index("OK: no anomalies") < page.index('<table class="anomalies">')
    assert page.index('<table class="anomalies">') < page.index("<svg")
    # The last progress line, the summary, the report and the timeline agree on every count.
    done = next(x for x in proc.stderr.splitlines() if "(done after" in x).partition("(")[0]
    shown = {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", done)}
    assert shown == {k: data["stats"][k] for k in PROGRESS_COUNTS}
    summary = next(x for x in proc.stdout.splitlines() if x.startswith("history:"))
    assert {k: int(v) for k, v in re.findall(r"([a-z_]+) (\d+)", summary)} == data["stats"]
    counts = page.partition('<table class="counts">')[2].partition("</table>")[0]
    table = re.findall(r'<tr><td>([a-z_]+)</td><td class="n">(\d+)</td>', counts)
    assert {k: int(v) for k, v in table} == data["stats"]


def test_verify_run_catches_the_mock_clusters_aborted_reads(tmp_path: Path) -> None:
    """librdkafka's mock cluster serves aborted records to read_committed consumers: the same
    workload that is clean on oncelog must report those aborted reads, with their proof."""
    report = tmp_path / "report.json"
    args = ["--mock-cluster", "--duration", "8", "--rate", "100", "--partitions", "2"]
    args += ["--producers", "1", "--txn-producers", "2", "--abort-probability", "0.4"]
    args += ["--consumers", "2", "--history", str(tmp_path / "h.jsonl"), "--report", str(report)]
    proc = verify_run(*args, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["ok"] is False
    assert data["counts"]["aborted-read"] > 0
    example = data["examples"]["aborted-read"][0]
    assert example["details"]["status"] == "aborted"
    assert len(example["ops"]) == 2  # the aborted send and the read_committed poll


def test_verify_run_against_a_running_broker(tmp_path: Path, broker: BrokerProcess) -> None:
    """--bootstrap: any broker address; broker faults need a broker the tool started."""
    history = tmp_path / "h.jsonl"
    args = ["--bootstrap", broker.bootstrap, "--duration", "6", "--partitions", "2"]
    proc = verify_run(*args, "--history", str(history), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "OK: no anomalies" in proc.stdout
    assert any(isinstance(o, FinalRead) and o.records for o in read_history(history))
    refused = verify_run(*args, "--faults", "kill", "--history", str(history), timeout=60)
    assert refused.returncode == 2
    assert "needs --start-broker" in refused.stderr
