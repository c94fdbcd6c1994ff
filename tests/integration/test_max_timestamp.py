"""ListOffsets MAX_TIMESTAMP (-3, KIP-734) through librdkafka's list_offsets: the offset of the
record holding the largest timestamp, even in the middle of a batch (KAFKA-16310)."""

from __future__ import annotations

from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from oncelog.protocol.records.batch import iter_batches
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic

TIMEOUT = 15
T0 = 1_700_000_000_000


def test_max_timestamp_names_the_record_not_its_batch(broker: BrokerProcess) -> None:
    topic = "max-ts"
    create_topic(broker.bootstrap, topic, 1)
    # One batch (a long linger, one flush) whose largest timestamp is its third record.
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 1000})
    delivered: list[int] = []
    for ts in (T0 + 10, T0 + 20, T0 + 99, T0 + 30, T0 + 40):
        producer.produce(
            topic,
            b"v",
            partition=0,
            timestamp=ts,
            on_delivery=lambda _e, m: delivered.append(m.offset()),
        )
    assert producer.flush(TIMEOUT) == 0
    assert delivered == [0, 1, 2, 3, 4]
    # It is one batch on disk, so its last offset (4) would be the old, wrong answer.
    [segment] = (broker.data_dir / f"{topic}-0").glob("*.log")
    assert [h.last_offset for _, h in iter_batches(segment.read_bytes())] == [4]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = KafkaTopicPartition(topic, 0)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
    assert (result.offset, result.timestamp) == (2, T0 + 99)
