"""Shared helpers for the third-party client tests: test data, topic creation, exact checks.

Every client test follows the same pattern: produce keyed messages and record what the broker
acknowledged (partition, offset) from the client's own delivery report; read the partitions
back from explicit offsets; then compare the two exactly, per partition and in offset order.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

PARTITIONS = 8
TIMEOUT = 30.0
#: A fixed CreateTime base well in the past, so timestamps are deterministic and distinct.
TS_BASE = 1_600_000_000_000


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as acknowledged by a producer or as returned by a consumer."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int | None = None


def key_of(prefix: str, i: int) -> bytes:
    return f"{prefix}-key-{i:07d}".encode()


def value_of(prefix: str, i: int) -> bytes:
    """Distinct values of varying length, including non-UTF-8 bytes."""
    filler = bytes((i * 7 + j) % 256 for j in range(i % 41))
    return f"{prefix}-value-{i:07d}|".encode() + filler


def ascii_value_of(prefix: str, i: int) -> bytes:
    """Printable values for kcat, which reads and prints lines of text."""
    return f"{prefix}-value-{i:07d}-{'x' * (i % 23)}".encode()


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = PARTITIONS,
    config: Mapping[str, str] | None = None,
) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, partitions, 1, config=dict(config or {}))], operation_timeout=10
    )
    for future in futures.values():
        future.result(TIMEOUT)


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


def by_partition(records: Iterable[Rec]) -> dict[int, list[Rec]]:
    """Group records by partition, each list sorted by offset."""
    out: dict[int, list[Rec]] = {}
    for rec in records:
        out.setdefault(rec.partition, []).append(rec)
    for recs in out.values():
        recs.sort(key=lambda r: r.offset)
    return out


def end_offsets(acked: Iterable[Rec], partitions: int = PARTITIONS) -> dict[int, int]:
    """The expected high watermark of each partition: one past the last acknowledged offset."""
    ends = dict.fromkeys(range(partitions), 0)
    for rec in acked:
        ends[rec.partition] = max(ends[rec.partition], rec.offset + 1)
    return ends


def assert_acked_layout(
    acked_in_send_order: list[Rec], partitions: int = PARTITIONS, start: int = 0
) -> None:
    """Acknowledged offsets are dense from `start` in every partition, and within a partition
    they increase in the order the messages were sent (per-partition order is preserved)."""
    assert acked_in_send_order, "nothing was acknowledged"
    grouped: dict[int, list[int]] = {}
    for rec in acked_in_send_order:
        assert 0 <= rec.partition < partitions, rec
        grouped.setdefault(rec.partition, []).append(rec.offset)
    assert sorted(grouped) == list(range(partitions)), f"partitions used: {sorted(grouped)}"
    for partition, offsets in grouped.items():
        assert offsets == list(range(start, start + len(offsets))), (
            f"partition {partition}: acknowledged offsets in send order are not "
            f"{start}..{start + len(offsets) - 1}: {offsets[:20]}..."
        )


def assert_same_records(
    acked: Iterable[Rec],
    consumed: Mapping[int, list[Rec]],
    *,
    check_timestamps: bool = False,
) -> None:
    """What was read back is exactly what was acknowledged: same partitions, same offsets,
    same keys and values, in the same order; optionally the same timestamps."""
    expected = by_partition(acked)
    for partition in sorted(set(expected) | set(consumed)):
        want = expected.get(partition, [])
        got = consumed.get(partition, [])
        if not check_timestamps:
            want = [Rec(r.partition, r.offset, r.key, r.value) for r in want]
            got = [Rec(r.partition, r.offset, r.key, r.value) for r in got]
        if got != want:
            first_diff = next(
                (i for i, (a, b) in enumerate(zip(want, got, strict=False)) if a != b),
                min(len(want), len(got)),
            )
            raise AssertionError(
                f"partition {partition}: read back {len(got)} records, expected {len(want)}; "
                f"first difference at index {first_diff}: "
                f"expected {want[first_diff : first_diff + 2]}, "
                f"got {got[first_diff : first_diff + 2]}"
            )


def expected_offset_for_time(records: list[Rec], target: int) -> int:
    """Kafka's ListOffsets-by-timestamp answer: the first offset whose timestamp is >= target,
    or -1 if there is none."""
    for rec in sorted(records, key=lambda r: r.offset):
        assert rec.timestamp is not None
        if rec.timestamp >= target:
            return rec.offset
    return -1


def confluent_consumer(bootstrap: str, **extra: object) -> Consumer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": "oncelog-tests-unused",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
    }
    conf.update(extra)
    return Consumer(conf)


def confluent_read(
    bootstrap: str,
    topic: str,
    ends: Mapping[int, int],
    starts: Mapping[int, int] | None = None,
    timeout: float = TIMEOUT,
    **extra: object,
) -> dict[int, list[Rec]]:
    """Read partitions [start, end) with assign + explicit offsets; fail on any consumer error
    and on anything read beyond `end` once the deadline allows us to notice."""
    starts = starts or {}
    consumer = confluent_consumer(bootstrap, **extra)
    try:
        consumer.assign([TopicPartition(topic, p, starts.get(p, 0)) for p in ends])
        got: dict[int, list[Rec]] = {p: [] for p in ends}

        def done() -> bool:
            return all(
                (got[p][-1].offset + 1 if got[p] else starts.get(p, 0)) >= end
                for p, end in ends.items()
            )

        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, (
                f"timed out reading {topic}: have "
                f"{ {p: len(v) for p, v in got.items()} }, want ends {dict(ends)}"
            )
            for msg in consumer.consume(10_000, 0.2):
                assert msg.error() is None, f"consumer error: {msg.error()}"
                _, ts = msg.timestamp()
                got[msg.partition()].append(
                    Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), ts)
                )
        # Anything past the expected end would be a phantom record: give it a moment to show.
        for msg in consumer.consume(10_000, 0.3):
            assert msg.error() is None, f"consumer error: {msg.error()}"
            _, ts = msg.timestamp()
            got[msg.partition()].append(
                Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), ts)
            )
        return got
    finally:
        consumer.close()


class Acks:
    """Collects delivery reports by send index; any failed delivery fails the test."""

    def __init__(self, count: int) -> None:
        self.records: list[Rec | None] = [None] * count
        self.errors: list[str] = []

    def callback(self, index: int, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.errors.append(f"#{index}: {err}")
            return
        _, ts = msg.timestamp()
        self.records[index] = Rec(msg.partition(), msg.offset(), msg.key(), msg.value(), ts)

    def all(self) -> list[Rec]:
        assert not self.errors, f"delivery failures: {self.errors[:10]}"
        missing = [i for i, r in enumerate(self.records) if r is None]
        assert not missing, f"no delivery report for {len(missing)} messages, e.g. {missing[:10]}"
        return [r for r in self.records if r is not None]


def produce_all(
    producer: Producer,
    topic: str,
    messages: list[tuple[bytes, bytes | None, int | None]],
    *,
    headers: bool = False,
    partition_of: Callable[[int], int] | None = None,
) -> list[Rec]:
    """Produce (key, value, timestamp) messages in order; return the acknowledged records in
    send order."""
    acks = Acks(len(messages))
    for i, (key, value, ts) in enumerate(messages):
        kwargs: dict[str, object] = {"key": key, "value": value}
        if ts is not None:
            kwargs["timestamp"] = ts
        if headers:
            kwargs["headers"] = [("index", str(i).encode()), ("empty", b"")]
        if partition_of is not None:
            kwargs["partition"] = partition_of(i)
        while True:
            try:
                producer.produce(topic, on_delivery=functools.partial(acks.callback, i), **kwargs)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(TIMEOUT) == 0, "producer did not flush in time"
    return acks.all()


def producer_for(broker: BrokerProcess, **extra: object) -> Producer:
    conf: dict[str, object] = {"bootstrap.servers": broker.bootstrap, "acks": "all"}
    conf.update(extra)
    return Producer(conf)


def first_values(consumer: Any, n: int) -> list[bytes]:
    """The first `n` values a kafka-python consumer yields (fewer if its `consumer_timeout_ms`
    passes without a message), then close it: reading on until the timeout only waits."""
    got: list[bytes] = []
    for message in consumer:
        got.append(message.value)
        if len(got) == n:
            break
    consumer.close()
    return got


def run_tool(
    bootstrap: str, *args: str, stdin: str = "", timeout: float = 60
) -> tuple[int, str, str]:
    """`oncelog ARGS -b BOOTSTRAP` as a user runs it: (exit status, stdout, stderr); never a
    traceback."""
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", *args, "-b", bootstrap],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr
