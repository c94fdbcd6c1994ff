"""The smallest end-to-end check: a real librdkafka client produces and reads back."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess


def test_produce_and_consume_roundtrip(broker: BrokerProcess) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics([NewTopic("smoke", 2, 1)]).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("smoke", key=str(i).encode(), value=f"v{i}".encode(), partition=i % 2)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "smoke", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition("smoke", p, 0) for p in range(2)])
    got: dict[int, list[bytes]] = {0: [], 1: []}
    for _ in range(50):
        for msg in consumer.consume(200, 0.5):
            assert msg.error() is None
            got[msg.partition()].append(msg.value())
        if sum(len(v) for v in got.values()) == 100:
            break
    consumer.close()
    assert got[0] == [f"v{i}".encode() for i in range(0, 100, 2)]
    assert got[1] == [f"v{i}".encode() for i in range(1, 100, 2)]
