"""`oncelog topics | produce | consume`: console tools for any Kafka-protocol broker.

They use confluent-kafka (librdkafka), so they behave exactly as a Kafka user expects and
work against Apache Kafka as well as oncelog.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from oncelog.cli import topics
from oncelog.cli.console import add_bootstrap, describe_error, exits_quietly, fail

CONSOLE_GROUP = "oncelog-console-consumer"
METADATA_TIMEOUT_S = 10.0


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
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka producer property such as linger.ms=5; repeatable",
    )
    produce.set_defaults(func=run_produce)

    consume = sub.add_parser("consume", help="print messages of a topic")
    consume.add_argument("topic", help="the topic to read")
    add_bootstrap(consume)
    consume.add_argument(
        "--from-beginning",
        action="store_true",
        help="start at the earliest offset (default: only messages that arrive from now on)",
    )
    consume.add_argument(
        "--partition",
        type=int,
        action="append",
        help="read only this partition; repeatable (default: all)",
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
        help="stop after this long without a message (default: wait forever)",
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
        help=f"a librdkafka consumer property; repeatable (group.id defaults to {CONSOLE_GROUP})",
    )
    consume.set_defaults(func=run_consume)


@exits_quietly
def run_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException, Producer

    conf = {
        "bootstrap.servers": args.bootstrap_server,
        "acks": args.acks,
        **topics.pairs(args.property),
    }
    try:
        producer = Producer(conf)
    except KafkaException as exc:
        return fail(describe_error(exc), 2)
    problem = _check_topic(producer, args.topic, args.partition)
    if problem:
        return fail(problem)

    failures: list[str] = []
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: deliver what was read, then stop
        _send_lines(producer, args, failures)
    remaining = producer.flush(30)
    for failure in failures[:10]:
        fail(failure)
    if len(failures) > 10:
        fail(f"... {len(failures) - 10} more messages failed")
    if remaining:
        fail(f"{remaining} messages not delivered within 30 s")
    return 1 if failures or remaining else 0


def _send_lines(producer: Any, args: argparse.Namespace, failures: list[str]) -> None:
    """Produce each line of stdin; what fails (now or on delivery) goes to `failures`."""
    from confluent_kafka import KafkaException

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(describe_error(err))

    for line in sys.stdin:
        text = line.rstrip("\n")
        key: str | None = None
        if args.key_separator and args.key_separator in text:
            key, text = text.split(args.key_separator, 1)
        kwargs: dict[str, Any] = {"key": key, "value": text, "on_delivery": on_delivery}
        if args.partition >= 0:
            kwargs["partition"] = args.partition
        while True:
            try:
                producer.produce(args.topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)
            except KafkaException as exc:
                failures.append(describe_error(exc))
                break
        producer.poll(0)


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
        return f"topic '{topic}': {describe_error(exc)}"
    found = metadata.topics.get(topic)
    if found is None:
        return f"topic '{topic}': not in the brokers' metadata"
    if found.error is not None and found.error.code() != KafkaError.LEADER_NOT_AVAILABLE:
        return f"topic '{topic}': {describe_error(found.error)}"
    if partition >= 0 and found.partitions and partition not in found.partitions:
        return (
            f"topic '{topic}' has no partition {partition} "
            f"(it has {len(found.partitions)}): UNKNOWN_PARTITION"
        )
    return None


@exits_quietly
def run_consume(args: argparse.Namespace) -> int:
    import time

    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaException
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    conf = {
        "bootstrap.servers": args.bootstrap_server,
        "group.id": CONSOLE_GROUP,
        "enable.auto.commit": False,
        "isolation.level": args.isolation_level,
        **topics.pairs(args.property),
    }
    if not conf["group.id"].strip():
        # librdkafka aborts the whole process on an empty group.id (an assertion).
        return fail("group.id must not be empty", 2)
    try:
        consumer = Consumer(conf)
    except KafkaException as exc:
        return fail(describe_error(exc), 2)
    try:
        metadata = consumer.list_topics(args.topic, timeout=METADATA_TIMEOUT_S)
        topic = metadata.topics.get(args.topic)
        if topic is None or topic.error is not None:
            why = describe_error(topic.error) if topic else "not in the brokers' metadata"
            return fail(f"topic '{args.topic}': {why}")
        partitions = args.partition or sorted(topic.partitions)
        unknown = sorted(set(partitions) - set(topic.partitions))
        if unknown:
            return fail(f"topic '{args.topic}' has no partition {unknown[0]}: UNKNOWN_PARTITION")
        start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
        consumer.assign([KafkaTopicPartition(args.topic, p, start) for p in partitions])
        seen = 0
        idle_since = time.monotonic()
        while args.max_messages < 0 or seen < args.max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                idle_ms = (time.monotonic() - idle_since) * 1000
                if args.timeout_ms >= 0 and idle_ms > args.timeout_ms:
                    break
                continue
            idle_since = time.monotonic()
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
    except KafkaException as exc:
        return fail(describe_error(exc))
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0
