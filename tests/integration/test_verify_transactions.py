"""`oncelog verify transactions` end to end: Kafka's transactions system test on a 3-broker
cluster the command starts itself, with broker kills and a bounce during the copy.

Why a subprocess: it is the command users run, cluster, faults, exit code and report included.
Reduced size (20,000 integers, 3 faults at least) to stay within CI's budget (about a minute
here); `--faults-min 3` holds the copy back so the faults hit it while it runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from oncelog.verify.txn_system import ROLES


def verify_transactions(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "oncelog", "verify", "transactions", *args]
    return subprocess.run(command, check=False, capture_output=True, text=True, timeout=timeout)


def test_copies_exactly_once_in_order_across_broker_kills_and_a_bounce(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    args = ["--start-cluster", "3", "--messages", "20000", "--copiers", "3", "--partitions", "4"]
    args += ["--faults", "kill,bounce", "--faults-min", "3", "--fault-interval", "3"]
    proc = verify_transactions(*args, "--report", str(report))
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "OK: every input copied exactly once, in order" in proc.stdout
    assert "committed" in proc.stderr  # progress lines
    data = json.loads(report.read_text())
    assert data["ok"] is True and data["complete"] is True
    assert data["messages"] == {
        "seeded": 20000,
        "copied": 20000,
        "duplicates": 0,
        "missing": 0,
        "order_violations": 0,
        "unexpected": 0,
    }
    assert data["input"]["ok"] is True and data["input"]["copied"] == 20000
    faults = data["faults"]
    assert faults["kills"] >= 2 and faults["bounces"] >= 1
    assert len(faults["list"]) == faults["kills"] + faults["bounces"]
    assert {f["role"] for f in faults["list"]} <= set(ROLES)
    assert len({f["role"] for f in faults["list"]}) >= 2  # targets chosen by role, in turn
    assert all(f["broker"] in (1, 2, 3) for f in faults["list"])
    assert data["copiers"]["count"] == 3 and data["copiers"]["commits"] > 0
    assert set(data["seconds"]) >= {"seed", "copy", "check", "total"}
    # The summary printed is the report's.
    assert "seeded 20000, copied 20000, duplicates 0, missing 0, order violations 0" in proc.stdout


def test_faults_need_a_cluster_the_tool_started() -> None:
    """A usage error: one line on stderr, exit 2, no traceback, nothing started."""
    proc = verify_transactions("--bootstrap", "127.0.0.1:9", "--faults", "kill", timeout=60)
    assert proc.returncode == 2
    assert "--faults needs --start-cluster" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    proc = verify_transactions("--start-cluster", "3", "--faults", "pause", timeout=60)
    assert proc.returncode == 2 and "unknown fault pause" in proc.stderr
    proc = verify_transactions("--start-cluster", "3", "--bootstrap", "127.0.0.1:9", timeout=60)
    assert proc.returncode == 2 and "not allowed with" in proc.stderr  # argparse's own
