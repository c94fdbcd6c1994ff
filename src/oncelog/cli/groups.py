"""`oncelog groups list | describe | reset-offsets | delete`, like `kafka-consumer-groups.sh`
(reset-offsets and delete in `group_admin`).

`describe` prints Kafka's columns: one row per partition a member is assigned, with its
committed offset (`-` when none), the end offset and the lag, then the partitions the group
committed to that no member holds. The end offset is the LSO for read_committed (the
default), so the lag is what a read_committed consumer still has to read.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from oncelog.cli import group_admin
from oncelog.cli.console import (
    MISSING,
    add_bootstrap,
    coded,
    describe_error,
    exits_quietly,
    fail,
    print_table,
)
from oncelog.cli.topics import admin_client
from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

TIMEOUT_S = 10.0
HEADERS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
REBALANCING = {"PREPARING_REBALANCE", "COMPLETING_REBALANCE", "ASSIGNING", "RECONCILING"}


def add_parsers(sub: Any) -> None:
    groups = sub.add_parser("groups", help="consumer groups and their lag")
    actions = groups.add_subparsers(dest="action", required=True)
    actions.add_parser("list", help="every consumer group and its state")
    describe = actions.add_parser(
        "describe", help="offsets, lag and members of groups (like kafka-consumer-groups)"
    )
    describe.add_argument("group", nargs="+", help="the groups to describe")
    describe.add_argument(
        "--isolation-level",
        default="read_committed",
        choices=["read_committed", "read_uncommitted"],
        help="LOG-END-OFFSET is the LSO (read_committed, default) or the high watermark",
    )
    for p in actions.choices.values():
        add_bootstrap(p)
    group_admin.add_parsers(actions)
    groups.set_defaults(func=run_groups)


@exits_quietly
def run_groups(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    if args.action in ("reset-offsets", "delete"):
        return group_admin.run(args)
    client = admin_client(args.bootstrap_server)
    try:
        if args.action == "list":
            return _list(client)
        with Admin(args.bootstrap_server) as admin:
            status = 0
            for i, group in enumerate(args.group):
                if i:
                    print()
                status = max(status, _describe(client, admin, group, args.isolation_level))
            return status
    except (KafkaException, TimeoutError) as exc:
        return fail(describe_error(exc) or "no answer from the brokers in time")
    except ClientError as exc:
        return fail(str(exc))


#: librdkafka's ConsumerGroupState names as Kafka's tools print them.
KAFKA_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "UNKNOWN": "Unknown",
}


def _list(client: Any) -> int:
    result = client.list_consumer_groups().result(TIMEOUT_S)
    for error in result.errors:
        fail(describe_error(error))
    rows = [
        (g.group_id, KAFKA_STATE_NAMES.get(g.state.name, g.state.name) if g.state else MISSING)
        for g in sorted(result.valid, key=lambda g: g.group_id)
    ]
    print_table(("GROUP", "STATE"), rows)
    return 1 if result.errors else 0


def _describe(client: Any, admin: Admin, group: str, isolation: str) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException

    try:
        description = client.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    except KafkaException as exc:
        if getattr(exc.args[0], "name", lambda: "")() == "GROUP_ID_NOT_FOUND":
            return fail(
                coded(ErrorCode.group_id_not_found, f"Consumer group '{group}' does not exist.")
            )
        return fail(f"Consumer group '{group}': {describe_error(exc)}")
    state = description.state.name if description.state else "UNKNOWN"
    if state == "DEAD":
        return fail(
            coded(ErrorCode.group_id_not_found, f"Consumer group '{group}' does not exist.")
        )
    if state == "EMPTY":
        print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
    elif state in REBALANCING:
        print(f"Warning: Consumer group '{group}' is rebalancing.", file=sys.stderr)

    request = [ConsumerGroupTopicPartitions(group)]
    listed = client.list_consumer_group_offsets(request)[group].result(TIMEOUT_S)
    committed = {
        TopicPartition(c.topic, c.partition): c.offset
        for c in listed.topic_partitions or []
        if c.offset >= 0
    }
    members = sorted(description.members, key=lambda m: -len(m.assignment.topic_partitions))
    owners: dict[TopicPartition, Any] = {}
    for member in members:
        for tp in member.assignment.topic_partitions:
            owners.setdefault(TopicPartition(tp.topic, tp.partition), member)
    unowned = sorted(set(committed) - set(owners))
    ends = admin.latest_offsets([*owners, *unowned], isolation == "read_committed")

    rows: list[tuple[object, ...]] = []
    for member in members:
        mine = sorted(tp for tp, owner in owners.items() if owner is member)
        for tp in mine:
            rows.append(
                (
                    *_offsets(group, tp, committed, ends),
                    member.member_id,
                    member.host,
                    member.client_id,
                )
            )
    for tp in unowned:
        rows.append((*_offsets(group, tp, committed, ends), MISSING, MISSING, MISSING))
    if rows:
        print_table(HEADERS, rows)
    return 0


def _offsets(
    group: str, tp: TopicPartition, committed: dict[TopicPartition, int], ends: dict[Any, int]
) -> tuple[object, ...]:
    """GROUP, TOPIC, PARTITION, CURRENT-OFFSET, LOG-END-OFFSET and LAG of one partition."""
    offset, end = committed.get(tp), ends.get(tp)
    lag = end - offset if offset is not None and end is not None else None
    return (
        group,
        tp.topic,
        tp.partition,
        MISSING if offset is None else offset,
        MISSING if end is None else end,
        MISSING if lag is None else lag,
    )
