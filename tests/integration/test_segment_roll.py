"""Segments roll by the records' own timestamps (Kafka's segment.ms rule), through a real
client: records stamped long ago, one batch per send, stay in one segment."""

from __future__ import annotations

from confluent_kafka import Producer

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic

TIMEOUT = 15
T0 = 1_500_000_000_000  # July 2017: far older than segment.ms (7 days) from now
WEEK_MS = 7 * 24 * 3_600_000


def _segments(broker: BrokerProcess, topic: str) -> list[str]:
    return sorted(p.name for p in (broker.data_dir / f"{topic}-0").glob("*.log"))


def test_old_timestamps_fill_one_segment_and_roll_by_their_own_age(broker: BrokerProcess) -> None:
    topic = "old-timestamps"
    create_topic(broker.bootstrap, topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(20):  # one batch each: flushed one by one
        producer.produce(topic, b"v", partition=0, timestamp=T0 + i)
        assert producer.flush(TIMEOUT) == 0
    assert _segments(broker, topic) == ["00000000000000000000.log"]
    # A record more than segment.ms younger than the segment's first one rolls it.
    producer.produce(topic, b"v", partition=0, timestamp=T0 + WEEK_MS + 1)
    assert producer.flush(TIMEOUT) == 0
    assert _segments(broker, topic) == ["00000000000000000000.log", "00000000000000000020.log"]
