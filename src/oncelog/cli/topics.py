"""`oncelog topics create | list | describe | alter | delete`, modelled on `kafka-topics.sh`.

Built on confluent-kafka's admin client, so it works against Apache Kafka as well. Partition
sizes and the log cleaner's state come from one DescribeLogDirs request per broker
(`oncelog.client`); the cleaner's fields are oncelog's tags, `-` against Apache Kafka.
`describe` adds `Offline: ...` to a partition with replicas on brokers that are not alive,
and, like Kafka's, `--under-replicated-partitions` / `--unavailable-partitions` print only
the partitions whose ISR is smaller than their replicas / that have no live leader.
librdkafka's own log lines are silenced: an unreachable broker is one `Error:` line.
"""

from __future__ import annotations

import argparse
from typing import Any

from oncelog.cli.console import (
    MISSING,
    add_bootstrap,
    describe_error,
    exits_quietly,
    fail,
    timestamp,
)
from oncelog.client import reassignments
from oncelog.client.admin import Admin, LogDirInfo
from oncelog.client.connection import ClientError
from oncelog.types import TopicPartition

TIMEOUT_S = 10.0


def add_parsers(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, delete topics")
    actions = topics.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic", help="the topic's name")
    create.add_argument(
        "--partitions",
        type=int,
        default=-1,
        help="number of partitions (default: the broker's num.partitions)",
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="copies of each partition (default: the broker's default.replication.factor)",
    )
    create.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="explicit replicas, Kafka's syntax: partitions by commas, brokers by colons "
        "(preferred leader first), e.g. 1:2:3,2:3:1; excludes --partitions and "
        "--replication-factor",
    )
    create.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic config such as cleanup.policy=compact; repeatable",
    )
    listing = actions.add_parser("list", help="topic names, internal topics included")
    describe = actions.add_parser(
        "describe", help="id, partitions, replication factor, configs and leaders of topics"
    )
    describe.add_argument("topic", nargs="*", help="topics to describe (default: all)")
    describe.add_argument(
        "--under-replicated-partitions",
        action="store_true",
        help="only partitions whose ISR is smaller than their replicas",
    )
    describe.add_argument(
        "--unavailable-partitions",
        action="store_true",
        help="only partitions without a live leader",
    )
    for p in (listing, describe):
        p.add_argument(
            "--exclude-internal",
            action="store_true",
            help="leave out internal topics (__consumer_offsets, __transaction_state)",
        )
    alter = actions.add_parser("alter", help="add partitions to a topic")
    alter.add_argument("topic", help="the topic's name")
    alter.add_argument(
        "--partitions", type=int, required=True, help="the new, larger, partition count"
    )
    alter.add_argument(
        "--replica-assignment",
        metavar="B:B,B:B",
        help="replicas of the added partitions only, e.g. 1:2:3,2:3:1",
    )
    delete = actions.add_parser("delete", help="delete topics")
    delete.add_argument("topic", nargs="+", help="topics to delete")
    for p in actions.choices.values():
        add_bootstrap(p)
    topics.set_defaults(func=run_topics)


def pairs(items: list[str]) -> dict[str, str]:
    """`KEY=VALUE` options as a mapping (a later key wins)."""
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key.strip()] = value
    return out


def replica_assignment(text: str) -> list[list[int]]:
    """Kafka's `--replica-assignment`: `1:2:3,2:3:1` (ValueError if malformed)."""
    try:
        out = [[int(b) for b in part.split(":")] for part in text.split(",")]
    except ValueError:
        raise ValueError(f"bad --replica-assignment {text!r}: expected e.g. 1:2:3,2:3:1") from None
    return out


def admin_client(bootstrap: str) -> Any:
    """confluent-kafka's AdminClient without librdkafka's own log lines on stderr (a down
    broker would print one per reconnect); failures reach the caller as errors instead."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})


@exits_quietly
def run_topics(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions, NewTopic  # type: ignore[attr-defined]

    admin = admin_client(args.bootstrap_server)
    try:
        if args.action == "create":
            configs = pairs(args.config)
            if args.replica_assignment:
                if args.partitions != -1 or args.replication_factor != -1:
                    return fail(
                        "--replica-assignment excludes --partitions and --replication-factor", 2
                    )
                try:
                    manual = replica_assignment(args.replica_assignment)
                except ValueError as exc:
                    return fail(str(exc), 2)
                # confluent-kafka wants the count with an assignment (it sends -1 itself).
                topic = NewTopic(
                    args.topic, len(manual), replica_assignment=manual, config=configs
                )
            else:
                topic = NewTopic(
                    args.topic, args.partitions, args.replication_factor, config=configs
                )
            return _wait(admin.create_topics([topic]), "Created topic")
        if args.action == "alter":
            try:
                added = (
                    replica_assignment(args.replica_assignment)
                    if args.replica_assignment
                    else None
                )
            except ValueError as exc:
                return fail(str(exc), 2)
            grow = (
                NewPartitions(args.topic, args.partitions, added)
                if added
                else NewPartitions(args.topic, args.partitions)
            )
            return _wait(admin.create_partitions([grow]), "Altered topic")
        if args.action == "delete":
            return _wait(admin.delete_topics(args.topic), "Deleted topic")
        if args.action == "list":
            for name in _names(admin, args.exclude_internal):
                print(name)
            return 0
        return _describe(admin, args)
    except (KafkaException, TimeoutError) as exc:
        return fail(describe_error(exc) or "no answer from the brokers in time")


def _names(admin: Any, exclude_internal: bool) -> list[str]:
    """Every topic name, sorted; internal topics are those the brokers flag as internal."""
    from confluent_kafka import TopicCollection

    names = set(admin.list_topics(timeout=TIMEOUT_S).topics)
    if not exclude_internal:
        return sorted(names)
    if not names:
        return []
    futures = admin.describe_topics(TopicCollection(sorted(names)))
    return sorted(n for n in names if not futures[n].result(TIMEOUT_S).is_internal)


def _describe(admin: Any, args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, TopicCollection
    from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

    names = args.topic or _names(admin, exclude_internal=False)
    if not names:
        return 0
    live = set(admin.list_topics(timeout=TIMEOUT_S).brokers)
    filtered = args.under_replicated_partitions or args.unavailable_partitions
    descriptions = admin.describe_topics(TopicCollection(names))
    configs = admin.describe_configs([ConfigResource("topic", n) for n in names])
    config_of = {resource.name: future for resource, future in configs.items()}
    log_dirs, moves = _from_brokers(args.bootstrap_server, names)
    status = 0
    for name in names:
        try:
            topic = descriptions[name].result(TIMEOUT_S)
        except KafkaException as exc:
            if exc.args and getattr(exc.args[0], "name", lambda: "")() == "UNKNOWN_TOPIC_OR_PART":
                status = fail(f"Topic '{name}' does not exist.")
            else:
                status = fail(f"topic '{name}': {describe_error(exc)}")
            continue
        if args.exclude_internal and topic.is_internal:
            continue
        partitions = sorted(topic.partitions, key=lambda p: p.id)
        moving = {p.id: moves.get(TopicPartition(name, p.id)) for p in partitions}
        if filtered:
            for p in partitions:
                if _selected(p, live, args, moving[p.id]):
                    print(_partition_line(name, p, live, moving[p.id]))
            continue
        try:
            entries = config_of[name].result(TIMEOUT_S).values()
            overrides = ",".join(f"{e.name}={e.value}" for e in entries if not e.is_default)
            policy = next((e.value for e in entries if e.name == "cleanup.policy"), "") or ""
            compacted = "compact" in policy.split(",")
        except (KafkaException, TimeoutError) as exc:
            status = fail(f"configs of topic '{name}': {describe_error(exc) or 'no answer'}")
            overrides, compacted = "", False
        replication = _replication_factor(partitions[0], moving[0]) if partitions else 0
        print(
            f"Topic: {name}\tTopicId: {kafka_uuid(str(topic.topic_id))}\t"
            f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication}\t"
            f"Configs: {overrides}"
        )
        for p in partitions:
            print(
                _partition_line(name, p, live, moving[p.id])
                + _storage(log_dirs.get(TopicPartition(name, p.id)), compacted)
            )
    return status


def has_leader(p: Any, live: set[int]) -> bool:
    """Kafka's check: a leader is named and its broker is alive."""
    return p.leader is not None and p.leader.id >= 0 and p.leader.id in live


def _replication_factor(p: Any, move: reassignments.OngoingMove | None) -> int:
    """Kafka's: replicas being added to a moving partition do not count yet."""
    return len(p.replicas) - (len(move.adding) if move is not None else 0)


def _selected(
    p: Any, live: set[int], args: argparse.Namespace, move: reassignments.OngoingMove | None
) -> bool:
    under = len(p.isr) < _replication_factor(p, move)
    return bool(
        (args.under_replicated_partitions and under)
        or (args.unavailable_partitions and not has_leader(p, live))
    )


def partition_line(topic: str, partition: int, leader: int, replicas: list[int],
                   isr: list[int], live: set[int],
                   move: reassignments.OngoingMove | None = None) -> str:  # fmt: skip
    """`kafka-topics.sh --describe`'s line of a partition: `Adding Replicas` and `Removing
    Replicas` while it moves, `Offline:` when a replica's broker is not alive."""
    shown = str(leader) if leader >= 0 else "none"
    line = (
        f"\tTopic: {topic}\tPartition: {partition}\tLeader: {shown}\t"
        f"Replicas: {','.join(map(str, replicas))}\tIsr: {','.join(map(str, isr))}"
    )
    if move is not None:
        line += (
            f"\tAdding Replicas: {','.join(map(str, move.adding))}"
            f"\tRemoving Replicas: {','.join(map(str, move.removing))}"
        )
    offline = [r for r in replicas if r not in live]
    if offline:
        line += f"\tOffline: {','.join(map(str, offline))}"
    return line


def _partition_line(
    name: str, p: Any, live: set[int], move: reassignments.OngoingMove | None
) -> str:
    leader = p.leader.id if p.leader is not None else -1
    return partition_line(
        name, p.id, leader, [n.id for n in p.replicas], [n.id for n in p.isr], live, move
    )


Moves = dict[TopicPartition, reassignments.OngoingMove]


def _from_brokers(
    bootstrap: str, names: list[str]
) -> tuple[dict[TopicPartition, LogDirInfo], Moves]:
    """The partitions' sizes and cleaner state (one request per broker for all topics
    shown) and their moves in progress; none (sizes printed as `-`) when the brokers cannot
    say (a broker without ListPartitionReassignments has no moves to show)."""
    for entry in bootstrap.split(","):  # the first broker that answers (some may be down)
        try:
            with Admin(entry.strip(), timeout=TIMEOUT_S) as admin:
                log_dirs = admin.describe_log_dirs(names)
                try:
                    moves = {
                        tp: move
                        for tp, move in reassignments.ongoing(admin).items()
                        if tp.topic in names
                    }
                except ClientError:
                    moves = {}
                return log_dirs, moves
        except (ClientError, OSError):
            continue
    return {}, {}


def _storage(info: LogDirInfo | None, compacted: bool) -> str:
    """`Size` (bytes on disk, as Kafka's tools print it) and, for compacted topics, the
    cleaner's `DirtyRatio` and `LastCleaned`."""
    size = ratio = cleaned = MISSING
    if info is not None:
        size = str(info.size)
        if info.dirty_ratio is not None:
            ratio = f"{info.dirty_ratio:.2f}"
        if info.last_clean_ms is not None:
            cleaned = timestamp(info.last_clean_ms)
    out = f"\tSize: {size}"
    if compacted or ratio != MISSING:
        out += f"\tDirtyRatio: {ratio}\tLastCleaned: {cleaned}"
    return out


def kafka_uuid(text: str) -> str:
    """A topic id as Kafka prints it: URL-safe base64 (librdkafka prints the plain alphabet)."""
    return text.replace("+", "-").replace("/", "_")


def _wait(futures: dict[str, Any], verb: str) -> int:
    from confluent_kafka import KafkaException

    status = 0
    for name, future in futures.items():
        try:
            future.result(TIMEOUT_S)
            print(f"{verb} {name}.")
        except (KafkaException, TimeoutError) as exc:
            status = fail(f"topic '{name}': {describe_error(exc) or 'no answer in time'}")
    return status
