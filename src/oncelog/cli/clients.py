"""`oncelog topics | produce | consume`: console tools for any Kafka-protocol broker.

They use confluent-kafka (librdkafka), so they behave exactly as a Kafka user expects and
work against Apache Kafka as well as oncelog.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

BOOTSTRAP_HELP = "bootstrap servers (default 127.0.0.1:9092)"


def add_parsers(sub: Any) -> None:
    topics = sub.add_parser("topics", help="create, list, describe, delete topics")
    topics_sub = topics.add_subparsers(dest="action", required=True)
    create = topics_sub.add_parser("create")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1)
    create.add_argument("--replication-factor", type=int, default=-1)
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE")
    for name in ("list", "describe", "delete"):
        p = topics_sub.add_parser(name)
        if name != "list":
            p.add_argument("topic", nargs="+" if name == "delete" else "*")
    for p in topics_sub.choices.values():
        p.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092", help=BOOTSTRAP_HELP)
    topics.set_defaults(func=run_topics)

    produce = sub.add_parser("produce", help="send lines of stdin as messages")
    produce.add_argument("topic")
    produce.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092", help=BOOTSTRAP_HELP)
    produce.add_argument("--key-separator", help="split each line into key and value")
    produce.add_argument("--partition", type=int, default=-1)
    produce.add_argument("--acks", default="all")
    produce.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    produce.set_defaults(func=run_produce)

    consume = sub.add_parser("consume", help="print messages of a topic")
    consume.add_argument("topic")
    consume.add_argument("--bootstrap-server", "-b", default="127.0.0.1:9092", help=BOOTSTRAP_HELP)
    consume.add_argument("--from-beginning", action="store_true")
    consume.add_argument("--partition", type=int, action="append")
    consume.add_argument("--max-messages", type=int, default=-1)
    consume.add_argument("--timeout-ms", type=int, default=-1, help="stop after this idle time")
    consume.add_argument("--isolation-level", default="read_committed")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-offset", action="store_true")
    consume.add_argument("--property", action="append", default=[], metavar="KEY=VALUE")
    consume.set_defaults(func=run_consume)


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def run_topics(args: argparse.Namespace) -> int:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": args.bootstrap_server})
    if args.action == "create":
        futures = admin.create_topics(
            [
                NewTopic(
                    args.topic, args.partitions, args.replication_factor, config=_pairs(args.config)
                )
            ]
        )
        return _wait(futures, "Created topic")
    if args.action == "delete":
        return _wait(admin.delete_topics(args.topic), "Deleted topic")
    metadata = admin.list_topics(timeout=10)
    names = sorted(t for t in metadata.topics if not t.startswith("__"))
    if args.action == "list":
        for name in names:
            print(name)
        return 0
    wanted = args.topic or names
    status = 0
    for name in wanted:
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            print(
                f"Error: topic {name}: {topic.error if topic else 'does not exist'}",
                file=sys.stderr,
            )
            status = 1
            continue
        print(f"Topic: {name}\tPartitionCount: {len(topic.partitions)}")
        for pid, part in sorted(topic.partitions.items()):
            replicas = ",".join(map(str, part.replicas))
            isr = ",".join(map(str, part.isrs))
            print(
                f"\tTopic: {name}\tPartition: {pid}\tLeader: {part.leader}\t"
                f"Replicas: {replicas}\tIsr: {isr}"
            )
    return status


def _wait(futures: dict[str, Any], verb: str) -> int:
    status = 0
    for name, future in futures.items():
        try:
            future.result()
            print(f"{verb} {name}.")
        except Exception as exc:
            print(f"Error: {name}: {exc}", file=sys.stderr)
            status = 1
    return status


def run_produce(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    conf = {"bootstrap.servers": args.bootstrap_server, "acks": args.acks, **_pairs(args.property)}
    producer = Producer(conf)
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
        producer.poll(0)
    remaining = producer.flush(30)
    for failure in failures[:10]:
        print(f"Error: {failure}", file=sys.stderr)
    return 1 if failures or remaining else 0


def run_consume(args: argparse.Namespace) -> int:
    import time

    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition

    conf = {
        "bootstrap.servers": args.bootstrap_server,
        "group.id": "oncelog-console-consumer",
        "enable.auto.commit": False,
        "isolation.level": args.isolation_level,
        **_pairs(args.property),
    }
    consumer = Consumer(conf)
    metadata = consumer.list_topics(args.topic, timeout=10)
    topic = metadata.topics.get(args.topic)
    if topic is None or topic.error is not None:
        print(f"Error: topic {args.topic}: {topic.error if topic else 'unknown'}", file=sys.stderr)
        return 1
    partitions = args.partition or sorted(topic.partitions)
    start = OFFSET_BEGINNING if args.from_beginning else OFFSET_END
    consumer.assign([TopicPartition(args.topic, p, start) for p in partitions])
    seen = 0
    idle_since = time.monotonic()
    try:
        while args.max_messages < 0 or seen < args.max_messages:
            msg = consumer.poll(0.2)
            if msg is None:
                if (
                    args.timeout_ms >= 0
                    and (time.monotonic() - idle_since) * 1000 > args.timeout_ms
                ):
                    break
                continue
            idle_since = time.monotonic()
            if msg.error():
                print(f"Error: {msg.error()}", file=sys.stderr)
                continue
            value = (msg.value() or b"").decode("utf-8", "replace")
            prefix = f"{msg.partition()}:{msg.offset()}\t" if args.print_offset else ""
            if args.print_key:
                prefix += (msg.key() or b"").decode("utf-8", "replace") + "\t"
            print(prefix + value, flush=True)
            seen += 1
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    return 0
