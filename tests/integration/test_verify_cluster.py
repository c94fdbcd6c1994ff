"""`oncelog verify run --start-cluster 3`: the workload against etcd and three brokers the tool
starts, with every fault kind; and the same workload against a deliberately weakened cluster,
which must show the writes it loses (proof that the faults bite and the checker sees it).

The long versions (300 s, 30 min soak) are in docs/verify.md; these are bounded to about 90 s each.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from oncelog.verify.history import (
    Fault,
    FinalRead,
    Leaders,
    Poll,
    Send,
    Txn,
    committed_topics,
    read_history,
)
from tests.integration.test_verify_run import verify_run

ALL_FAULTS = ("kill", "pause", "partition", "etcd", "bounce", "move", "crash")


def test_every_cluster_fault_and_no_anomaly(tmp_path: Path) -> None:
    """Every fault kind on the default topics: RF 3 and, next to it, `-rf2` and `-rf1`, whose
    partitions live on some brokers only, and transactions spanning the three. (With RF 3 on
    three brokers alone, every broker hosted every partition: a coordinator that checked
    AddPartitionsToTxn against its own logs went unnoticed, fixed in 844749f.)"""
    history, report, timeline = tmp_path / "h.jsonl", tmp_path / "r.json", tmp_path / "t.html"
    args = ["--start-cluster", "3", "--duration", "60", "--faults", ",".join(ALL_FAULTS)]
    # Every kind must fit in 60 s even on a loaded machine, where a bounce or a restart takes
    # several seconds: short quiet windows and faults.
    args += ["--fault-interval", "1", "--fault-duration", "2", "--rate", "120"]
    args += ["--copiers", "1", "--subscribe", "--consumers", "2"]
    args += ["--history", str(history), "--report", str(report), "--timeline", str(timeline)]
    args += ["--data-dir", str(tmp_path / "cluster")]  # its logs stay for a failure's post-mortem
    proc = verify_run(*args, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "OK: no anomalies" in proc.stdout
    ops = read_history(history)
    assert_spread_over_topics(ops, proc.stdout)
    started = {o.kind for o in ops if isinstance(o, Fault) and o.phase == "start"}
    assert started == set(ALL_FAULTS)
    ended = [o for o in ops if isinstance(o, Fault) and o.phase == "end"]
    assert len(ended) >= len([o for o in ops if isinstance(o, Fault) and o.phase == "start"])
    # Targets chosen by role from metadata, and the roles recorded as they moved.
    details = " ".join(o.detail or "" for o in ops if isinstance(o, Fault))
    assert "leader of" in details
    leaders = [o for o in ops if isinstance(o, Leaders)]
    assert len(leaders) >= 2 and leaders[0].controller > 0
    assert len({o.leaders for o in leaders}) >= 2  # a leader moved under the faults
    data = json.loads(report.read_text())
    assert data["ok"] is True and data["stats"]["acknowledged"] > 1000
    page = timeline.read_text()
    assert "who led (from metadata)" in page
    assert 'data-lane="controller"' in page
    for kind in ALL_FAULTS:
        assert re.search(rf"#\d+ {kind} ", page), kind


def assert_spread_over_topics(ops: list[Any], stdout: str) -> None:
    """Records of every topic were acknowledged, polled (under their own topic) and final-read,
    and committed transactions wrote to all three topics at once."""
    main = next(o.topic for o in ops if isinstance(o, Send) and o.source is None)
    topics = {main, f"{main}-rf2", f"{main}-rf1"}
    ok = [o for o in ops if isinstance(o, Send) and o.phase == "ok"]
    acked = {o.topic for o in ok if o.txn is None}
    txn_acked = {o.topic for o in ok if o.txn is not None}
    assert topics <= acked and topics <= txn_acked, (acked, txn_acked)
    polled = {r.topic for o in ops if isinstance(o, Poll) for r in o.records}
    assert topics <= polled, polled
    finals = {o.topic for o in ops if isinstance(o, FinalRead) and o.records}
    assert topics <= finals, finals
    # Most commits of the transactional producers succeed. Before 844749f most failed
    # (UNKNOWN_TOPIC_OR_PART from AddPartitionsToTxn: 5 of 23 committed in this test), which
    # the checker rightly does not count as anomalies: failed transactions lose nothing.
    commits = [o for o in ops if isinstance(o, Txn) and o.action == "commit"]
    commits = [o for o in commits if o.process.startswith("txn") and o.phase != "invoke"]
    failed = [o.error for o in commits if o.phase != "ok"]
    assert len(failed) * 2 < len(commits), f"{len(failed)} of {len(commits)}: {failed[:5]}"
    spans = committed_topics(ops)
    wide = [t for t in spans.values() if topics <= t]
    assert len(wide) >= 10, f"{len(wide)} of {len(spans)} committed transactions span all"
    # Default placement: the RF 1 partitions live on different brokers, so every transaction
    # coordinator lacks some of them.
    first = next(o for o in ops if isinstance(o, Leaders))
    assert len({n for t, _, n in first.leaders if t == f"{main}-rf1"}) >= 2, first.leaders
    for topic in topics:  # the summary's per-topic table
        assert re.search(rf"^{re.escape(topic)} +\d+ +[1-9]\d* ", stdout, re.M), topic
    assert "committed transactions writing to 2+ topics:" in stdout


def test_a_weakened_cluster_shows_the_writes_it_loses(tmp_path: Path) -> None:
    """min.insync.replicas=1, unclean leader election and acks=1 producers: a leader isolated
    from its peers and etcd (clients still reach it) keeps acknowledging writes that the new
    leader never had; they are lost, and the checker must say so, naming the fault."""
    report = tmp_path / "r.json"
    args = ["--start-cluster", "3", "--duration", "40", "--faults", "partition,kill"]
    args += ["--min-insync-replicas", "1", "--acks", "1"]
    args += ["--broker-config", "unclean.leader.election.enable=true"]
    args += ["--fault-interval", "2", "--fault-duration", "6", "--rate", "300"]
    args += ["--txn-producers", "0", "--history", str(tmp_path / "h.jsonl")]
    args += ["--report", str(report)]
    proc = verify_run(*args, timeout=400)
    assert proc.returncode == 1, proc.stdout + proc.stderr[-3000:]
    data = json.loads(report.read_text())
    lost = data["counts"]["lost-write"] + data["counts"]["unseen"]
    assert lost > 0, data["counts"]
    assert "anomalies by the fault active during them" in proc.stdout
    examples = data["examples"].get("lost-write", []) + data["examples"].get("unseen", [])
    attributed = [e for e in examples if e["faults"]]
    assert attributed, data["examples"]
