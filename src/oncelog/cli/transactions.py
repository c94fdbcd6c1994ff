"""`oncelog transactions ...`: operator tools for transactions (KIP-664, `kafka-transactions.sh`).

A hanging transaction (open on a partition while its coordinator no longer drives it) pins
the partition's LSO and stalls every read_committed consumer. `find-hanging` lists open
transactions older than a threshold whose coordinator does not have them ongoing (or has
had them ongoing for longer than that too); `abort` writes an ABORT marker for one.

Columns are Kafka's; times are ISO-8601 UTC and durations are for humans (`4m05s`).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from oncelog.cli import groups
from oncelog.cli.console import (
    MISSING,
    add_bootstrap,
    coded,
    duration,
    exits_quietly,
    fail,
    print_table,
    timestamp,
)
from oncelog.client.admin import Admin, ProducerInfo
from oncelog.client.connection import ClientError
from oncelog.client.transactions import find_hanging
from oncelog.errors import ErrorCode, error_name
from oncelog.types import TopicPartition


def add_parsers(sub: Any) -> None:
    """`transactions`, then `groups` (the other operator tool, in its own module)."""
    txn = sub.add_parser("transactions", help="inspect and abort transactions")
    actions = txn.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="transactional ids known to the coordinators")
    describe = actions.add_parser("describe", help="the state of one transactional id")
    describe.add_argument("--transactional-id", required=True, help="the transactional id")
    producers = actions.add_parser(
        "describe-producers", help="the active producers of a partition and their open transaction"
    )
    producers.add_argument("--topic", required=True, help="topic name")
    producers.add_argument("--partition", type=int, required=True, help="partition number")
    hanging = actions.add_parser("find-hanging", help="open transactions nobody will end")
    hanging.add_argument(
        "--topic", action="append", help="limit the search to this topic; repeatable"
    )
    hanging.add_argument(
        "--max-transaction-timeout-ms",
        type=int,
        default=900_000,
        help="transactions open longer than this are suspect "
        "(the brokers' transaction.max.timeout.ms; default 900000)",
    )
    abort = actions.add_parser("abort", help="write an ABORT marker for a hanging transaction")
    abort.add_argument("--topic", required=True, help="topic name")
    abort.add_argument("--partition", type=int, required=True, help="partition number")
    abort.add_argument(
        "--start-offset",
        type=int,
        help="first offset of the transaction to abort (see describe-producers or find-hanging)",
    )
    abort.add_argument(
        "--producer-id",
        type=int,
        help="the producer whose open transaction to abort (instead of or with --start-offset)",
    )
    for p in actions.choices.values():
        add_bootstrap(p)
    txn.set_defaults(func=run_transactions)
    groups.add_parsers(sub)


@exits_quietly
def run_transactions(args: argparse.Namespace) -> int:
    try:
        with Admin(args.bootstrap_server) as admin:
            return int(_ACTIONS[args.action](admin, args))
    except ClientError as exc:
        return fail(str(exc))


def _list(admin: Admin, args: argparse.Namespace) -> int:
    rows = [
        (t.transactional_id, t.coordinator_id, t.producer_id, t.transaction_state)
        for t in sorted(admin.list_transactions(), key=lambda t: t.transactional_id)
    ]
    print_table(("TransactionalId", "Coordinator", "ProducerId", "TransactionState"), rows)
    return 0


def _describe(admin: Admin, args: argparse.Namespace) -> int:
    txn_id = args.transactional_id
    coordinator = admin.coordinator_id(txn_id, 1)
    t = admin.describe_transaction(txn_id)
    if int(t.error_code) != 0:
        return fail(f"cannot describe transactional id '{txn_id}': {error_name(int(t.error_code))}")
    start = t.transaction_start_time_ms
    partitions = ",".join(f"{d.topic}-{p}" for d in t.topics for p in sorted(d.partitions))
    print_table(
        (
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTime",
            "TransactionDuration",
            "TopicPartitions",
        ),
        [
            (
                coordinator,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.transaction_state,
                t.transaction_timeout_ms,
                timestamp(start),
                MISSING if start < 0 else duration(_now_ms() - start),
                partitions or MISSING,
            )
        ],
    )
    return 0


def _describe_producers(admin: Admin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if tp not in admin.leaders:
        return fail(coded(ErrorCode.unknown_topic_or_partition, f"Partition {tp} does not exist."))
    rows = [
        (
            p.producer_id,
            p.producer_epoch,
            p.coordinator_epoch,
            p.last_sequence,
            timestamp(p.last_timestamp),
            MISSING if p.txn_start_offset < 0 else p.txn_start_offset,
        )
        for p in admin.describe_producers([tp])
    ]
    headers = (
        "ProducerId",
        "ProducerEpoch",
        "LatestCoordinatorEpoch",
        "LastSequence",
        "LastTimestamp",
        "CurrentTransactionStartOffset",
    )
    print_table(headers, rows)
    return 0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _find_hanging(admin: Admin, args: argparse.Namespace) -> int:
    missing = [t for t in args.topic or [] if t not in admin.topics()]
    if missing:
        return fail(
            coded(ErrorCode.unknown_topic_or_partition, f"Topic '{missing[0]}' does not exist.")
        )
    hanging = find_hanging(admin, args.topic, args.max_transaction_timeout_ms)
    now = _now_ms()
    rows = [
        (
            p.tp.topic,
            p.tp.partition,
            p.producer_id,
            p.producer_epoch,
            p.coordinator_epoch,
            p.txn_start_offset,
            timestamp(p.last_timestamp),
            duration(now - p.last_timestamp),
        )
        for p in sorted(hanging, key=lambda p: (p.tp, p.txn_start_offset))
    ]
    headers = (
        "Topic",
        "Partition",
        "ProducerId",
        "ProducerEpoch",
        "CoordinatorEpoch",
        "StartOffset",
        "LastTimestamp",
        "Duration",
    )
    print_table(headers, rows)
    return 0


def _abort(admin: Admin, args: argparse.Namespace) -> int:
    tp = TopicPartition(args.topic, args.partition)
    if tp not in admin.leaders:
        return fail(coded(ErrorCode.unknown_topic_or_partition, f"Partition {tp} does not exist."))
    open_txns = sorted(
        (p for p in admin.describe_producers([tp]) if p.txn_start_offset >= 0),
        key=lambda p: p.txn_start_offset,
    )
    chosen = [
        p
        for p in open_txns
        if (args.start_offset is None or p.txn_start_offset == args.start_offset)
        and (args.producer_id is None or p.producer_id == args.producer_id)
    ]
    if len(chosen) != 1:
        return fail(_no_single_match(tp, args, open_txns, chosen))
    producer = chosen[0]
    what = (
        f"the transaction of producer {producer.producer_id} (epoch {producer.producer_epoch}) "
        f"open on {tp} since offset {producer.txn_start_offset}"
    )
    code = admin.abort(producer)
    if code != 0:
        return fail(f"cannot abort {what}: {error_name(code)}")
    print(f"Aborted {what}.")
    return 0


def _no_single_match(
    tp: TopicPartition,
    args: argparse.Namespace,
    open_txns: list[ProducerInfo],
    chosen: list[ProducerInfo],
) -> str:
    """Why `abort` did not pick exactly one transaction, with the ones that are open."""
    listing = ", ".join(
        f"producer {p.producer_id} at offset {p.txn_start_offset}" for p in open_txns
    )
    if not open_txns:
        return f"no open transaction on {tp}"
    if chosen:
        return (
            f"{len(chosen)} open transactions on {tp} match ({listing}); "
            "name one with --start-offset"
        )
    wanted = []
    if args.start_offset is not None:
        wanted.append(f"starts at offset {args.start_offset}")
    if args.producer_id is not None:
        wanted.append(f"belongs to producer {args.producer_id}")
    return f"no open transaction on {tp} {' and '.join(wanted)}; open: {listing}"


_ACTIONS = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "find-hanging": _find_hanging,
    "abort": _abort,
}
