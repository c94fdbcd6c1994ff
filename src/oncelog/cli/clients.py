"""`oncelog topics | produce | consume`: console tools for any Kafka-protocol broker.

They use confluent-kafka (librdkafka), so they behave exactly as a Kafka user expects and
work against Apache Kafka as well as oncelog. They take Kafka's console tools' options:
`consume --group G` subscribes with that group and commits what it printed (a second run
continues there); without it a random `console-consumer-NNNNN` group subscribes and commits
nothing; `--partition N [--offset earliest|latest|N]` reads partitions without a group.
`produce` retries a refused batch `--message-send-max-retries` times (3, as Kafka's tool),
then names the broker's error. librdkafka's own log lines go to stderr only with --verbose.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from oncelog.cli import topics
from oncelog.cli.console import add_bootstrap, coded, describe_error, exits_quietly, fail
from oncelog.errors import ErrorCode

#: Kafka's console consumer's group when none is given: this prefix and a random number.
RANDOM_GROUP_PREFIX = "console-consumer-"
#: The client id the console tools give themselves, as Kafka's do.
CONSUMER_CLIENT_ID = "console-consumer"
METADATA_TIMEOUT_S = 10.0
#: How much longer than --timeout-ms a subscribing consumer waits for its first assignment
#: (the group's join; a broker delays the first one by group.initial.rebalance.delay.ms).
JOIN_WAIT_MS = 30_000
FLUSH_TIMEOUT_S = 30.0
#: Kafka's error codes the tools look at.
_UNKNOWN_TOPIC = int(ErrorCode.unknown_topic_or_partition)
_INVALID_RECORD = int(ErrorCode.invalid_record)
#: Kafka's words for a record without a key sent to a compacted topic (LogValidator).
KEYLESS_COMPACTED = "Compacted topic cannot accept message without key in topic partition {}"


def add_parsers(sub: Any) -> None:
    """`topics` (its own module), `produce` and `consume`."""
    topics.add_parsers(sub)

    produce = sub.add_parser("produce", help="send lines of stdin as messages")
    produce.add_argument("topic", help="the topic to write to")
    add_bootstrap(produce)
    produce.add_argument(
        "--key-separator", help="split each line at the first SEP into key and value"
    )
    produce.add_argument(
        "--partition",
        type=int,
        default=-1,
        help="write every message to this partition (default: the partitioner picks)",
    )
    produce.add_argument(
        "--acks", default="all", help="acks the producer asks for: all, 1 or 0 (default all)"
    )
    produce.add_argument(
        "--message-send-max-retries",
        type=int,
        default=3,
        metavar="N",
        help="retries of a batch the broker refused before the message fails with the "
        "broker's error (librdkafka's retries; default 3, as Kafka's console producer)",
    )
    produce.add_argument(
        "--retry-backoff-ms",
        type=int,
        default=100,
        metavar="MS",
        help="wait before a retry (retry.backoff.ms; default 100)",
    )
    produce.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka producer property such as linger.ms=5; repeatable (wins over the "
        "options above)",
    )
    add_verbose(produce)
    produce.set_defaults(func=run_produce)

    consume = sub.add_parser(
        "consume",
        help="print messages of a topic",
        description="Print the messages of a topic, as kafka-console-consumer does. With "
        "--group G the consumer subscribes in group G and commits the offsets of the messages "
        "it printed, so the next run with the same group continues after them; without it, "
        "a random group console-consumer-NNNNN subscribes and commits nothing. --partition "
        "reads the given partitions without a group, from --offset.",
    )
    consume.add_argument("topic", help="the topic to read")
    add_bootstrap(consume)
    consume.add_argument(
        "--group",
        help="the consumer group to subscribe in; offsets of printed messages are committed "
        f"(default: a random {RANDOM_GROUP_PREFIX}NNNNN group that commits nothing)",
    )
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset when the group has no committed offset (with "
        "--partition: always); default: only messages that arrive from now on",
    )
    consume.add_argument(
        "--partition",
        type=int,
        action="append",
        help="read this partition without a group (assign); repeatable; excludes --group",
    )
    consume.add_argument(
        "--offset",
        help="with --partition: where to start, earliest, latest (the default) or an offset "
        "(a non-negative number)",
    )
    consume.add_argument(
        "--max-messages",
        type=int,
        default=-1,
        help="stop after this many messages (default: no limit)",
    )
    consume.add_argument(
        "--timeout-ms",
        type=int,
        default=-1,
        help="stop after this long without a message, counted from the group's assignment "
        f"(at most {JOIN_WAIT_MS // 1000} s more for that; default: wait forever)",
    )
    consume.add_argument(
        "--isolation-level",
        default="read_committed",
        choices=["read_committed", "read_uncommitted"],
        help="read_committed (default) skips aborted and still-open transactions",
    )
    consume.add_argument(
        "--print-key", action="store_true", help="print each key, tab, then the value"
    )
    consume.add_argument(
        "--print-offset",
        action="store_true",
        help="print PARTITION:OFFSET and a tab before each message",
    )
    consume.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka consumer property; repeatable (group.id=G is --group G)",
    )
    add_verbose(consume)
    consume.set_defaults(func=run_consume)


def add_verbose(parser: Any) -> None:
    parser.add_argument(
        "--verbose", action="store_true", help="print librdkafka's own log lines on stderr"
    )


def librdkafka_logger(verbose: bool) -> logging.Logger:
    """Where librdkafka's log lines go (its `logger` setting): stderr with --verbose, else
    nowhere, so a broker that is down or a producer closed with messages in flight is not a
    stream of raw lines; the errors reach the tool through callbacks and delivery reports."""
    logger = logging.getLogger("oncelog.cli.librdkafka")
    logger.propagate = False
    logger.handlers.clear()
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(levelname)s librdkafka: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    else:
        logger.addHandler(logging.NullHandler())
        logger.setLevel(logging.CRITICAL + 1)
    return logger


@exits_quietly
def run_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    report = _Deliveries()
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "acks": args.acks,
        "retries": args.message_send_max_retries,
        "retry.backoff.ms": args.retry_backoff_ms,
        **topics.pairs(args.property),
        "logger": librdkafka_logger(args.verbose),
        "error_cb": report.on_error,
    }
    try:
        producer = Producer(conf)
    except KafkaException as exc:
        return fail(describe_error(exc), 2)
    problem = _check_topic(producer, args.topic, args.partition)
    if problem:
        return fail(problem)

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: deliver what was read, then stop
        _send_lines(producer, args, report)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    for line in report.lines(args.topic, lambda: _compacted(conf, args.topic)):
        fail(line)
    if remaining:
        why = f"{remaining} messages not delivered within {FLUSH_TIMEOUT_S:.0f} s"
        if report.last_error is not None:
            why = f"{report.last_error} ({why})"
        fail(why)
    return 1 if report.failed or remaining else 0


class _Deliveries:
    """The messages that failed, by error, and the last error librdkafka reported."""

    def __init__(self) -> None:
        #: error code -> (the first failure's message, how many failed with it)
        self.by_code: dict[int, tuple[str, int]] = {}
        #: keyless messages refused as INVALID_RECORD, by partition
        self.keyless_invalid: list[int] = []
        self.failed = 0
        self.last_error: str | None = None

    def on_error(self, err: Any) -> None:
        """librdkafka's error callback (a broker down, all brokers down, ...)."""
        self.last_error = describe_error(err)

    def on_delivery(self, err: Any, msg: Any) -> None:
        if err is None:
            return
        self.record(err.code(), describe_error(err), msg.partition(), msg.key() is None)

    def record(self, code: int, text: str, partition: int = -1, keyless: bool = False) -> None:
        self.failed += 1
        self.last_error = text
        if code == _INVALID_RECORD and keyless:
            self.keyless_invalid.append(partition)
        first, count = self.by_code.get(code, (text, 0))
        self.by_code[code] = (first, count + 1)

    def lines(self, topic: str, compacted: Callable[[], bool]) -> list[str]:
        """One line per error code, the first message failing with it, and how many did;
        a keyless message refused by a compacted topic in Kafka's words (librdkafka does not
        pass on the broker's error message)."""
        out = []
        for code, (first, count) in self.by_code.items():
            text = first
            if code == _INVALID_RECORD and self.keyless_invalid and compacted():
                partition = self.keyless_invalid[0]
                text = coded(code, KEYLESS_COMPACTED.format(f"{topic}-{partition}"))
            out.append(text if count == 1 else f"{text} ({count} messages)")
        return out


def _send_lines(producer: Any, args: argparse.Namespace, report: _Deliveries) -> None:
    """Produce each line of stdin; what fails (now or on delivery) goes to `report`."""
    from confluent_kafka import KafkaException

    for line in sys.stdin:
        text = line.rstrip("\n")
        key: str | None = None
        if args.key_separator and args.key_separator in text:
            key, text = text.split(args.key_separator, 1)
        kwargs: dict[str, Any] = {"key": key, "value": text, "on_delivery": report.on_delivery}
        if args.partition >= 0:
            kwargs["partition"] = args.partition
        while True:
            try:
                producer.produce(args.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
            except KafkaException as exc:
                err: Any = exc.args[0] if exc.args else None
                report.record(getattr(err, "code", lambda: -1)(), describe_error(exc))
                break
        producer.poll(0)


def _compacted(conf: dict[str, Any], topic: str) -> bool:
    """Whether `topic`'s cleanup.policy includes compact (False when the broker cannot say)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ConfigResource  # type: ignore[attr-defined]

    settings = {k: v for k, v in conf.items() if k not in ("error_cb",)}
    try:
        admin = AdminClient(settings)
        (future,) = admin.describe_configs([ConfigResource("topic", topic)]).values()
        entries = future.result(METADATA_TIMEOUT_S)
    except (KafkaException, TimeoutError, ValueError):
        return False
    policy = entries.get("cleanup.policy")
    return policy is not None and "compact" in str(policy.value or "").split(",")


def _check_topic(client: Any, topic: str, partition: int) -> str | None:
    """Why `topic` (and `partition`) cannot be written or read, or None.

    Asked before producing: librdkafka holds messages for a topic it cannot find until
    message.timeout.ms (5 minutes), where a user wants to hear at once that it is missing.
    A producer's metadata request auto-creates the topic where the broker allows that.
    """
    from confluent_kafka import KafkaError, KafkaException

    try:
        metadata = client.list_topics(topic, timeout=METADATA_TIMEOUT_S)
    except KafkaException as exc:
        return f"{describe_error(exc)} (topic '{topic}')"
    found = metadata.topics.get(topic)
    if found is None:
        return coded(_UNKNOWN_TOPIC, f"Topic '{topic}' is not in the brokers' metadata.")
    if found.error is not None and found.error.code() != KafkaError.LEADER_NOT_AVAILABLE:
        if found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            return coded(_UNKNOWN_TOPIC, f"Topic '{topic}' does not exist.")
        return f"{describe_error(found.error)} (topic '{topic}')"
    if partition >= 0 and found.partitions and partition not in found.partitions:
        return coded(
            _UNKNOWN_TOPIC,
            f"Topic '{topic}' has no partition {partition} (it has {len(found.partitions)}).",
        )
    return None


class _Usage(Exception):
    """A bad consume command line (exit 2), in Kafka's console consumer's words."""


def _consumer_group(args: argparse.Namespace, props: dict[str, str]) -> str | None:
    """The group given by --group or group.id (None: none given), as Kafka checks them."""
    given = [g for g in (args.group, props.get("group.id")) if g is not None]
    if len(set(given)) > 1:
        detected = ", ".join(f"'{g}'" for g in dict.fromkeys(given))
        raise _Usage(
            "The group ids provided in different places (directly using '--group', or via "
            f"'--property') do not match. Detected group ids: {detected}"
        )
    if any(not g.strip() for g in given):
        # librdkafka aborts the whole process on an empty group.id (an assertion).
        raise _Usage("group.id must not be empty")
    if given and args.partition:
        raise _Usage("Options group and partition cannot be specified together.")
    if args.offset is not None:
        if not args.partition:
            raise _Usage("The partition is required when offset is specified.")
        if args.from_beginning:
            raise _Usage("Options from-beginning and offset cannot be specified together.")
    reset = props.get("auto.offset.reset")
    if args.from_beginning and reset is not None and reset not in ("earliest", "smallest"):
        raise _Usage(
            f"Can't simultaneously specify --from-beginning and 'auto.offset.reset={reset}', "
            "please remove one option"
        )
    return given[0] if given else None


def _start_offset(args: argparse.Namespace) -> int:
    """Where --partition reads from: --offset, else the start with --from-beginning, else
    the end (librdkafka's logical offsets)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

    if args.offset is None:
        return int(OFFSET_BEGINNING if args.from_beginning else OFFSET_END)
    text = args.offset.lower()
    if text == "earliest":
        return int(OFFSET_BEGINNING)
    if text == "latest":
        return int(OFFSET_END)
    try:
        offset = int(text)
    except ValueError:
        offset = -1
    if offset < 0:
        raise _Usage(
            f"The provided offset value '{args.offset}' is incorrect. Valid values are "
            "'earliest', 'latest', or a non-negative long."
        )
    return offset


def _true(value: object) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


@exits_quietly
def run_consume(args: argparse.Namespace) -> int:
    from confluent_kafka import Consumer, KafkaException

    props = topics.pairs(args.property)
    try:
        group = _consumer_group(args, props)
        start = _start_offset(args) if args.partition else 0
    except _Usage as exc:
        return fail(str(exc), 2)
    # Kafka's: a group of its own that commits nothing unless a group is given.
    commits = group is not None and not args.partition
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": CONSUMER_CLIENT_ID,
        "enable.auto.commit": commits,
        "auto.offset.reset": "earliest" if args.from_beginning else "latest",
        "isolation.level": args.isolation_level,
        **props,
        "group.id": group or f"{RANDOM_GROUP_PREFIX}{random.randrange(100000)}",
        # Only what was printed counts as consumed: each message's offset is stored once it
        # is out, and the stored offsets are what a commit sends.
        "enable.auto.offset.store": False,
        "logger": librdkafka_logger(args.verbose),
    }
    commits = _true(conf["enable.auto.commit"]) and not args.partition
    try:
        consumer = Consumer(conf)
    except (KafkaException, ValueError) as exc:
        return fail(describe_error(exc), 2)
    reader = _Reader(consumer, args, commits)
    try:
        problem = reader.start(start)
        if problem:
            return fail(problem)
        status = reader.run()
        if commits:
            reader.commit()
        return status
    except KafkaException as exc:
        return fail(describe_error(exc))
    finally:
        with contextlib.suppress(KafkaException, RuntimeError):
            consumer.close()


class _Reader:
    """The consume loop: assign (--partition) or subscribe, print, store printed offsets."""

    def __init__(self, consumer: Any, args: argparse.Namespace, commits: bool) -> None:
        self.consumer = consumer
        self.args = args
        self.commits = commits
        #: partition -> the offset after the last message printed from it (what a commit
        #: of this member sends), for the partitions assigned to it now
        self.printed: dict[int, int] = {}
        self.idle_since = time.monotonic()
        #: whether partitions were assigned yet (in subscribe mode, by the group)
        self.assigned = bool(args.partition)

    def start(self, offset: int) -> str | None:
        """Check the topic (and partitions), then assign or subscribe; the problem or None."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        args = self.args
        metadata = self.consumer.list_topics(args.topic, timeout=METADATA_TIMEOUT_S)
        topic = metadata.topics.get(args.topic)
        if topic is None or topic.error is not None:
            if topic is None or topic.error is None or topic.error.code() == _UNKNOWN_TOPIC:
                return coded(_UNKNOWN_TOPIC, f"Topic '{args.topic}' does not exist.")
            return f"{describe_error(topic.error)} (topic '{args.topic}')"
        if args.partition:
            unknown = sorted(set(args.partition) - set(topic.partitions))
            if unknown:
                return coded(
                    _UNKNOWN_TOPIC,
                    f"Topic '{args.topic}' has no partition {unknown[0]} "
                    f"(it has {len(topic.partitions)}).",
                )
            self.consumer.assign(
                [KafkaTopicPartition(args.topic, p, offset) for p in sorted(set(args.partition))]
            )
        else:
            self.consumer.subscribe([args.topic], on_assign=self._assigned, on_revoke=self._revoked)
        return None

    def _assigned(self, _consumer: Any, _partitions: list[Any]) -> None:
        if not self.assigned:  # --timeout-ms counts from the first assignment
            self.assigned = True
            self.idle_since = time.monotonic()

    def _revoked(self, _consumer: Any, partitions: list[Any]) -> None:
        # librdkafka commits the stored offsets of revoked partitions itself (auto commit).
        for tp in partitions:
            self.printed.pop(tp.partition, None)

    def run(self) -> int:
        args = self.args
        seen = 0
        self.idle_since = time.monotonic()
        with contextlib.suppress(KeyboardInterrupt):
            while args.max_messages < 0 or seen < args.max_messages:
                msg = self.consumer.poll(0.2)
                if msg is None:
                    idle_ms = (time.monotonic() - self.idle_since) * 1000
                    limit = args.timeout_ms + (0 if self.assigned else JOIN_WAIT_MS)
                    if args.timeout_ms >= 0 and idle_ms > limit:
                        break
                    continue
                self.idle_since = time.monotonic()
                error = msg.error()
                if error is not None:
                    fail(describe_error(error))
                    if error.fatal():
                        return 1
                    continue
                value = (msg.value() or b"").decode("utf-8", "replace")
                prefix = f"{msg.partition()}:{msg.offset()}\t" if args.print_offset else ""
                if args.print_key:
                    prefix += (msg.key() or b"").decode("utf-8", "replace") + "\t"
                print(prefix + value, flush=True)
                seen += 1
                if self.commits:
                    self.consumer.store_offsets(message=msg)
                    self.printed[msg.partition()] = msg.offset() + 1
        return 0

    def commit(self) -> None:
        """Commit the offsets after the messages printed (KafkaException if refused)."""
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        if not self.printed:
            return
        offsets = [KafkaTopicPartition(self.args.topic, p, o) for p, o in self.printed.items()]
        self.consumer.commit(offsets=offsets, asynchronous=False)
