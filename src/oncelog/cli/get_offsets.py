"""`oncelog get-offsets`: the offsets of partitions at a time, like Kafka's `kafka-get-offsets.sh`
(GetOffsetShell).

Prints `topic:partition:offset` per partition, sorted as Kafka sorts them (by the text
`topic-partition`, so `t-10` comes before `t-2`). `--time` is -1 / `latest` (the high
watermark, the default), -2 / `earliest` (the log start), -3 / `max-timestamp` (the record with
the largest timestamp) or a time in ms since the epoch (the first offset whose timestamp is at
or after it). A partition without such an offset (an empty one, a time after its last record)
prints nothing, and one answering an error is skipped with a line on stderr, as Kafka does.
Topics are chosen by `--topic REGEX` (the whole name must match) and `--partitions 0,2`, or by
`--topic-partitions REGEX:N,REGEX:N-M,...`; internal topics are included unless
`--exclude-internal-topics`. ListOffsets and Metadata through confluent-kafka's AdminClient.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from dataclasses import dataclass
from typing import Any

from oncelog.cli.command_config import (
    AdminSession,
    LoginFailed,
    UsageError,
    add_command_config,
    settings,
)
from oncelog.cli.console import add_bootstrap, describe_error, exits_quietly, fail

TIMEOUT_S = 10.0
INT_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1

#: Kafka's names for the ListOffsets sentinels (`-4 earliest-local` and `-5 latest-tiered`
#: are tiered storage's, which neither oncelog nor librdkafka's ListOffsets has).
TIMES = {"latest": -1, "earliest": -2, "max-timestamp": -3}
TIERED = {"earliest-local": -4, "latest-tiered": -5}

#: One rule of `--topic-partitions`: a topic regex, then `:N`, `:N-M`, `:N-` or `:-M`.
RULE = re.compile(r"([^:,]*)(?::(?:([0-9]*)|(?:([0-9]*)-([0-9]*))))?")
PARTITION_IDS = re.compile(r"[+-]?[0-9]+")


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "get-offsets",
        help="offsets of partitions at a time (kafka-get-offsets.sh)",
        description="Print topic:partition:offset for each partition, like Kafka's "
        "kafka-get-offsets.sh.",
    )
    add_bootstrap(p)
    p.add_argument(
        "--topic",
        metavar="REGEX",
        help="the topic(s) to get the offsets for: a regular expression the whole name must "
        "match (default: all topics); not with --topic-partitions",
    )
    p.add_argument(
        "--partitions",
        metavar="IDS",
        help="comma separated partition ids, e.g. 0,2 (default: all); not with --topic-partitions",
    )
    p.add_argument(
        "--topic-partitions",
        metavar="RULES",
        help="comma separated topic-partition patterns: REGEX (all partitions), REGEX:N, "
        "REGEX:N-M (N inclusive, M exclusive), REGEX:N- or REGEX:-M; the regex may be empty "
        "(any topic), e.g. orders:0-3,:5",
    )
    p.add_argument(
        "--time",
        default="latest",
        help="-1 or latest (default), -2 or earliest, -3 or max-timestamp, or a timestamp in "
        "ms: the first offset whose record's timestamp is at or after it",
    )
    p.add_argument(
        "--exclude-internal-topics",
        action="store_true",
        help="leave out internal topics (included by default)",
    )
    add_command_config(p)
    p.set_defaults(func=run)


@dataclass(frozen=True, slots=True)
class Rule:
    """One topic regex with the partitions it takes: those in `ids` (all when empty) or
    in [`low`, `high`)."""

    topic: re.Pattern[str]
    ids: frozenset[int] = frozenset()
    low: int = 0
    high: int = INT_MAX + 1

    def takes_topic(self, topic: str) -> bool:
        return self.topic.fullmatch(topic) is not None

    def takes(self, topic: str, partition: int) -> bool:
        if not self.takes_topic(topic):
            return False
        if self.ids:
            return partition in self.ids
        return self.low <= partition < self.high


def parse_time(text: str) -> int:
    """`--time` as ListOffsets' timestamp: -1, -2, -3 or a time >= 0 (UsageError if not)."""
    if text in TIMES:
        return TIMES[text]
    if text in TIERED or text in ("-4", "-5"):
        raise UsageError(
            f"--time {text}: earliest-local (-4) and latest-tiered (-5) are tiered storage's, "
            "which is not supported"
        )
    value = int(text) if PARTITION_IDS.fullmatch(text) else None
    if value is None or not -3 <= value <= INT64_MAX:
        raise UsageError(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
            "-3 or max-timestamp, or a specified long format timestamp"
        )
    return value


def topic_regex(raw: str) -> re.Pattern[str]:
    """Kafka's topic filter: commas mean `|`, spaces and surrounding quotes are dropped."""
    cleaned = raw.strip().replace(",", "|").replace(" ", "")
    cleaned = re.sub(r"""^["']+|["']+$""", "", cleaned)
    try:
        return re.compile(cleaned)
    except re.error:
        raise UsageError(f"{cleaned} is an invalid regex.") from None


def parse_partition_ids(text: str | None) -> frozenset[int]:
    if not text:
        return frozenset()
    parts = text.split(",")
    if not all(PARTITION_IDS.fullmatch(part) for part in parts):
        raise UsageError(
            "--partitions expects a comma separated list of numeric partition ids, but "
            f"received: {text}"
        )
    return frozenset(int(part) for part in parts)


def parse_rules(text: str) -> list[Rule]:
    """`--topic-partitions`: `REGEX`, `REGEX:N`, `REGEX:N-M`, `REGEX:N-`, `REGEX:-M`, by commas."""
    rules = []
    for spec in text.split(","):
        match = RULE.fullmatch(spec)
        if match is None:
            raise UsageError(f"Invalid rule specification: {spec}")
        topic, single, low, high = (g or None for g in match.groups())
        regex = topic_regex(topic or ".*")
        numbers = [int(n) for n in (single, low, high) if n is not None]
        if any(n > INT_MAX for n in numbers):
            raise UsageError(f"Invalid rule specification: {spec} (partition out of range)")
        if single is not None:
            rules.append(Rule(regex, ids=frozenset([int(single)])))
        else:
            rules.append(
                Rule(
                    regex,
                    low=int(low) if low is not None else 0,
                    high=int(high) if high is not None else INT_MAX + 1,
                )
            )
    return rules


def selection(args: argparse.Namespace) -> list[Rule]:
    """The rules of the command line (UsageError for a bad or contradictory one)."""
    if args.topic_partitions is not None:
        if args.topic is not None or args.partitions is not None:
            raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
        return parse_rules(args.topic_partitions)
    regex = topic_regex(args.topic if args.topic is not None else ".*")
    return [Rule(regex, ids=parse_partition_ids(args.partitions))]


def kafka_order(key: tuple[str, int]) -> str:
    """Kafka's tool sorts by `TopicPartition.toString()`: the text `topic-partition`."""
    return f"{key[0]}-{key[1]}"


@exits_quietly
def run(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    try:
        rules = selection(args)
        timestamp = parse_time(args.time)
        session = AdminSession(settings(args))
    except UsageError as exc:
        return fail(str(exc), 2)
    try:
        partitions = _partitions(session, rules, args.exclude_internal_topics)
        if not partitions:
            return fail("Could not match any topic-partitions with the specified filters")
        offsets = _offsets(session, partitions, timestamp)
    except LoginFailed as exc:
        return fail(str(exc))
    except (KafkaException, TimeoutError) as exc:
        return fail(
            describe_error(exc)
            or f"no broker of {args.bootstrap_server} answered within {TIMEOUT_S:g} s"
        )
    for (topic, partition), offset in sorted(offsets.items(), key=lambda kv: kafka_order(kv[0])):
        print(f"{topic}:{partition}:{offset}")
    return 0


def _partitions(
    session: AdminSession, rules: list[Rule], exclude_internal: bool
) -> list[tuple[str, int]]:
    """The partitions the rules take, of the topics the cluster has (internal ones too unless
    excluded: those the brokers flag as internal)."""
    from confluent_kafka import TopicCollection

    names = sorted(session.list_topics(TIMEOUT_S).topics)
    names = [n for n in names if any(rule.takes_topic(n) for rule in rules)]
    if not names:
        return []
    futures = session.admin.describe_topics(TopicCollection(names), request_timeout=TIMEOUT_S)
    out: list[tuple[str, int]] = []
    for name in names:
        topic = session.result(futures[name], TIMEOUT_S)
        if exclude_internal and topic.is_internal:
            continue
        out.extend(
            (name, p.id) for p in topic.partitions if any(rule.takes(name, p.id) for rule in rules)
        )
    return out


def _offsets(
    session: AdminSession, partitions: list[tuple[str, int]], timestamp: int
) -> dict[tuple[str, int], int]:
    """ListOffsets of every partition; a partition answering an error is reported on stderr
    and left out, as one without an offset at that time (-1) is."""
    from confluent_kafka import KafkaException, TopicPartition

    # OffsetSpec(-1) is latest, (-2) earliest, (-3) max-timestamp, (t >= 0) the time t.
    spec: Any = importlib.import_module("confluent_kafka.admin").OffsetSpec(timestamp)
    wanted = {TopicPartition(topic, partition): spec for topic, partition in partitions}
    futures = session.admin.list_offsets(wanted, request_timeout=TIMEOUT_S)
    out: dict[tuple[str, int], int] = {}
    for tp, future in futures.items():
        try:
            offset = int(session.result(future, TIMEOUT_S).offset)
        except KafkaException as exc:
            print(
                f"Skip getting offsets for topic-partition {tp.topic}-{tp.partition} due to "
                f"error: {describe_error(exc)}",
                file=sys.stderr,
            )
            continue
        if offset != -1:
            out[(tp.topic, tp.partition)] = offset
    return out
