"""confluent-kafka (librdkafka) against the real broker: create, produce, read back, offsets.

Every check compares exact data: what each delivery report acknowledged (partition, offset)
must be what the consumer reads at that partition and offset, in order.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec
from kafka import KafkaConsumer
from kafka import TopicPartition as KpTopicPartition

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
    producer_for,
    value_of,
)

pytestmark = pytest.mark.integration


def test_keyed_produce_read_back_and_list_offsets(broker: BrokerProcess) -> None:
    topic = "confluent-keyed"
    create_topic(broker.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    metadata = admin.list_topics(topic, timeout=TIMEOUT)
    assert sorted(metadata.topics[topic].partitions) == list(range(PARTITIONS))

    count = 2000
    messages = [(key_of("c", i), value_of("c", i), TS_BASE + 10 * i) for i in range(count)]
    # Messages 7 and 8 exercise a null value (tombstone) and an empty value.
    messages[7] = (key_of("c", 7), None, TS_BASE + 70)
    messages[8] = (key_of("c", 8), b"", TS_BASE + 80)
    acked = produce_all(producer_for(broker, **{"linger.ms": 5}), topic, messages, headers=True)
    assert_acked_layout(acked)
    assert [(r.key, r.value, r.timestamp) for r in acked] == messages
    ends = end_offsets(acked)

    consumed = confluent_read(broker.bootstrap, topic, ends)
    assert_same_records(acked, consumed, check_timestamps=True)

    consumer = confluent_consumer(broker.bootstrap)
    try:
        _check_headers(consumer, topic, acked)
        _check_watermarks_and_times(consumer, topic, acked, TS_BASE + 10 * count)
        _check_seek(consumer, topic, acked)
    finally:
        consumer.close()
    _check_admin_list_offsets(admin, topic, acked)


def _check_headers(consumer: Consumer, topic: str, acked: list[Rec]) -> None:
    """Headers survive the round trip (checked on partition 0)."""
    p0 = by_partition(acked)[0]
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen: list[tuple[int, list[tuple[str, bytes]] | None]] = []
    deadline = time.monotonic() + TIMEOUT
    while len(seen) < len(p0):
        assert time.monotonic() < deadline, "timed out reading headers"
        for msg in consumer.consume(1000, 0.2):
            assert msg.error() is None, msg.error()
            seen.append((msg.offset(), msg.headers()))
    send_index = {r.offset: acked.index(r) for r in p0}
    assert seen == [
        (off, [("index", str(send_index[off]).encode()), ("empty", b"")]) for off in range(len(p0))
    ]
    consumer.unassign()


def _check_watermarks_and_times(
    consumer: Consumer, topic: str, acked: list[Rec], after_all: int
) -> None:
    ends = end_offsets(acked)
    # Watermarks: earliest 0, latest = number acknowledged, per partition.
    for p in range(PARTITIONS):
        low, high = consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout=TIMEOUT, cached=False
        )
        assert (low, high) == (0, ends[p]), f"partition {p}"

    # offsets_for_times: before all, exactly at a record, between two records, after all.
    grouped = by_partition(acked)
    for probe in ("before", "exact", "between", "after"):
        query = []
        for p, recs in grouped.items():
            mid = recs[len(recs) // 2]
            assert mid.timestamp is not None
            target = {
                "before": TS_BASE - 1,
                "exact": mid.timestamp,
                "between": mid.timestamp + 1,
                "after": after_all,
            }[probe]
            query.append(TopicPartition(topic, p, target))
        answer = consumer.offsets_for_times(query, timeout=TIMEOUT)
        for asked, tp in zip(query, answer, strict=True):
            assert tp.error is None, tp.error
            want = expected_offset_for_time(grouped[tp.partition], asked.offset)
            # librdkafka reports "no such record" as OFFSET_END (-1).
            assert tp.offset == (OFFSET_END if want == -1 else want), (probe, tp)


def _check_seek(consumer: Consumer, topic: str, acked: list[Rec]) -> None:
    """seek: jump into the middle of every partition and read exactly the suffix."""
    for p, recs in by_partition(acked).items():
        start = len(recs) // 3
        consumer.assign([TopicPartition(topic, p, 0)])
        # librdkafka only seeks a partition that is already fetching: read one first.
        first: list[Message] = []
        deadline = time.monotonic() + TIMEOUT
        while not first:
            assert time.monotonic() < deadline, f"timed out reading partition {p}"
            first = consumer.consume(1, 0.2)
        assert first[0].error() is None, first[0].error()
        assert (first[0].partition(), first[0].offset()) == (p, 0)
        consumer.seek(TopicPartition(topic, p, start))
        suffix: list[Rec] = []
        deadline = time.monotonic() + TIMEOUT
        while len(suffix) < len(recs) - start:
            assert time.monotonic() < deadline, f"timed out reading partition {p} after seek"
            for msg in consumer.consume(1000, 0.2):
                assert msg.error() is None, msg.error()
                suffix.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value()))
        assert suffix == [Rec(r.partition, r.offset, r.key, r.value) for r in recs[start:]]


def _check_admin_list_offsets(admin: AdminClient, topic: str, acked: list[Rec]) -> None:
    """The Admin API's ListOffsets: earliest, latest, max timestamp and by timestamp."""
    grouped = by_partition(acked)
    ends = end_offsets(acked)
    specs: dict[str, OffsetSpec] = {
        "earliest": OffsetSpec.earliest(),
        "latest": OffsetSpec.latest(),
        "max": OffsetSpec.max_timestamp(),
    }
    for name, spec in specs.items():
        futures = admin.list_offsets(
            {TopicPartition(topic, p): spec for p in range(PARTITIONS)}, request_timeout=TIMEOUT
        )
        for tp, future in futures.items():
            info = future.result(TIMEOUT)
            last = grouped[tp.partition][-1]
            want = {
                "earliest": (0,),
                "latest": (ends[tp.partition],),
                "max": (last.offset, last.timestamp),
            }[name]
            assert (info.offset, info.timestamp)[: len(want)] == want, (name, tp)
    for p, recs in grouped.items():
        target = recs[5].timestamp
        assert target is not None
        tp = TopicPartition(topic, p)
        info = admin.list_offsets({tp: OffsetSpec.for_timestamp(target)}, request_timeout=TIMEOUT)[
            tp
        ].result(TIMEOUT)
        assert (info.offset, info.timestamp) == (5, target)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks_levels(broker: BrokerProcess, acks: str) -> None:
    topic = f"confluent-acks-{acks}"
    create_topic(broker.bootstrap, topic)
    count = 800
    messages = [(key_of(acks, i), value_of(acks, i), None) for i in range(count)]
    producer = producer_for(broker, acks=acks)
    acked = produce_all(producer, topic, messages, partition_of=lambda i: i % PARTITIONS)
    if acks == "0":
        # No response, so no offsets: derive them from the send order within each partition.
        counters = dict.fromkeys(range(PARTITIONS), 0)
        numbered = []
        for rec in acked:
            numbered.append(Rec(rec.partition, counters[rec.partition], rec.key, rec.value))
            counters[rec.partition] += 1
        acked = numbered
    assert [r.partition for r in acked] == [i % PARTITIONS for i in range(count)]
    assert_acked_layout(acked)
    consumed = confluent_read(broker.bootstrap, topic, end_offsets(acked))
    assert_same_records(acked, consumed)


def _log_bytes(data_dir: Path, topic: str) -> int:
    return sum(f.stat().st_size for f in data_dir.glob(f"{topic}-*/*.log"))


def _produce_compressible(broker: BrokerProcess, topic: str, codec: str) -> tuple[list[Rec], int]:
    """Produce highly compressible keyed messages; return the acks and the raw byte count."""
    create_topic(broker.bootstrap, topic)
    messages: list[tuple[bytes, bytes | None, int | None]] = [
        (key_of(codec, i), f"{codec} payload {i:06d} ".encode() * 20, None) for i in range(3000)
    ]
    producer = producer_for(broker, **{"compression.type": codec, "linger.ms": 20})
    acked = produce_all(producer, topic, messages)
    assert_acked_layout(acked)
    return acked, sum(len(k) + len(v or b"") for k, v, _ in messages)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(broker: BrokerProcess, codec: str) -> None:
    """Batches produced with each codec are read back exactly, by librdkafka and by
    kafka-python (a different decompressor)."""
    topic = f"confluent-{codec}"
    acked, _ = _produce_compressible(broker, topic, codec)
    ends = end_offsets(acked)
    assert_same_records(acked, confluent_read(broker.bootstrap, topic, ends))

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False
    )
    try:
        tps = [KpTopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        for tp in tps:
            consumer.seek(tp, 0)
        got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + TIMEOUT
        while sum(map(len, got.values())) < len(acked):
            assert time.monotonic() < deadline, "kafka-python timed out reading compressed data"
            for tp, records in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += [Rec(r.partition, r.offset, r.key, r.value) for r in records]
    finally:
        consumer.close()
    assert_same_records(acked, got)


@pytest.mark.parametrize(
    "codec",
    [
        "gzip",
        "snappy",
        "lz4",
        "zstd",
    ],
)
def test_batches_are_stored_compressed(broker: BrokerProcess, codec: str) -> None:
    """The producer really compressed, and the broker stored the batches as they came:
    the log is a fraction of the raw size."""
    topic = f"confluent-stored-{codec}"
    _, raw = _produce_compressible(broker, topic, codec)
    stored = _log_bytes(broker.data_dir, topic)
    assert 0 < stored < raw // 4, f"{codec}: {stored} bytes on disk for {raw} raw bytes"


def test_delete_records_moves_log_start(broker: BrokerProcess) -> None:
    topic = "confluent-delete-records"
    create_topic(broker.bootstrap, topic)
    messages = [(key_of("d", i), value_of("d", i), TS_BASE + i) for i in range(400)]
    acked = produce_all(producer_for(broker), topic, messages)
    grouped = by_partition(acked)
    ends = end_offsets(acked)
    cut = {p: len(recs) // 2 for p, recs in grouped.items()}

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    futures = admin.delete_records(
        [TopicPartition(topic, p, off) for p, off in cut.items()], request_timeout=TIMEOUT
    )
    for tp, future in futures.items():
        assert future.result(TIMEOUT).low_watermark == cut[tp.partition]

    consumer = confluent_consumer(broker.bootstrap)
    try:
        for p in range(PARTITIONS):
            assert consumer.get_watermark_offsets(
                TopicPartition(topic, p), timeout=TIMEOUT, cached=False
            ) == (cut[p], ends[p])
        # By timestamp, a time before everything now answers with the new log start.
        answer = consumer.offsets_for_times(
            [TopicPartition(topic, p, 0) for p in range(PARTITIONS)], timeout=TIMEOUT
        )
        assert {tp.partition: tp.offset for tp in answer} == cut

        # Reading below the log start is OFFSET_OUT_OF_RANGE (auto.offset.reset=error).
        consumer.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        error = None
        while error is None:
            assert time.monotonic() < deadline, "no out-of-range error reading deleted records"
            for msg in consumer.consume(10, 0.2):
                assert msg.error() is not None, f"read a deleted record at {msg.offset()}"
                error = msg.error()
        assert error.code() in (KafkaError.OFFSET_OUT_OF_RANGE, KafkaError._AUTO_OFFSET_RESET)
    finally:
        consumer.close()

    survivors = [r for r in acked if r.offset >= cut[r.partition]]
    assert_same_records(survivors, confluent_read(broker.bootstrap, topic, ends, starts=cut))


def test_long_poll_fetch_returns_new_messages(broker: BrokerProcess) -> None:
    """A consumer parked at the end of the log gets a message produced later, via the
    broker's delayed fetch rather than an error or an empty loop."""
    topic = "confluent-long-poll"
    create_topic(broker.bootstrap, topic, partitions=1)
    consumer = confluent_consumer(broker.bootstrap, **{"fetch.wait.max.ms": 5000})
    got: list[Rec] = []
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert consumer.consume(10, 1.0) == []

        def later() -> None:
            time.sleep(0.5)
            produce_all(producer_for(broker), topic, [(b"late-key", b"late-value", None)])

        sender = threading.Thread(target=later)
        sender.start()
        deadline = time.monotonic() + TIMEOUT
        while not got:
            assert time.monotonic() < deadline, "long-polling consumer never got the message"
            for msg in consumer.consume(10, 0.5):
                assert msg.error() is None, msg.error()
                got.append(Rec(msg.partition(), msg.offset(), msg.key(), msg.value()))
        sender.join(TIMEOUT)
    finally:
        consumer.close()
    assert got == [Rec(0, 0, b"late-key", b"late-value")]


@pytest.mark.slow
def test_100k_keyed_messages_in_partition_order(broker: BrokerProcess) -> None:
    topic = "confluent-100k"
    create_topic(broker.bootstrap, topic)
    count = 120_000
    messages = [(key_of("big", i), value_of("big", i), None) for i in range(count)]
    producer = producer_for(broker, **{"linger.ms": 10, "queue.buffering.max.messages": 50_000})
    acked = produce_all(producer, topic, messages)
    assert len(acked) == count
    # Dense offsets, and each partition's offsets follow the send order exactly.
    assert_acked_layout(acked)
    ends = end_offsets(acked)
    assert sum(ends.values()) == count

    # Read back with small fetches so the broker serves many fetch responses per partition.
    consumed = confluent_read(
        broker.bootstrap,
        topic,
        ends,
        timeout=120,
        **{
            "max.partition.fetch.bytes": 65536,
            "fetch.max.bytes": 262144,
            "message.max.bytes": 262144,
        },
    )
    assert_same_records(acked, consumed)
    # And the same sequence straight through a default consumer.
    assert_same_records(acked, confluent_read(broker.bootstrap, topic, ends, timeout=120))


def test_list_all_topics(broker: BrokerProcess) -> None:
    """An all-topics Metadata request (librdkafka adds bytes after the body, Kafka ignores them)."""
    create_topic(broker.bootstrap, "listed-a", 1)
    create_topic(broker.bootstrap, "listed-b", 2)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = admin.list_topics(timeout=10).topics
    assert {"listed-a", "listed-b"} <= set(topics)
    assert len(topics["listed-b"].partitions) == 2
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "lister"})
    try:
        assert {"listed-a", "listed-b"} <= set(consumer.list_topics(timeout=10).topics)
    finally:
        consumer.close()


def test_list_all_topics_includes_internal_topics(broker: BrokerProcess) -> None:
    """Kafka lists internal topics in an all-topics Metadata answer, flagged is_internal, so
    tools see them and pattern subscriptions can leave them out by the flag."""
    create_topic(broker.bootstrap, "plain", 1)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "committer"})
    try:
        consumer.commit(offsets=[TopicPartition("plain", 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    assert {"plain", "__consumer_offsets"} <= set(admin.list_topics(timeout=10).topics)
    # kafka-python leaves out topics flagged internal (exclude_internal_topics).
    kp_consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap)
    try:
        listed = kp_consumer.topics()
    finally:
        kp_consumer.close()
    assert "plain" in listed and "__consumer_offsets" not in listed


def test_unknown_topic_partition_is_reported(broker: BrokerProcess) -> None:
    """Producing to a partition that does not exist fails the delivery, it does not vanish."""
    topic = "confluent-two"
    create_topic(broker.bootstrap, topic, partitions=2)
    producer = producer_for(broker, **{"message.timeout.ms": 5000})
    errors: list[KafkaError] = []
    producer.produce(topic, b"v", partition=5, on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(TIMEOUT)
    assert len(errors) == 1
    assert errors[0] is not None
    assert errors[0].code() == KafkaError._UNKNOWN_PARTITION


def test_kafka_exception_on_duplicate_create(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "confluent-dup")
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    future = admin.create_topics([NewTopic("confluent-dup", PARTITIONS, 1)])["confluent-dup"]
    with pytest.raises(KafkaException) as info:
        future.result(TIMEOUT)
    code = info.value.args[0].code()
    # The traceback holds this frame, and so the client, in a cycle: it would outlive the
    # broker and log failed connections into later tests' output.
    del info, future, admin
    assert code == KafkaError.TOPIC_ALREADY_EXISTS
