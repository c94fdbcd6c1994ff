"""Durability across restarts of the real broker process, driven by confluent-kafka.

(a) clean restart (SIGTERM) and (b) SIGKILL + restart: every acknowledged record is found again
at the same offset with the same key, value and timestamp, the time index answers as before,
and producing continues at the right offsets. (c) SIGKILL while a producer is sending, then a
restart on the same port: the producer retries, and every record whose delivery report
succeeded is in the log at the offset the report named. Idempotence is not used, so a retried
record may be stored twice; duplicates are allowed, loss of acknowledged data is not.
"""

from __future__ import annotations

import functools
import threading
import time

import pytest
from confluent_kafka import KafkaError, Message, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration.helpers import (
    PARTITIONS,
    TIMEOUT,
    TS_BASE,
    Rec,
    assert_acked_layout,
    assert_same_records,
    by_partition,
    confluent_consumer,
    confluent_read,
    create_topic,
    end_offsets,
    expected_offset_for_time,
    key_of,
    produce_all,
    value_of,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SMALL_SEGMENTS = {"log.segment.bytes": "8192", "log.index.interval.bytes": "512"}


def watermarks(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    consumer = confluent_consumer(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=TIMEOUT, cached=False
            )
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def check_time_index(bootstrap: str, topic: str, acked: list[Rec]) -> None:
    """offsets_for_times at every 37th record of each partition, plus after the end."""
    consumer = confluent_consumer(bootstrap)
    try:
        for p, recs in by_partition(acked).items():
            targets = [r.timestamp for r in recs[::37] if r.timestamp is not None]
            targets.append(max(r.timestamp or 0 for r in recs) + 1)
            query = [TopicPartition(topic, p, ts) for ts in targets]
            for ts in targets:
                (answer,) = consumer.offsets_for_times(
                    [TopicPartition(topic, p, ts)], timeout=TIMEOUT
                )
                assert answer.error is None, answer.error
                assert answer.offset == expected_offset_for_time(recs, ts), (p, ts)
            assert query
    finally:
        consumer.close()


def keyed(prefix: str, start: int, count: int) -> list[tuple[bytes, bytes | None, int | None]]:
    return [
        (key_of(prefix, i), value_of(prefix, i), TS_BASE + i) for i in range(start, start + count)
    ]


@pytest.mark.parametrize("segments", ["default-segments", "small-segments"])
@pytest.mark.parametrize("kill", [False, True], ids=["clean", "sigkill"])
def test_acknowledged_data_survives_restart(
    broker_factory: type[BrokerProcess], kill: bool, segments: str
) -> None:
    overrides = SMALL_SEGMENTS if segments == "small-segments" else {}
    broker = broker_factory("data", overrides).start()
    topic = "restart"
    create_topic(broker.bootstrap, topic)
    # Small producer batches, so that small segments really roll many times.
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 25 if overrides else 10_000,
        }
    )
    before = produce_all(producer, topic, keyed("r", 0, 3000))
    assert_acked_layout(before)
    ends = end_offsets(before)
    if segments == "small-segments":
        files = list(broker.data_dir.glob(f"{topic}-*/*.log"))
        assert len(files) > 2 * PARTITIONS, f"expected rolled segments, found {len(files)}"

    port = broker.port
    broker.restart(kill=kill)
    assert broker.port == port

    # Everything acknowledged is back: same offsets, keys, values and timestamps.
    assert watermarks(broker.bootstrap, topic) == {p: (0, ends[p]) for p in range(PARTITIONS)}
    assert_same_records(
        before, confluent_read(broker.bootstrap, topic, ends), check_timestamps=True
    )
    check_time_index(broker.bootstrap, topic, before)

    # The same producer instance reconnects, and new records continue at the old ends.
    after = produce_all(producer, topic, keyed("r", 3000, 1000))
    for p, recs in by_partition(after).items():
        assert [r.offset for r in recs] == list(range(ends[p], ends[p] + len(recs))), p
    everything = before + after
    all_ends = end_offsets(everything)

    broker.restart(kill=kill)
    assert watermarks(broker.bootstrap, topic) == {p: (0, all_ends[p]) for p in range(PARTITIONS)}
    assert_same_records(
        everything, confluent_read(broker.bootstrap, topic, all_ends), check_timestamps=True
    )
    check_time_index(broker.bootstrap, topic, everything)


class Reports:
    """Delivery reports from the producer thread, with the send index of each message."""

    def __init__(self) -> None:
        self.ok: dict[int, Rec] = {}
        self.failed: dict[int, str] = {}
        self.ok_after_restart = 0
        self.restarted = threading.Event()

    def callback(self, index: int, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed[index] = str(err)
            return
        self.ok[index] = Rec(msg.partition(), msg.offset(), msg.key(), msg.value())
        if self.restarted.is_set():
            self.ok_after_restart += 1


def check_no_acknowledged_loss(
    broker: BrokerProcess, topic: str, reports: Reports, messages: list[tuple[bytes, bytes]]
) -> dict[int, int]:
    """Read the whole log; every acknowledged record is at its reported offset. Returns the
    end offset of every partition."""
    # Read the whole log back.
    marks = watermarks(broker.bootstrap, topic)
    assert all(low == 0 for low, _ in marks.values()), marks
    ends = {p: high for p, (_, high) in marks.items()}
    log = confluent_read(broker.bootstrap, topic, ends, timeout=60)
    for p, recs in log.items():
        assert [r.offset for r in recs] == list(range(ends[p])), f"partition {p} has gaps"

    # No loss: every acknowledged record is at exactly the offset its report named.
    at = {(r.partition, r.offset): (r.key, r.value) for recs in log.values() for r in recs}
    missing = [
        (i, rec)
        for i, rec in sorted(reports.ok.items())
        if at.get((rec.partition, rec.offset)) != (rec.key, rec.value)
    ]
    assert not missing, f"{len(missing)} acknowledged records lost or changed, e.g. {missing[:3]}"
    # Nothing in the log that was never sent (duplicates of sent records are allowed).
    sent_pairs = set(messages)
    strangers = [pos for pos, kv in at.items() if kv not in sent_pairs]
    assert not strangers, f"records that were never produced at {strangers[:5]}"
    return ends


def test_sigkill_while_producing_loses_no_acknowledged_record(broker: BrokerProcess) -> None:
    topic = "kill-mid-send"
    create_topic(broker.bootstrap, topic)
    total = 40_000
    messages = [(key_of("m", i), value_of("m", i)) for i in range(total)]
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 2,
            "batch.num.messages": 200,
            "message.timeout.ms": 90_000,
            "retry.backoff.ms": 100,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
        }
    )
    reports = Reports()
    sent = 0
    thread_error: list[BaseException] = []

    def send_all() -> None:
        nonlocal sent
        try:
            for i, (key, value) in enumerate(messages):
                while True:
                    try:
                        producer.produce(
                            topic,
                            key=key,
                            value=value,
                            on_delivery=functools.partial(reports.callback, i),
                        )
                        break
                    except BufferError:
                        producer.poll(0.05)
                sent = i + 1
                if i % 100 == 99:
                    producer.poll(0.005)  # pace: the kill must land mid-stream
            remaining = producer.flush(100)
            assert remaining == 0, f"{remaining} messages still queued after flush"
        except BaseException as exc:  # reported by the main thread
            thread_error.append(exc)

    sender = threading.Thread(target=send_all, name="producer", daemon=True)
    sender.start()
    wait_until(lambda: len(reports.ok) >= 5000, TIMEOUT, "5000 acknowledged records")
    acked_before_kill = len(reports.ok)
    assert sent < total, "the producer finished before the kill; nothing was in flight"
    port = broker.port
    broker.kill()
    time.sleep(0.5)
    broker.start()  # same port: the producer reconnects and retries
    assert broker.port == port
    reports.restarted.set()
    sender.join(120)
    assert not sender.is_alive(), "producer thread did not finish"
    assert not thread_error, f"producer thread failed: {thread_error[0]!r}"

    # With a 90 s message timeout and the broker back in well under that, nothing may fail.
    assert not reports.failed, (
        f"{len(reports.failed)} deliveries failed: {list(reports.failed.items())[:5]}"
    )
    assert len(reports.ok) == total
    assert reports.ok_after_restart > 0, "nothing was acknowledged after the restart"
    assert acked_before_kill < total

    ends = check_no_acknowledged_loss(broker, topic, reports, messages)

    # And the log keeps going at the right offsets afterwards.
    more = produce_all(producer, topic, keyed("after", 0, 400))
    for p, recs in by_partition(more).items():
        assert [r.offset for r in recs] == list(range(ends[p], ends[p] + len(recs))), p
    new_ends = end_offsets(more)
    tail = confluent_read(
        broker.bootstrap, topic, {p: max(ends[p], new_ends.get(p, 0)) for p in ends}, starts=ends
    )
    assert_same_records(more, tail)
