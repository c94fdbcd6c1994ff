"""`oncelog topics create | list | describe | alter | delete`, modelled on `kafka-topics.sh`.

create, list, alter and delete use confluent-kafka's admin client. describe speaks the Kafka
protocol itself (`oncelog.client`, which works against Apache Kafka as well): Metadata and
DescribeConfigs from the first bootstrap broker that answers (librdkafka would send them to
the controller and wait while it is down), then one DescribeLogDirs per leader, all at once
with a short timeout each, for partition sizes and the log cleaner's state (oncelog's tags,
`-` against Apache Kafka): a dead leader only blanks its own partitions' sizes. `describe`
adds `Offline: ...` to a partition with replicas on brokers that are not alive, and, like
Kafka's, `--under-replicated-partitions` / `--unavailable-partitions` print only the
partitions whose ISR is smaller than their replicas / that have no live leader. librdkafka's
own log lines are silenced: an unreachable broker is one `Error:` line.
"""

from __future__ import annotations

import argparse
import base64
from typing import Any

from oncelog.cli.console import (
    MISSING,
    add_bootstrap,
    coded,
    describe_error,
    exits_quietly,
    fail,
    timestamp,
)
from oncelog.client import reassignments
from oncelog.client.admin import Admin, LogDirInfo
from oncelog.client.configs import TOPIC, describe_configs
from oncelog.client.connection import ClientError
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

TIMEOUT_S = 10.0
#: How long `describe` waits for each broker's DescribeLogDirs (asked concurrently).
LOG_DIRS_TIMEOUT_S = 2.0


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
    broker would print one per reconnect); failures reach the caller as errors instead. Its
    metadata requests never create a topic (librdkafka's producer-side default would, on a
    broker with auto.create.topics.enable: `cluster elect-leaders --topic typo` did)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(
        {"bootstrap.servers": bootstrap, "log_level": 0, "allow.auto.create.topics": False}
    )


@exits_quietly
def run_topics(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions, NewTopic  # type: ignore[attr-defined]

    if args.action == "describe":  # on oncelog.client only (see _describe)
        try:
            return _describe(args)
        except (ClientError, OSError) as exc:
            return fail(str(exc))
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
                topic = NewTopic(args.topic, len(manual), replica_assignment=manual, config=configs)
            else:
                topic = NewTopic(
                    args.topic, args.partitions, args.replication_factor, config=configs
                )
            return _wait(admin.create_topics([topic]), "Created topic")
        if args.action == "alter":
            try:
                added = (
                    replica_assignment(args.replica_assignment) if args.replica_assignment else None
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
        raise AssertionError(f"unknown action {args.action}")
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


def _describe(args: argparse.Namespace) -> int:
    """Topics, partitions and sizes from the first bootstrap broker that answers, configs from
    it too and sizes from each leader: what the live brokers know, even while the controller
    or a leader has just died (librdkafka would wait for the controller)."""
    try:
        admin = _first_admin(args.bootstrap_server)
    except (ClientError, OSError) as exc:
        return fail(str(exc))
    with admin:
        metadata = admin.refresh_metadata(args.topic or None)
        live = {int(b.node_id) for b in metadata.brokers}
        by_name = {t.name: t for t in metadata.topics}
        names = args.topic or sorted(by_name)
        found = [n for n in names if n in by_name and int(by_name[n].error_code) == 0]
        filtered = args.under_replicated_partitions or args.unavailable_partitions
        log_dirs = {} if filtered else _sizes(admin, found)
        moves = _moves(admin, found)
        status = 0
        for name in names:
            topic = by_name.get(name)
            code = (
                int(topic.error_code) if topic is not None else ErrorCode.unknown_topic_or_partition
            )
            if code == ErrorCode.unknown_topic_or_partition:
                status = fail(coded(code, f"Topic '{name}' does not exist."))
                continue
            if code:
                status = fail(coded(code, f"cannot describe topic '{name}'"))
                continue
            assert topic is not None
            if args.exclude_internal and topic.is_internal:
                continue
            partitions = sorted(topic.partitions, key=lambda p: int(p.partition_index))
            moving = {
                int(p.partition_index): moves.get(TopicPartition(name, int(p.partition_index)))
                for p in partitions
            }
            if filtered:
                for p in partitions:
                    if _selected(p, live, args, moving[int(p.partition_index)]):
                        print(_partition_line(name, p, live, moving[int(p.partition_index)]))
                continue
            try:
                entries = describe_configs(admin, TOPIC, name)
                overrides = ",".join(
                    f"{e.name}={e.value}" for e in entries if e.source != "DEFAULT_CONFIG"
                )
                policy = next((e.value for e in entries if e.name == "cleanup.policy"), "") or ""
                compacted = "compact" in policy.split(",")
            except (ClientError, OSError) as exc:
                status = fail(f"configs of topic '{name}': {exc}")
                overrides, compacted = "", False
            replication = _replication_factor(partitions[0], moving[0]) if partitions else 0
            print(
                f"Topic: {name}\tTopicId: {topic_id(topic.topic_id)}\t"
                f"PartitionCount: {len(partitions)}\tReplicationFactor: {replication}\t"
                f"Configs: {overrides}"
            )
            for p in partitions:
                index = int(p.partition_index)
                print(
                    _partition_line(name, p, live, moving[index])
                    + _storage(log_dirs.get(TopicPartition(name, index)), compacted)
                )
    return status


def has_leader(p: Any, live: set[int]) -> bool:
    """Kafka's check: a leader is named and its broker is alive (a confluent-kafka
    PartitionMetadata)."""
    return p.leader is not None and p.leader.id >= 0 and p.leader.id in live


def _replication_factor(p: Any, move: reassignments.OngoingMove | None) -> int:
    """Kafka's: replicas being added to a moving partition do not count yet."""
    return len(p.replica_nodes) - (len(move.adding) if move is not None else 0)


def _selected(
    p: Any, live: set[int], args: argparse.Namespace, move: reassignments.OngoingMove | None
) -> bool:
    under = len(p.isr_nodes) < _replication_factor(p, move)
    led = int(p.leader_id) >= 0 and int(p.leader_id) in live
    return bool(
        (args.under_replicated_partitions and under) or (args.unavailable_partitions and not led)
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
    """The line of a Metadata response's partition."""
    return partition_line(
        name,
        int(p.partition_index),
        int(p.leader_id),
        [int(n) for n in p.replica_nodes],
        [int(n) for n in p.isr_nodes],
        live,
        move,
    )


Moves = dict[TopicPartition, reassignments.OngoingMove]


def _first_admin(bootstrap: str) -> Admin:
    """An `oncelog.client` admin on the first bootstrap broker that answers (some may be
    down); the last one's ClientError if none does."""
    error: Exception = ClientError(f"no broker in {bootstrap!r}")
    for entry in bootstrap.split(","):
        try:
            return Admin(entry.strip(), timeout=TIMEOUT_S)
        except (ClientError, OSError) as exc:
            error = exc
    raise error


def _sizes(admin: Admin, names: list[str]) -> dict[TopicPartition, LogDirInfo]:
    """The partitions' sizes and cleaner state: one DescribeLogDirs per leader, all at once.
    A partition whose leader does not answer within LOG_DIRS_TIMEOUT_S (one just killed) has
    no size (`-`); the others keep theirs."""
    try:
        return admin.describe_log_dirs(names, node_timeout=LOG_DIRS_TIMEOUT_S)
    except (ClientError, OSError):
        return {}


def _moves(admin: Admin, names: list[str]) -> Moves:
    """The partitions' moves in progress; none from a broker without
    ListPartitionReassignments (or a controller that does not answer)."""
    try:
        ongoing = reassignments.ongoing(admin)
    except (ClientError, OSError):
        return {}
    return {tp: move for tp, move in ongoing.items() if tp.topic in names}


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


def topic_id(value: Any) -> str:
    """A topic id (a UUID) as Kafka prints it: URL-safe base64 of its 16 bytes, unpadded."""
    if value is None:
        return MISSING
    raw = value.bytes if hasattr(value, "bytes") else bytes(value)
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


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
