"""A consume-transform-produce loop, exactly once: running per-key averages.

Reads `key -> number` events from an input topic (read_committed, offsets managed by the
transaction, not by the consumer), and for each event writes the key's running count, sum and
average to an output topic. Each poll's output and the consumed offsets are committed in one
transaction (send_offsets_to_transaction), so after a crash the loop resumes exactly where the
last committed transaction ended: no input is counted twice and none is lost. The running
state is the output topic itself: on start the loop reads it (read_committed) to the end.

    python examples/eos_averages.py --bootstrap 127.0.0.1:9092 --input events --output averages

An event that is not `key -> number` (no key, or a value that is not a number) is skipped with
one line on stderr; its offset is committed like any other, so it is not read again.

On an abortable error the transaction is aborted and the consumer rewound to the committed
offsets (the in-memory state of the aborted transaction is dropped with it); a fencing error
(another instance took over the transactional.id) ends this instance.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

State = dict[str, tuple[int, float]]  # key -> (count, sum)


def restore(bootstrap: str, topic: str, idle_s: float = 2.0) -> State:
    """The last result per key in the output topic (committed data only).

    Read until every partition's position reaches its end offset, or nothing more arrives
    for `idle_s` (the tail of a partition may be transaction markers, which consumers skip).
    """
    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "eos-averages-restore",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    state: State = {}
    metadata = reader.list_topics(topic, timeout=10).topics[topic]
    partitions = [TopicPartition(topic, p) for p in metadata.partitions]
    ends = {tp.partition: reader.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions}
    reader.assign([TopicPartition(topic, p, 0) for p in ends])
    last_seen = time.monotonic()
    while time.monotonic() - last_seen < idle_s:
        messages = reader.consume(500, 0.5)
        for msg in messages:
            if msg.error() is None:
                result = json.loads(msg.value())
                state[msg.key().decode()] = (result["count"], result["sum"])
        if messages:
            last_seen = time.monotonic()
        positions = reader.position([TopicPartition(topic, p) for p in ends])
        if all(tp.offset >= ends[tp.partition] for tp in positions):
            break
    reader.close()
    return state


def rewind(consumer: Consumer) -> None:
    """Go back to the offsets of the last committed transaction."""
    assignment = consumer.assignment()
    for tp in consumer.committed(assignment, timeout=10):
        consumer.seek(TopicPartition(tp.topic, tp.partition, max(tp.offset, 0)))


def parse(msg: Any) -> tuple[str, float] | None:
    """The event's (key, number), or None (with a line on stderr) if it is not one."""
    try:
        key, value = msg.key().decode(), float(msg.value())
    except (AttributeError, TypeError, ValueError, UnicodeDecodeError):
        key = value = None
    if key is None or value is None or not math.isfinite(value):
        print(
            f"skipped {msg.topic()}-{msg.partition()}@{msg.offset()}: not key -> number",
            file=sys.stderr,
        )
        return None
    return key, value


def process(messages: list[Any], state: State, producer: Producer, output: str) -> State:
    updated = dict(state)
    for msg in messages:
        event = parse(msg)
        if event is None:
            continue
        key, value = event
        count, total = updated.get(key, (0, 0.0))
        count, total = count + 1, total + value
        updated[key] = (count, total)
        producer.produce(
            output,
            key=key,
            value=json.dumps({"count": count, "sum": total, "avg": total / count}),
        )
    return updated


def run(args: argparse.Namespace) -> int:
    producer = Producer(
        {"bootstrap.servers": args.bootstrap, "transactional.id": args.transactional_id}
    )
    # First fence older instances (this aborts their open transaction), then restore.
    producer.init_transactions(30)
    state = restore(args.bootstrap, args.output)
    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": args.session_timeout_ms,
    }
    if args.group_instance_id:
        # Static membership: a restarted instance takes its place back without waiting
        # for the dead one's session to time out.
        config["group.instance.id"] = args.group_instance_id
    consumer = Consumer(config)
    consumer.subscribe([args.input])
    idle_since = time.monotonic()
    while True:
        messages = [m for m in consumer.consume(500, 0.5) if m.error() is None]
        if not messages:
            if args.max_idle_s and time.monotonic() - idle_since > args.max_idle_s:
                break
            continue
        idle_since = time.monotonic()
        producer.begin_transaction()
        try:
            updated = process(messages, state, producer, args.output)
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()),
                consumer.consumer_group_metadata(),
                30,
            )
            producer.commit_transaction(30)
            state = updated
        except KafkaException as exc:
            error = exc.args[0]
            if error.txn_requires_abort():
                producer.abort_transaction(30)
                rewind(consumer)
            elif error.fatal():
                print(f"fatal: {error}", file=sys.stderr)
                return 1
            else:
                raise
    consumer.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--input", default="events")
    parser.add_argument("--output", default="averages")
    parser.add_argument("--group", default="eos-averages")
    parser.add_argument("--transactional-id", default="eos-averages-1")
    parser.add_argument("--group-instance-id", help="static group membership (KIP-345)")
    parser.add_argument("--session-timeout-ms", type=int, default=45_000)
    parser.add_argument("--max-idle-s", type=float, default=0.0, help="stop after this idle time")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
