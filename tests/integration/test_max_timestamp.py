"""ListOffsets MAX_TIMESTAMP (-3, KIP-734) through librdkafka's list_offsets: the offset of the
record holding the largest timestamp, even in the middle of a batch (KAFKA-16310)."""

from __future__ import annotations

from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from oncelog.protocol.records.batch import iter_batches
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.rawclient import PRODUCE, RawClient, produce_body
from tests.storage.util import make_batch

TIMEOUT = 15
T0 = 1_700_000_000_000
#: Five records in one batch, built by hand (librdkafka splits a lingered batch when it is
#: busy); the third holds the largest timestamp.
TIMESTAMPS = (T0 + 10, T0 + 20, T0 + 99, T0 + 30, T0 + 40)


def test_max_timestamp_names_the_record_not_its_batch(broker: BrokerProcess) -> None:
    topic = "max-ts"
    create_topic(broker.bootstrap, topic, 1)
    batch = make_batch([b"v"] * len(TIMESTAMPS), timestamps=TIMESTAMPS)
    with RawClient(broker.port) as client:
        answer = client.call(PRODUCE, 9, produce_body({topic: [(0, batch)]}))
    [partition] = answer.responses[0].partition_responses
    assert (partition.error_code, partition.base_offset) == (0, 0)
    # It is one batch on disk, so its last offset (4) would be the old, wrong answer.
    [segment] = (broker.data_dir / f"{topic}-0").glob("*.log")
    assert [h.last_offset for _, h in iter_batches(segment.read_bytes())] == [4]

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    tp = KafkaTopicPartition(topic, 0)
    result = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(TIMEOUT)
    assert (result.offset, result.timestamp) == (2, T0 + 99)
