"""`oncelog verify transactions`: Kafka's transactions system test, ours.

Seeds an input topic with integers, copies them with transactional consume-transform-produce
copiers while brokers are killed or bounced, then checks that the output holds every input
exactly once and in order (`oncelog.verify.txn_system`). Exit 0 clean, 1 on anomalies, 2 when
the run itself broke (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from oncelog.cli.console import BootstrapServers, exit_on_sigterm
from oncelog.verify.txn_system import FAULT_KINDS, RunBroken, TxnTestConfig, run, summary


def add_parser(verify_sub: Any) -> None:
    p = verify_sub.add_parser(
        "transactions",
        help="copy integers through transactional copiers while brokers fail; check exactly once",
        description="Kafka's transactions system test: seed N integers, copy them with "
        "transactional consume-transform-produce copiers while brokers are killed or bounced, "
        "then check the output topic holds every input exactly once, in input order.",
    )
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--bootstrap",
        help="an existing Kafka cluster (HOST:PORT[,...]); no broker faults",
        action=BootstrapServers,
    )
    target.add_argument(
        "--start-cluster",
        type=int,
        metavar="N",
        help="start etcd and N oncelog brokers in a temporary directory (allows --faults)",
    )
    p.add_argument(
        "--replication-factor",
        type=int,
        help="replication factor of the input and output topics (default: min(3, brokers))",
    )
    p.add_argument(
        "--min-insync-replicas",
        type=int,
        help="min.insync.replicas of the topics (default: min(2, replication factor))",
    )
    p.add_argument(
        "--messages", type=int, default=100_000, help="integers to seed and copy (100000)"
    )
    p.add_argument(
        "--copiers",
        type=int,
        default=3,
        help="transactional copiers, one transactional.id each, in one consumer group (3)",
    )
    p.add_argument(
        "--partitions", type=int, default=4, help="partitions of the input and output topic (4)"
    )
    p.add_argument(
        "--transaction-size",
        type=int,
        default=500,
        help="most records a copier copies in one transaction (500)",
    )
    p.add_argument(
        "--faults",
        default="",
        help="comma-separated broker faults, taken in turn: kill (SIGKILL, restart after "
        "--fault-downtime), bounce (clean SIGTERM, restart); needs --start-cluster",
    )
    p.add_argument(
        "--fault-interval",
        type=float,
        default=4.0,
        help="quiet seconds between one fault's recovery (full ISRs) and the next fault (4)",
    )
    p.add_argument(
        "--fault-downtime",
        type=float,
        default=4.0,
        help="seconds a killed broker stays down before its restart (4)",
    )
    p.add_argument(
        "--faults-min",
        type=int,
        help="hold the copy back so at least this many faults hit it: the copy is cut into "
        "N+1 slices, slice k opens when fault k starts (default 10 with --faults, else 0)",
    )
    p.add_argument(
        "--recovery-timeout",
        type=float,
        default=60.0,
        help="longest wait after a restart for every partition's full ISR (60 s)",
    )
    p.add_argument(
        "--copy-timeout",
        type=float,
        default=900.0,
        help="seconds the copy may take before the run is declared incomplete (900)",
    )
    p.add_argument(
        "--data-dir",
        help="with --start-cluster: put the cluster (data, broker and etcd logs) in this new "
        "directory and keep it, as evidence, instead of a temporary directory",
    )
    p.add_argument("--report", help="write the JSON report to this file")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    p.set_defaults(func=run_transactions)


def config_from(args: argparse.Namespace) -> TxnTestConfig:
    """The run's configuration; ValueError for a usage error."""
    faults = [f.strip() for f in args.faults.split(",") if f.strip()]
    unknown = sorted(set(faults) - set(FAULT_KINDS))
    if unknown:
        raise ValueError(f"unknown fault {', '.join(unknown)} (known: {', '.join(FAULT_KINDS)})")
    if faults and args.start_cluster is None:
        raise ValueError("--faults needs --start-cluster (faults hit brokers this tool started)")
    if args.faults_min is not None and args.faults_min > 0 and not faults:
        raise ValueError("--faults-min needs --faults")
    positive = {
        "--messages": args.messages,
        "--copiers": args.copiers,
        "--partitions": args.partitions,
        "--transaction-size": args.transaction_size,
    }
    for name, value in positive.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, not {value}")
    keep = Path(args.data_dir) if args.data_dir else None
    if keep is not None and (args.start_cluster is None or keep.exists()):
        raise ValueError("--data-dir needs --start-cluster and a directory that does not exist")
    if args.start_cluster is not None and args.start_cluster < 1:
        raise ValueError(f"--start-cluster must be at least 1, not {args.start_cluster}")
    return TxnTestConfig(
        bootstrap=args.bootstrap,
        start_cluster=args.start_cluster or 0,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        messages=args.messages,
        copiers=args.copiers,
        partitions=args.partitions,
        transaction_size=args.transaction_size,
        faults=faults,
        fault_interval=args.fault_interval,
        fault_downtime=args.fault_downtime,
        faults_min=args.faults_min,
        recovery_timeout=args.recovery_timeout,
        copy_timeout=args.copy_timeout,
        progress=not args.quiet,
        data_dir=keep,
    )


def run_transactions(args: argparse.Namespace) -> int:
    """Exit 0 when every input was copied exactly once and in order, 1 on anomalies, 2 when
    the run broke (usage errors included)."""

    exit_on_sigterm()
    try:
        config = config_from(args)
    except ValueError as e:
        print(f"oncelog verify transactions: {e}", file=sys.stderr)
        return 2
    try:
        report = run(config)
    except (RunBroken, RuntimeError, ValueError, OSError, KafkaException) as e:
        print(f"verify transactions failed: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("verify transactions interrupted", file=sys.stderr)
        return 2
    print(summary(report))
    if args.report:
        try:
            Path(args.report).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
        except OSError as e:
            print(f"cannot write the report: {e}", file=sys.stderr)
            return 2
    if report["ok"]:
        return 0
    anomalies = report["input"]["ok"] is False or report["output"]["ok"] is False
    return 1 if anomalies else 2


def _one_line(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and hasattr(e.args[0], "str"):
        return str(e.args[0].str())
    return " ".join(str(e).split()) or type(e).__name__
