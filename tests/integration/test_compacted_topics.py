"""Compacted topics through real clients: created with Kafka's topic configs, described back
with values and sources, keyed records read back, unkeyed records refused (INVALID_RECORD,
nothing appended) and Kafka's bad values refused with INVALID_CONFIG."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioConfigResource
from aiokafka.admin.config_resource import ConfigResourceType as AioConfigResourceType
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KpTopicPartition
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import InvalidConfigurationError, InvalidRecordError

from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.compression import Codec, compress
from oncelog.protocol.records.record import encode_record
from tests.broker_process import BrokerProcess
from tests.integration.helpers import TIMEOUT, confluent_read
from tests.integration.rawclient import PRODUCE, RawClient, produce_body
from tests.integration.test_aiokafka import run

pytestmark = pytest.mark.integration

COMPACTED = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1000",
    "segment.ms": "100",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "60000",
}
DYNAMIC_TOPIC = 1  # DescribeConfigs source DYNAMIC_TOPIC_CONFIG
DEFAULT = 5  # DEFAULT_CONFIG
KEYED = [(b"k1", b"a"), (b"k2", b"b"), (b"k1", b"c"), (b"k2", None)]


def end_offset(bootstrap: str, topic: str) -> int:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp = KpTopicPartition(topic, 0)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


def produce_confluent(
    bootstrap: str, topic: str, records: Sequence[tuple[bytes | None, bytes | None]]
) -> list[KafkaError | None]:
    """One delivery result per record (flushed one by one: one batch each)."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    results: list[KafkaError | None] = []
    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=lambda e, _m: results.append(e))
        assert producer.flush(TIMEOUT) == 0
    return results


def check_keyed_round_trip(bootstrap: str, topic: str) -> None:
    assert produce_confluent(bootstrap, topic, KEYED) == [None] * len(KEYED)
    got = confluent_read(bootstrap, topic, {0: len(KEYED)})[0]
    assert [(r.key, r.value) for r in got] == KEYED


def test_kafka_python_creates_and_describes_a_compacted_topic(broker: BrokerProcess) -> None:
    topic = "kp-compacted"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics([KpNewTopic(topic, 1, 1, topic_configs=COMPACTED)])
        described = admin.describe_configs(
            [KpConfigResource(KpConfigResourceType.TOPIC, topic)],
            config_filter="all",
            include_synonyms=True,
        )["topic"][topic]
        for key, value in COMPACTED.items():
            assert described[key]["value"] == value, key
            assert described[key]["config_source"] == "DYNAMIC_TOPIC_CONFIG", key
        ratio = described["min.cleanable.dirty.ratio"]
        assert ratio["config_type"] == "DOUBLE"
        assert ratio["synonyms"][-1] == {
            "name": "log.cleaner.min.cleanable.ratio",
            "value": "0.5",
            "source": "DEFAULT_CONFIG",
        }
        assert described["compression.zstd.level"]["value"] == "3"
        assert described["compression.zstd.level"]["config_source"] == "DEFAULT_CONFIG"
        internal = admin.describe_configs(
            [KpConfigResource(KpConfigResourceType.TOPIC, "__consumer_offsets")],
            config_filter="all",
        )["topic"]["__consumer_offsets"]
        assert internal["cleanup.policy"]["value"] == "compact"

        with pytest.raises(InvalidConfigurationError, match="no more than 1"):
            admin.create_topics(
                [KpNewTopic("kp-bad", 1, 1, topic_configs={"min.cleanable.dirty.ratio": "2"})]
            )
        with pytest.raises(InvalidConfigurationError, match="conflict topic config"):
            admin.create_topics(
                [
                    KpNewTopic(
                        "kp-bad",
                        1,
                        1,
                        topic_configs={
                            "min.compaction.lag.ms": "2000",
                            "max.compaction.lag.ms": "1000",
                        },
                    )
                ]
            )
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", retries=0)
    try:
        producer.send(topic, key=b"k", value=b"v").get(TIMEOUT)
        with pytest.raises(InvalidRecordError):
            producer.send(topic, value=b"no key").get(TIMEOUT)
    finally:
        producer.close(timeout=TIMEOUT)
    assert end_offset(broker.bootstrap, topic) == 1


def test_aiokafka_creates_and_describes_a_compacted_topic(broker: BrokerProcess) -> None:
    topic = "aio-compacted"

    async def create_and_describe() -> list[Any]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15000)
        await admin.start()
        try:
            await admin.create_topics([AioNewTopic(topic, 1, 1, topic_configs=COMPACTED)])
            responses = await admin.describe_configs(
                [AioConfigResource(AioConfigResourceType.TOPIC, topic)]
            )
            bad = await admin.create_topics(
                [AioNewTopic("aio-bad", 1, 1, topic_configs={"min.cleanable.dirty.ratio": "2"})]
            )
            return [responses, bad]
        finally:
            await admin.close()

    responses, bad = run(create_and_describe())
    (resource,) = [r for resp in responses for r in resp.resources]
    error_code, _, _, name, entries = resource[:5]
    assert (error_code, name) == (0, topic)
    described = {e[0]: (e[1], e[3]) for e in entries}
    for key, value in COMPACTED.items():
        assert described[key] == (value, DYNAMIC_TOPIC), key
    assert described["file.delete.delay.ms"] == ("60000", DEFAULT)
    assert [t[1] for t in bad.topic_errors] == [40]  # INVALID_CONFIG
    check_keyed_round_trip(broker.bootstrap, topic)


def test_confluent_creates_a_compacted_topic_and_unkeyed_records_are_refused(
    broker: BrokerProcess,
) -> None:
    topic = "confluent-compacted"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, 1, 1, config=COMPACTED)], operation_timeout=10
    ).values():
        future.result(TIMEOUT)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    described = admin.describe_configs([resource])[resource].result(TIMEOUT)
    for key, value in COMPACTED.items():
        assert described[key].value == value, key
        assert described[key].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, key
    assert described["delete.retention.ms"].value == "1000"
    assert described["min.insync.replicas"].source == ConfigSource.DEFAULT_CONFIG.value

    for bad in (
        {"min.cleanable.dirty.ratio": "2"},
        {"min.compaction.lag.ms": "5000", "max.compaction.lag.ms": "1000"},
        {"delete.retention.ms": "-1"},
    ):
        (future,) = admin.create_topics(
            [NewTopic("confluent-bad", 1, 1, config=bad)], operation_timeout=10
        ).values()
        with pytest.raises(KafkaException) as info:
            future.result(TIMEOUT)
        assert info.value.args[0].code() == KafkaError.INVALID_CONFIG, bad

    check_keyed_round_trip(broker.bootstrap, topic)
    # A record without a key: INVALID_RECORD in the delivery report, nothing appended.
    (error,) = produce_confluent(broker.bootstrap, topic, [(None, b"no key")])
    assert error is not None and error.code() == KafkaError.INVALID_RECORD
    (error,) = produce_confluent(broker.bootstrap, topic, [(b"k3", b"d")])
    assert error is None
    got = confluent_read(broker.bootstrap, topic, {0: len(KEYED) + 1})[0]
    assert [(r.offset, r.key) for r in got][-1] == (len(KEYED), b"k3")


def test_produce_response_names_each_keyless_record(broker: BrokerProcess) -> None:
    """Kafka's record_errors (KIP-467): the batch index of every record without a key, here in
    a zstd batch (checked after decompression), and the partition's error message."""
    topic = "raw-compacted"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, 1, 1, config={"cleanup.policy": "compact,delete"})], operation_timeout=10
    ).values():
        future.result(TIMEOUT)
    keys = [b"a", None, b"b", None]
    body = b"".join(encode_record(offset_delta=i, key=k, value=b"v") for i, k in enumerate(keys))
    batch = build_batch(
        base_offset=0,
        records=compress(Codec.ZSTD, body),
        record_count=len(keys),
        last_offset_delta=len(keys) - 1,
        base_timestamp=0,
        max_timestamp=0,
        attributes=int(Codec.ZSTD),
    )
    with RawClient(broker.port) as client:
        response = client.call(PRODUCE, 9, produce_body({topic: [(0, batch)]}))
    (partition,) = response.responses[0].partition_responses
    assert partition.error_code == 87  # INVALID_RECORD
    why = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
    assert [(e.batch_index, e.batch_index_error_message) for e in partition.record_errors] == [
        (1, why),
        (3, why),
    ]
    assert partition.error_message.startswith(
        "One or more records have been rejected due to 2 record errors in total"
    )
    assert end_offset(broker.bootstrap, topic) == 0
