"""`oncelog transactions ...` and `oncelog groups ...`: operator tools (KIP-664 style).

A hanging transaction (open on a partition while its coordinator no longer drives it) pins
the partition's LSO and stalls every read_committed consumer. `find-hanging` lists open
transactions older than a threshold whose coordinator does not have them ongoing (or has
had them ongoing for longer than that too); `abort` writes an ABORT marker for one.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from typing import Any

from oncelog.client.admin import Admin, ProducerInfo
from oncelog.client.connection import ClientError
from oncelog.types import TopicPartition

BOOTSTRAP = "127.0.0.1:9092"


def add_parsers(sub: Any) -> None:
    txn = sub.add_parser("transactions", help="inspect and abort transactions")
    txn_sub = txn.add_subparsers(dest="action", required=True)
    txn_sub.add_parser("list", help="transactional ids known to the coordinators")
    describe = txn_sub.add_parser("describe", help="one transactional id")
    describe.add_argument("--transactional-id", required=True)
    producers = txn_sub.add_parser("describe-producers", help="producer state of a partition")
    producers.add_argument("--topic", required=True)
    producers.add_argument("--partition", type=int, required=True)
    hanging = txn_sub.add_parser("find-hanging", help="open transactions nobody will end")
    hanging.add_argument("--topic", action="append", help="limit to these topics")
    hanging.add_argument(
        "--max-transaction-timeout-ms",
        type=int,
        default=900_000,
        help="transactions open longer than this are suspect (transaction.max.timeout.ms)",
    )
    abort = txn_sub.add_parser("abort", help="write an ABORT marker for a hanging transaction")
    abort.add_argument("--topic", required=True)
    abort.add_argument("--partition", type=int, required=True)
    abort.add_argument("--start-offset", type=int, help="the open transaction's first offset")
    abort.add_argument("--producer-id", type=int)
    for p in txn_sub.choices.values():
        p.add_argument("--bootstrap-server", "-b", default=BOOTSTRAP)
    txn.set_defaults(func=run_transactions)

    groups = sub.add_parser("groups", help="consumer groups and their lag")
    groups_sub = groups.add_subparsers(dest="action", required=True)
    groups_sub.add_parser("list")
    gdescribe = groups_sub.add_parser("describe")
    gdescribe.add_argument("group", nargs="+")
    gdescribe.add_argument(
        "--isolation-level",
        default="read_committed",
        choices=["read_committed", "read_uncommitted"],
        help="lag against the LSO (read_committed) or the high watermark",
    )
    for p in groups_sub.choices.values():
        p.add_argument("--bootstrap-server", "-b", default=BOOTSTRAP)
    groups.set_defaults(func=run_groups)


def run_transactions(args: argparse.Namespace) -> int:
    try:
        with Admin(args.bootstrap_server) as admin:
            return int(_ACTIONS[args.action](admin, args))
    except ClientError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1


def _list(admin: Admin, args: argparse.Namespace) -> int:
    print("TransactionalId\tProducerId\tState")
    for t in sorted(admin.list_transactions(), key=lambda t: t.transactional_id):
        print(f"{t.transactional_id}\t{t.producer_id}\t{t.transaction_state}")
    return 0


def _describe(admin: Admin, args: argparse.Namespace) -> int:
    t = admin.describe_transaction(args.transactional_id)
    if int(t.error_code) != 0:
        print(f"Error: {args.transactional_id}: error {int(t.error_code)}", file=sys.stderr)
        return 1
    partitions = ",".join(f"{d.topic}-{p}" for d in t.topics for p in d.partitions)
    print("TransactionalId\tProducerId\tProducerEpoch\tState\tTimeoutMs\tStartTime\tPartitions")
    start = t.transaction_start_time_ms
    when = "-" if start < 0 else datetime.fromtimestamp(start / 1000, UTC).isoformat()
    print(
        f"{t.transactional_id}\t{t.producer_id}\t{t.producer_epoch}\t{t.transaction_state}\t"
        f"{t.transaction_timeout_ms}\t{when}\t{partitions}"
    )
    return 0


def _describe_producers(admin: Admin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    print(
        "ProducerId\tProducerEpoch\tLastSequence\tLastTimestamp\tCoordinatorEpoch\tTxnStartOffset"
    )
    for p in admin.describe_producers([tp]):
        print(
            f"{p.producer_id}\t{p.producer_epoch}\t{p.last_sequence}\t{p.last_timestamp}\t"
            f"{p.coordinator_epoch}\t{p.txn_start_offset}"
        )
    return 0


def find_hanging(admin: Admin, topics: list[str] | None, max_timeout_ms: int) -> list[ProducerInfo]:
    """Open transactions older than `max_timeout_ms` that no coordinator drives properly."""
    names = topics or [t for t in admin.topics() if not t.startswith("__")]
    tps = [tp for tp in admin.leaders if tp.topic in names]
    now = int(time.time() * 1000)
    suspects = [
        p
        for p in admin.describe_producers(tps)
        if p.txn_start_offset >= 0 and now - p.last_timestamp >= max_timeout_ms
    ]
    if not suspects:
        return []
    known = {
        t.producer_id: t for t in admin.list_transactions(pids=[p.producer_id for p in suspects])
    }
    hanging = []
    for p in suspects:
        listed = known.get(p.producer_id)
        if listed is None or listed.transaction_state != "Ongoing":
            hanging.append(p)
            continue
        t = admin.describe_transaction(listed.transactional_id)
        in_txn = any(d.topic == p.tp.topic and p.tp.partition in d.partitions for d in t.topics)
        started = t.transaction_start_time_ms
        if t.producer_epoch != p.producer_epoch or not in_txn or now - started >= max_timeout_ms:
            hanging.append(p)
    return hanging


def _find_hanging(admin: Admin, args: argparse.Namespace) -> int:
    hanging = find_hanging(admin, args.topic, args.max_transaction_timeout_ms)
    print(
        "Topic\tPartition\tProducerId\tProducerEpoch\tCoordinatorEpoch\tStartOffset\tLastTimestamp"
    )
    for p in hanging:
        print(
            f"{p.tp.topic}\t{p.tp.partition}\t{p.producer_id}\t{p.producer_epoch}\t"
            f"{p.coordinator_epoch}\t{p.txn_start_offset}\t{p.last_timestamp}"
        )
    return 0


def _abort(admin: Admin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    open_txns = [p for p in admin.describe_producers([tp]) if p.txn_start_offset >= 0]
    chosen = [
        p
        for p in open_txns
        if (args.start_offset is None or p.txn_start_offset == args.start_offset)
        and (args.producer_id is None or p.producer_id == args.producer_id)
    ]
    if len(chosen) != 1:
        print(
            f"Error: {len(chosen)} open transactions on {tp} match; give --start-offset or "
            "--producer-id",
            file=sys.stderr,
        )
        return 1
    code = admin.abort(chosen[0])
    if code != 0:
        print(f"Error: abort on {tp} failed with error {code}", file=sys.stderr)
        return 1
    print(f"Aborted the transaction of producer {chosen[0].producer_id} on {tp}.")
    return 0


_ACTIONS = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "find-hanging": _find_hanging,
    "abort": _abort,
}


def run_groups(args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": args.bootstrap_server})
    if args.action == "list":
        result = client.list_consumer_groups().result(10)
        print("Group\tState")
        for g in sorted(result.valid, key=lambda g: g.group_id):
            print(f"{g.group_id}\t{g.state.name if g.state else ''}")
        return 0
    status = 0
    with Admin(args.bootstrap_server) as admin:
        for group in args.group:
            futures = client.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
            committed = futures[group].result(10).topic_partitions or []
            tps = [TopicPartition(c.topic, c.partition) for c in committed]
            ends = (
                admin.latest_offsets(tps, args.isolation_level == "read_committed") if tps else {}
            )
            print(f"Group {group}")
            print("Topic\tPartition\tCommittedOffset\tEndOffset\tLag")
            for c in sorted(committed, key=lambda c: (c.topic, c.partition)):
                end = ends.get(TopicPartition(c.topic, c.partition), -1)
                lag = end - c.offset if c.offset >= 0 and end >= 0 else -1
                print(f"{c.topic}\t{c.partition}\t{c.offset}\t{end}\t{lag}")
    return status
