"""`oncelog verify run` and `oncelog verify check HISTORY`: record and check exactly-once histories.

Checking is separate from running the workload so a history can be checked again later (after a
checker fix, or on another machine) and so histories recorded by other tools can be checked too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from oncelog.cli import verify_transactions
from oncelog.cli.console import BootstrapServers, exit_on_sigterm
from oncelog.verify.checker import ALLOWED, CheckResult, check, write_report
from oncelog.verify.history import (
    TOPIC_COUNTS,
    HistoryError,
    Note,
    Op,
    Send,
    Txn,
    committed_topics,
    per_topic,
    read_history,
)
from oncelog.verify.timeline import write_timeline
from oncelog.verify.workload import RunConfig, run


def add_parsers(sub: Any) -> None:
    verify = sub.add_parser("verify", help="check a broker's exactly-once promises")
    verify_sub = verify.add_subparsers(dest="action", required=True)
    chk = verify_sub.add_parser("check", help="check a recorded history (JSON lines)")
    chk.add_argument("history", help="the history file")
    chk.add_argument("--json", dest="report", help="also write a JSON report here")
    chk.add_argument("--timeline", help="also write an HTML timeline (throughput, errors, faults)")
    chk.set_defaults(func=run_check)
    rn = verify_sub.add_parser("run", help="run a workload of real clients, then check it")
    target = rn.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--bootstrap", help="an existing broker (host:port)", action=BootstrapServers
    )
    target.add_argument(
        "--start-broker", action="store_true", help="start an oncelog broker (allows --faults)"
    )
    target.add_argument(
        "--start-cluster",
        type=int,
        metavar="N",
        default=0,
        help="start etcd and N oncelog brokers, every link through a relay that can be cut"
        " (allows every --faults kind)",
    )
    target.add_argument(
        "--mock-cluster",
        action="store_true",
        help="start librdkafka's built-in mock cluster, which does not implement read_committed"
        " or fencing: the check shows the violations a real broker must not have",
    )
    rn.add_argument("--duration", type=float, default=30.0, help="seconds of workload")
    rn.add_argument(
        "--rate", type=float, default=300.0, help="sends per second, all producers (300)"
    )
    rn.add_argument("--partitions", type=int, default=3)
    rn.add_argument(
        "--replication-factor",
        type=int,
        help="of the workload's topic (default: 1; with --start-cluster N, 3 or N if smaller,"
        " plus topics TOPIC-rf2 and TOPIC-rf1 of RF 2 and 1 (those below it), so partitions"
        " live on some brokers only and a transaction spans partitions its coordinator does"
        " not host; an explicit value runs the one topic only)",
    )
    rn.add_argument(
        "--min-insync-replicas",
        type=int,
        help="min.insync.replicas of the cluster started (default 2, or the replication"
        " factor if smaller)",
    )
    rn.add_argument(
        "--broker-config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker setting for the broker or cluster started (repeatable), e.g."
        " unclean.leader.election.enable=true",
    )
    rn.add_argument(
        "--acks",
        choices=("all", "1"),
        default="all",
        help="all: idempotent producers (default); 1: plain producers, acks=1, no retries",
    )
    rn.add_argument("--producers", type=int, default=2, help="idempotent producers")
    rn.add_argument("--txn-producers", type=int, default=1, help="transactional producers")
    rn.add_argument("--abort-probability", type=float, default=0.2)
    rn.add_argument("--consumers", type=int, default=2, help="assign consumers (rc, ru, ...)")
    rn.add_argument(
        "--copiers", type=int, default=0, help="consume-transform-produce copiers (transactional)"
    )
    rn.add_argument(
        "--subscribe", action="store_true", help="consumers subscribe (own group) instead of assign"
    )
    rn.add_argument(
        "--faults",
        default="",
        help="comma-separated: kill, pause (a broker, by role on a cluster), partition, etcd,"
        " bounce, move (need --start-cluster), crash (writer client processes)",
    )
    rn.add_argument("--fault-interval", type=float, default=3.0, help="quiet seconds between")
    rn.add_argument("--fault-duration", type=float, default=2.0, help="seconds each fault lasts")
    rn.add_argument(
        "--data-dir",
        help="keep the started broker's or cluster's data and logs here (default: a temporary"
        " directory, removed at the end)",
    )
    rn.add_argument("--history", default="verify-history.jsonl", help="history file to write")
    rn.add_argument("--report", help="JSON report file")
    rn.add_argument("--timeline", help="HTML timeline of throughput, errors and faults")
    rn.set_defaults(func=run_workload)
    verify_transactions.add_parser(verify_sub)


def run_check(args: argparse.Namespace) -> int:
    """Exit 0 when the history has no failure anomaly, 1 when it has, 2 when it is unreadable."""
    try:
        ops = read_history(args.history)
    except (OSError, HistoryError) as e:
        print(f"cannot read history: {e}", file=sys.stderr)
        return 2
    result = check(ops)
    print(summary(result, ops))
    if args.report:
        write_report(result, args.report)
    if args.timeline:
        write_timeline(ops, args.timeline, f"oncelog verify: {args.history}", result)
    return 0 if result.ok else 1


def run_workload(args: argparse.Namespace) -> int:
    """Run, then check like `verify check`: exit 0 clean, 1 on anomalies, 2 if the run broke."""
    exit_on_sigterm()
    broker_config = {}
    for item in args.broker_config:
        key, eq, value = item.partition("=")
        if not eq or not key:
            print(f"verify run: --broker-config takes KEY=VALUE, not {item!r}", file=sys.stderr)
            return 2
        broker_config[key.strip()] = value.strip()
    config = RunConfig(
        history=Path(args.history),
        bootstrap=args.bootstrap,
        start_broker=args.start_broker,
        mock_cluster=args.mock_cluster,
        start_cluster=args.start_cluster,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        broker_config=broker_config,
        acks=args.acks,
        data_dir=Path(args.data_dir) if args.data_dir else None,
        duration=args.duration,
        rate=args.rate,
        partitions=args.partitions,
        producers=args.producers,
        txn_producers=args.txn_producers,
        abort_probability=args.abort_probability,
        consumers=args.consumers,
        copiers=args.copiers,
        subscribe=args.subscribe,
        faults=[f for f in args.faults.split(",") if f],
        fault_interval=args.fault_interval,
        fault_duration=args.fault_duration,
    )
    began = time.monotonic()
    try:
        run(config)
    except (RuntimeError, ValueError, OSError) as e:
        print(f"verify run failed: {e}", file=sys.stderr)
        return 2
    # The counts come from the history read back, through the same tally as the progress line.
    ops = read_history(config.history)
    result = check(ops)
    print(summary(result, ops))
    if args.timeline:
        write_timeline(ops, args.timeline, f"oncelog verify run: {config.history}", result)
    if args.report:
        report = result.to_json()
        report["run"] = {
            "seconds": round(time.monotonic() - began, 1),
            "history": str(config.history),
        }
        Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0 if result.ok else 1


def summary(result: CheckResult, ops: list[Op] | None = None) -> str:
    """The anomaly table, then the first example of each kind found (with the copier's notes
    around a copy anomaly, when `ops` are given)."""
    stats = ", ".join(f"{k} {v}" for k, v in result.stats.items())
    counts = result.counts
    width = max(len(k) for k in counts)
    lines = [f"history: {stats}", ""]
    table = topic_table(ops) if ops else []
    if table:
        lines += [*table, ""]
    warning = commit_warning(ops) if ops else None
    if warning:
        lines += [warning, ""]
    lines.append(f"{'anomaly':<{width}}  count")
    lines += [f"{kind:<{width}}  {n}" for kind, n in counts.items()]
    lines.append(f"(allowed by Kafka's design, not checked: {', '.join(ALLOWED)})")
    seen: set[str] = set()
    for a in result.anomalies:
        if a.kind not in seen:
            seen.add(a.kind)
            refs = ", ".join(o.label() for o in a.ops)
            note = a.fault_note(result.faults)
            lines.append(
                f"e.g. {a.kind} on {a.topic}-{a.partition}: {a.details} by {refs}"
                + (f" ({note})" if note else "")
            )
            if ops is not None and a.kind in COPY_ANOMALIES:
                lines += notes_around(ops, [r.position for r in a.ops])
    if result.anomalies and result.faults:
        by_fault: dict[str, int] = {}
        for a in result.anomalies:
            kinds = sorted({result.faults[n - 1].kind for n in a.faults}) or ["none"]
            for kind in kinds:
                by_fault[kind] = by_fault.get(kind, 0) + 1
        shown = ", ".join(f"{k} {n}" for k, n in sorted(by_fault.items()))
        lines.append(f"anomalies by the fault active during them: {shown}")
    lines.append("")
    lines.append(result.verdict)
    return "\n".join(lines)


def topic_table(ops: list[Op]) -> list[str]:
    """Per topic: sends, acknowledged, polled and final-read records; then how many committed
    transactions wrote to more than one topic (a run spreads them over topics of several
    replication factors, whose partitions several brokers lead)."""
    topics = per_topic(ops)
    if not topics:
        return []
    width = max(len("topic"), *(len(t) for t in topics))
    lines = [f"{'topic':<{width}}  " + "  ".join(TOPIC_COUNTS)]
    for topic, counts in topics.items():
        cells = "  ".join(f"{counts[k]:>{len(k)}}" for k in TOPIC_COUNTS)
        lines.append(f"{topic:<{width}}  {cells}")
    spans = committed_topics(ops)
    if len(topics) > 1 and spans:
        wide = sum(len(t) > 1 for t in spans.values())
        lines.append(f"committed transactions writing to 2+ topics: {wide} of {len(spans)}")
    return lines


def commit_warning(ops: list[Op]) -> str | None:
    """A warning when most commits did not succeed. Not an anomaly (a transaction that did not
    commit is owed nothing), so the verdict stays; but a broker refusing most transactions is
    broken all the same (as before 844749f, every transaction writing to a partition its
    coordinator did not host failed with UNKNOWN_TOPIC_OR_PART, and the check was clean)."""
    commits = [o for o in ops if isinstance(o, Txn) and o.action == "commit"]
    commits = [o for o in commits if o.phase != "invoke"]
    failed = [o for o in commits if o.phase != "ok"]
    if not commits or len(failed) * 2 < len(commits):
        return None
    errors = Counter((o.error or "no error").partition(":")[0] for o in failed)
    common = ", ".join(f"{e} {n}" for e, n in errors.most_common(3))
    return (
        f"warning: {len(failed)} of {len(commits)} commits did not succeed ({common});"
        " not anomalies, but a broker should commit most transactions"
    )


#: The anomalies of copiers, whose notes (rewinds, rebalances) explain them.
COPY_ANOMALIES = ("duplicate-copy", "missing-copy")
#: At most this many notes are shown under an example.
NOTES_SHOWN = 40


def notes_around(ops: list[Op], positions: list[int]) -> list[str]:
    """The notes of the copiers that sent the anomaly's copies, from 5 s before the first to
    2 s after the last (of every copier, to the end, when no copy was sent); the latest
    `NOTES_SHOWN` of them."""
    sends = [op for op in (ops[p] for p in positions) if isinstance(op, Send)]
    processes = {op.process.rsplit(".", 1)[0] for op in sends}
    first = min((op.time for op in sends), default=0.0) - 5
    last = max((op.time for op in sends), default=float("inf")) + 2
    notes = [
        op
        for op in ops
        if isinstance(op, Note)
        and first <= op.time <= last
        and (not processes or op.process.rsplit(".", 1)[0] in processes)
    ]
    t0 = min((op.time for op in ops if op.time > 0), default=0.0)
    return [
        f"  {op.time - t0:8.3f}s {op.process} {op.what} {op.detail}".rstrip()
        for op in notes[-NOTES_SHOWN:]
    ]
