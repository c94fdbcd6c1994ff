"""`oncelog groups reset-offsets | delete`, modelled on `kafka-consumer-groups.sh`.

reset-offsets plans new committed offsets for a group's partitions (--to-earliest,
--to-latest, --to-datetime, --shift-by, --to-offset), each clamped to the partition's
[log start, high watermark] as Kafka's tool does, prints the plan (GROUP TOPIC PARTITION
NEW-OFFSET) and commits it only with --execute. A group with members is refused with
Kafka's message: its consumers would overwrite the reset with their next commit.

delete removes a whole group (DeleteGroups; it must be empty), or with --delete-offsets the
group's offsets of some topics (OffsetDelete, which a consumer group may do for topics no
member subscribes to).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from oncelog.cli.console import add_bootstrap, coded, describe_error, fail, print_table
from oncelog.client.admin import Admin
from oncelog.client.configs import delete_offsets
from oncelog.client.connection import ClientError
from oncelog.errors import ErrorCode, error_name
from oncelog.types import TopicPartition

TIMEOUT_S = 10.0
INACTIVE = {"EMPTY", "DEAD"}
STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "UNKNOWN": "Unknown",
}


class UsageError(Exception):
    """A command line Kafka's tool would refuse (exit status 2)."""


class CommandError(Exception):
    """What the command cannot do; one `Error: ...` line, exit status 1."""


def add_parsers(actions: Any) -> None:
    reset = actions.add_parser(
        "reset-offsets", help="move a stopped group's committed offsets (dry run by default)"
    )
    reset.add_argument("--group", required=True, help="the group whose offsets move")
    which = reset.add_mutually_exclusive_group(required=True)
    which.add_argument(
        "--topic",
        action="append",
        help="TOPIC or TOPIC:P,P,... (repeatable); without partitions, all of the topic's",
    )
    which.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )
    spec = reset.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true", help="the log start offset")
    spec.add_argument("--to-latest", action="store_true", help="the log end offset")
    spec.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first offset at or after this time (local time unless an offset is given)",
    )
    spec.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N")
    spec.add_argument(
        "--to-offset", type=int, metavar="N", help="offset N, clamped to the log's bounds"
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print the plan (default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")

    delete = actions.add_parser(
        "delete", help="delete an empty group, or (--delete-offsets) its offsets of topics"
    )
    delete.add_argument("--group", required=True, help="the group to delete")
    delete.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete only the group's offsets of the --topic partitions (OffsetDelete)",
    )
    delete.add_argument("--topic", action="append", help="TOPIC or TOPIC:P,P,... (repeatable)")
    for p in (reset, delete):
        add_bootstrap(p)


def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    # librdkafka's own log lines would come before our one error line: silenced.
    client = AdminClient({"bootstrap.servers": args.bootstrap_server, "log_level": 0})
    try:
        if args.action == "reset-offsets":
            return _reset(client, args)
        return _delete(client, args)
    except UsageError as exc:
        return fail(str(exc), 2)
    except CommandError as exc:
        return fail(str(exc))
    except (KafkaException, TimeoutError) as exc:
        return fail(describe_error(exc) or "no answer from the brokers in time")
    except ClientError as exc:
        return fail(str(exc))


def parse_topic(spec: str) -> tuple[str, list[int] | None]:
    """`topic` or `topic:0,1` (Kafka's --topic syntax for resets)."""
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise UsageError(f"--topic needs a topic name, not {spec!r}")
    if not sep:
        return topic, None
    try:
        partitions = [int(p) for p in parts.split(",") if p.strip()]
    except ValueError:
        raise UsageError(f"--topic {spec!r}: partitions are numbers, TOPIC:0,1,...") from None
    if not partitions:
        raise UsageError(f"--topic {spec!r} names no partition")
    return topic, partitions


def _partitions(client: Any, specs: list[str]) -> list[TopicPartition]:
    out: list[TopicPartition] = []
    metadata = client.list_topics(timeout=TIMEOUT_S)
    for spec in specs:
        topic, wanted = parse_topic(spec)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            raise CommandError(
                coded(ErrorCode.unknown_topic_or_partition, f"Topic '{topic}' does not exist.")
            )
        if wanted is None:
            wanted = sorted(found.partitions)
        for p in wanted:
            if p not in found.partitions:
                raise CommandError(
                    coded(
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic '{topic}' has no partition {p}.",
                    )
                )
            out.append(TopicPartition(topic, p))
    return out


def group_state(client: Any, group: str) -> str:
    """The group's state by librdkafka's name (DEAD when it does not exist)."""
    from confluent_kafka import KafkaException

    try:
        description = client.describe_consumer_groups([group])[group].result(TIMEOUT_S)
    except KafkaException as exc:
        if getattr(exc.args[0], "name", lambda: "")() == "GROUP_ID_NOT_FOUND":
            return "DEAD"
        raise
    return str(description.state.name) if description.state else "UNKNOWN"


def _committed(client: Any, group: str) -> dict[TopicPartition, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    request = [ConsumerGroupTopicPartitions(group)]
    listed = client.list_consumer_group_offsets(request)[group].result(TIMEOUT_S)
    return {
        TopicPartition(c.topic, c.partition): c.offset
        for c in listed.topic_partitions or []
        if c.offset >= 0
    }


def _list_offsets(client: Any, tps: list[TopicPartition], spec: Any) -> dict[TopicPartition, int]:
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    if not tps:
        return {}
    request = {KafkaTopicPartition(tp.topic, tp.partition): spec for tp in tps}
    futures = client.list_offsets(request, request_timeout=TIMEOUT_S)
    return {
        TopicPartition(k.topic, k.partition): int(f.result(TIMEOUT_S).offset)
        for k, f in futures.items()
    }


def parse_datetime(text: str) -> int:
    """Kafka's --to-datetime: ISO-8601, local time unless it carries an offset or Z."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS.sss (optionally with +HH:MM)"
        ) from None
    if moment.tzinfo is None:
        moment = moment.astimezone()
    return int(moment.timestamp() * 1000)


def _reset(client: Any, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

    group = args.group
    timestamp = parse_datetime(args.to_datetime) if args.to_datetime is not None else None
    state = group_state(client, group)
    if state not in INACTIVE:
        raise CommandError(
            f"Assignments can only be reset if the group '{group}' is inactive, but the "
            f"current state is {STATE_NAMES.get(state, state)}."
        )
    committed = _committed(client, group)
    chosen = committed if args.all_topics else _partitions(client, args.topic)
    tps = sorted(set(chosen))
    earliest = _list_offsets(client, tps, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
    latest = _list_offsets(client, tps, OffsetSpec.latest())  # type: ignore[no-untyped-call]
    plan: dict[TopicPartition, int] = {}
    for tp in tps:
        low, high = earliest[tp], latest[tp]
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            if tp not in committed:
                raise CommandError(
                    f"Cannot shift offset for partition {tp.topic}-{tp.partition} since there "
                    "is no current committed offset"
                )
            target = committed[tp] + args.shift_by
        else:
            target = -1  # filled from the time lookup below
        plan[tp] = target
    if timestamp is not None:
        found = _list_offsets(client, tps, OffsetSpec.for_timestamp(timestamp))
        # No record at or after the time: the log end, as Kafka's tool does.
        plan = {tp: found[tp] if found[tp] >= 0 else latest[tp] for tp in tps}
    for tp, target in plan.items():
        plan[tp] = _clamped(tp, target, earliest[tp], latest[tp])

    print_table(
        ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"),
        [(group, tp.topic, tp.partition, plan[tp]) for tp in sorted(plan)],
    )
    if not args.execute:
        if not args.dry_run:
            print(
                "WARN: No action will be performed as the --execute option is missing.",
                file=sys.stderr,
            )
        return 0
    return _commit(client, group, plan)


def _clamped(tp: TopicPartition, target: int, low: int, high: int) -> int:
    """Kafka's checkOffsetsRange: within [log start, log end], with its warnings."""
    name = f"{tp.topic}-{tp.partition}"
    if target > high:
        print(
            f"New offset ({target}) is higher than latest offset for topic partition {name}. "
            f"Value will be set to {high}",
            file=sys.stderr,
        )
        return high
    if target < low:
        print(
            f"New offset ({target}) is lower than earliest offset for topic partition {name}. "
            f"Value will be set to {low}",
            file=sys.stderr,
        )
        return low
    return target


def _commit(client: Any, group: str, plan: dict[TopicPartition, int]) -> int:
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    if not plan:
        return 0
    request = ConsumerGroupTopicPartitions(
        group, [KafkaTopicPartition(tp.topic, tp.partition, off) for tp, off in plan.items()]
    )
    result = client.alter_consumer_group_offsets([request])[group].result(TIMEOUT_S)
    failed = [tp for tp in result.topic_partitions or [] if tp.error is not None]
    if failed:
        first = failed[0]
        return fail(
            f"cannot commit {first.topic}-{first.partition} for group '{group}': "
            f"{describe_error(first.error)}"
        )
    return 0


def _delete(client: Any, args: argparse.Namespace) -> int:
    group = args.group
    if args.delete_offsets:
        if not args.topic:
            raise UsageError("--delete-offsets needs --topic")
        tps = _partitions(client, args.topic)
        with Admin(args.bootstrap_server, timeout=TIMEOUT_S) as admin:
            codes = delete_offsets(admin, group, tps)
        rows = [
            (tp.topic, tp.partition, "Successful" if code == 0 else f"Error: {error_name(code)}")
            for tp, code in sorted(codes.items())
        ]
        print_table(("TOPIC", "PARTITION", "STATUS"), rows)
        return 1 if any(codes.values()) else 0
    if args.topic:
        raise UsageError("--topic goes with --delete-offsets")
    from confluent_kafka import KafkaException

    try:
        client.delete_consumer_groups([group], request_timeout=TIMEOUT_S)[group].result(TIMEOUT_S)
    except KafkaException as exc:
        raise CommandError(
            f"Deletion of consumer group '{group}' failed: {describe_error(exc)}"
        ) from None
    print(f"Deletion of requested consumer groups ('{group}') was successful.")
    return 0
