"""kafka-python against the real broker, at the API versions it negotiates and at pinned older
ones (each pinned broker version makes the client use a different table of request versions).

kafka-python >= 3 enables idempotence by default, which needs InitProducerId; the broker does
not offer it yet, so producers here set enable_idempotence=False.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration.helpers import (
    PARTITIONS,
    TIMEOUT,
    TS_BASE,
    Rec,
    assert_acked_layout,
    assert_same_records,
    by_partition,
    confluent_read,
    end_offsets,
    expected_offset_for_time,
    key_of,
    value_of,
)

pytestmark = pytest.mark.integration

#: None = negotiate from ApiVersions. The pinned ones select, for example:
#: (0, 11): Produce v3, Fetch v5, ListOffsets v2, Metadata v4, CreateTopics v2;
#: (1, 1): Produce v5, Fetch v7, Metadata v5; (2, 1): Produce v7, Fetch v10, ListOffsets v4;
#: (2, 4): flexible Metadata v9 / CreateTopics v5, Produce v8, Fetch v11, ListOffsets v5.
API_VERSIONS = [None, (2, 4), (2, 1), (1, 1), (0, 11)]


def _version_kwargs(api_version: tuple[int, ...] | None) -> dict[str, Any]:
    return {} if api_version is None else {"api_version": api_version}


def make_producer(bootstrap: str, **extra: Any) -> KafkaProducer:
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "acks": "all",
        "enable_idempotence": False,
        "request_timeout_ms": 15000,
    }
    conf.update(extra)
    return KafkaProducer(**conf)


def make_consumer(bootstrap: str, **extra: Any) -> KafkaConsumer:
    conf: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        "request_timeout_ms": 15000,
    }
    conf.update(extra)
    return KafkaConsumer(**conf)


def produce(
    producer: KafkaProducer,
    topic: str,
    messages: list[tuple[bytes, bytes | None, int | None]],
    *,
    headers: bool = False,
) -> list[Rec]:
    """Send keyed messages in order; return the acknowledged records in send order."""
    futures = []
    for i, (key, value, ts) in enumerate(messages):
        hdrs = [("index", str(i).encode())] if headers else None
        futures.append(producer.send(topic, key=key, value=value, timestamp_ms=ts, headers=hdrs))
    producer.flush(timeout=TIMEOUT)
    acked = []
    for (key, value, _), future in zip(messages, futures, strict=True):
        md = future.get(timeout=TIMEOUT)
        acked.append(Rec(md.partition, md.offset, key, value, md.timestamp))
    return acked


def read(
    consumer: KafkaConsumer,
    topic: str,
    ends: dict[int, int],
    starts: dict[int, int] | None = None,
    timeout: float = TIMEOUT,
) -> tuple[dict[int, list[Rec]], dict[tuple[int, int], list[tuple[str, bytes]]]]:
    """assign + seek to explicit offsets, poll until every partition reaches its end."""
    starts = starts or {}
    tps = [TopicPartition(topic, p) for p in ends]
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, starts.get(tp.partition, 0))
    got: dict[int, list[Rec]] = {p: [] for p in ends}
    headers: dict[tuple[int, int], list[tuple[str, bytes]]] = {}

    def done() -> bool:
        return all(
            (got[p][-1].offset + 1 if got[p] else starts.get(p, 0)) >= end
            for p, end in ends.items()
        )

    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, (
            f"timed out: have { {p: len(v) for p, v in got.items()} }, want ends {ends}"
        )
        for tp, records in consumer.poll(timeout_ms=200, max_records=5000).items():
            for r in records:
                got[tp.partition].append(Rec(r.partition, r.offset, r.key, r.value, r.timestamp))
                headers[(r.partition, r.offset)] = list(r.headers)
    # A phantom record past the expected end would show up here.
    for tp, records in consumer.poll(timeout_ms=300).items():
        got[tp.partition] += [
            Rec(r.partition, r.offset, r.key, r.value, r.timestamp) for r in records
        ]
    return got, headers


def _check_offsets_for_times(
    consumer: KafkaConsumer, tps: list[TopicPartition], grouped: dict[int, list[Rec]], after: int
) -> None:
    """Before all, exactly at a record, between two records, after all (None)."""
    for probe in ("before", "exact", "between", "after"):
        query = {}
        for tp in tps:
            mid = grouped[tp.partition][len(grouped[tp.partition]) // 2]
            assert mid.timestamp is not None
            query[tp] = {
                "before": TS_BASE - 5,
                "exact": mid.timestamp,
                "between": mid.timestamp + 1,
                "after": after,
            }[probe]
        answer = consumer.offsets_for_times(query)
        for tp, target in query.items():
            want = expected_offset_for_time(grouped[tp.partition], target)
            if want == -1:
                assert answer[tp] is None, (probe, tp, answer[tp])
            else:
                found = answer[tp]
                assert found is not None, (probe, tp)
                want_ts = grouped[tp.partition][want].timestamp
                assert (found.offset, found.timestamp) == (want, want_ts), (probe, tp)


@pytest.mark.parametrize(
    "api_version", API_VERSIONS, ids=lambda v: "auto" if v is None else ".".join(map(str, v))
)
def test_keyed_produce_read_back_and_list_offsets(
    broker: BrokerProcess, api_version: tuple[int, ...] | None
) -> None:
    versions = _version_kwargs(api_version)
    topic = "kafka-python-keyed"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, **versions)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=15000)
    finally:
        admin.close()

    count = 1200
    messages: list[tuple[bytes, bytes | None, int | None]] = [
        (key_of("kp", i), value_of("kp", i), TS_BASE + 10 * i) for i in range(count)
    ]
    messages[3] = (key_of("kp", 3), None, TS_BASE + 30)  # a tombstone
    producer = make_producer(broker.bootstrap, linger_ms=5, **versions)
    try:
        acked = produce(producer, topic, messages, headers=True)
    finally:
        producer.close(timeout=TIMEOUT)
    assert_acked_layout(acked)
    assert [r.timestamp for r in acked] == [ts for _, _, ts in messages]
    ends = end_offsets(acked)
    grouped = by_partition(acked)

    consumer = make_consumer(broker.bootstrap, **versions)
    try:
        assert consumer.partitions_for_topic(topic) == set(range(PARTITIONS))
        consumed, headers = read(consumer, topic, ends)
        assert_same_records(acked, consumed, check_timestamps=True)
        send_index = {(r.partition, r.offset): i for i, r in enumerate(acked)}
        assert headers == {pos: [("index", str(i).encode())] for pos, i in send_index.items()}

        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert consumer.beginning_offsets(tps) == dict.fromkeys(tps, 0)
        assert consumer.end_offsets(tps) == {tp: ends[tp.partition] for tp in tps}

        _check_offsets_for_times(consumer, tps, grouped, TS_BASE + 10 * count)

        # seek into the middle of one partition: exactly the suffix comes back.
        p = 5
        start = len(grouped[p]) // 2
        suffix, _ = read(consumer, topic, {p: ends[p]}, starts={p: start})
        assert suffix[p] == grouped[p][start:]
    finally:
        consumer.close()

    # And librdkafka reads the same bytes the same way.
    assert_same_records(acked, confluent_read(broker.bootstrap, topic, ends))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(broker: BrokerProcess, codec: str) -> None:
    topic = f"kafka-python-{codec}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)], timeout_ms=15000)
    finally:
        admin.close()
    messages: list[tuple[bytes, bytes | None, int | None]] = [
        (key_of(codec, i), f"{codec} body {i:06d} ".encode() * 20, None) for i in range(3000)
    ]
    producer = make_producer(
        broker.bootstrap, compression_type=codec, linger_ms=20, batch_size=256 * 1024
    )
    try:
        acked = produce(producer, topic, messages)
    finally:
        producer.close(timeout=TIMEOUT)
    assert_acked_layout(acked)
    ends = end_offsets(acked)

    # Stored as the producer compressed it: the log is a fraction of the raw bytes.
    raw = sum(len(k) + len(v or b"") for k, v, _ in messages)
    stored = sum(f.stat().st_size for f in broker.data_dir.glob(f"{topic}-*/*.log"))
    assert 0 < stored < raw // 4, f"{codec}: {stored} bytes on disk for {raw} raw bytes"

    consumer = make_consumer(broker.bootstrap)
    try:
        consumed, _ = read(consumer, topic, ends)
    finally:
        consumer.close()
    assert_same_records(acked, consumed)
    # librdkafka decompresses kafka-python's batches the same way.
    assert_same_records(acked, confluent_read(broker.bootstrap, topic, ends))


def test_auto_create_delete_records_and_describe_configs(broker: BrokerProcess) -> None:
    topic = "kafka-python-auto"
    producer = make_producer(broker.bootstrap)
    try:
        # The topic does not exist: the producer's Metadata request creates it (1 partition).
        messages: list[tuple[bytes, bytes | None, int | None]] = [
            (key_of("auto", i), value_of("auto", i), TS_BASE + i) for i in range(50)
        ]
        acked = produce(producer, topic, messages)
    finally:
        producer.close(timeout=TIMEOUT)
    assert_acked_layout(acked, partitions=1)

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    consumer = make_consumer(broker.bootstrap)
    try:
        tp = TopicPartition(topic, 0)
        assert consumer.partitions_for_topic(topic) == {0}
        result = admin.delete_records({tp: 20}, timeout_ms=15000)
        assert result[tp]["low_watermark"] == 20
        assert consumer.beginning_offsets([tp]) == {tp: 20}
        assert consumer.end_offsets([tp]) == {tp: 50}
        found = consumer.offsets_for_times({tp: 0})[tp]
        assert found is not None
        assert (found.offset, found.timestamp) == (20, TS_BASE + 20)
        consumed, _ = read(consumer, topic, {0: 50}, starts={0: 20})
        assert_same_records(acked[20:], consumed)

        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all"
        )
        topic_configs = configs["topic"][topic]
        assert topic_configs["cleanup.policy"]["value"] == "delete"
        assert topic_configs["retention.ms"]["value"] == "604800000"
    finally:
        consumer.close()
        admin.close()


def test_consumer_waits_for_new_data(broker: BrokerProcess) -> None:
    """Fetch long polling: a consumer at the end of the log gets later messages, once."""
    topic = "kafka-python-tail"
    consumer = make_consumer(broker.bootstrap, fetch_max_wait_ms=2000)
    producer = make_producer(broker.bootstrap)
    try:
        produce(producer, topic, [(b"k0", b"first", None)])
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 1)
        assert consumer.poll(timeout_ms=500) == {}
        produce(producer, topic, [(b"k1", b"second", None), (b"k2", b"third", None)])
        got: list[tuple[int, bytes | None, bytes | None]] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 2:
            assert time.monotonic() < deadline, f"consumer at the tail got only {got}"
            for records in consumer.poll(timeout_ms=200).values():
                got += [(r.offset, r.key, r.value) for r in records]
        assert got == [(1, b"k1", b"second"), (2, b"k2", b"third")]
    finally:
        producer.close(timeout=TIMEOUT)
        consumer.close()


def test_acks_all_needs_min_insync_replicas(broker: BrokerProcess) -> None:
    """One broker is one in-sync replica: a topic asking for two refuses acks=all with
    NOT_ENOUGH_REPLICAS and stores nothing, as Kafka does; acks=1 is still accepted."""
    from kafka.errors import NotEnoughReplicasError

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([NewTopic("two-isr", 1, 1, topic_configs={"min.insync.replicas": "2"})])
    finally:
        admin.close()
    strict = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        with pytest.raises(NotEnoughReplicasError):
            strict.send("two-isr", b"refused").get(timeout=30)
    finally:
        strict.close()
    leader_only = KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1)
    try:
        assert leader_only.send("two-isr", b"kept").get(timeout=30).offset == 0
    finally:
        leader_only.close()
