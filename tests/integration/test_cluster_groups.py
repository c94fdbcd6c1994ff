"""Consumer groups in a three-broker cluster: the coordinator of a group is the leader of its
`__consumer_offsets` partition, and committed offsets survive that broker's SIGKILL."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tests.cluster_process import Cluster

TOPIC = "grouped"
GROUP = "cluster-group"


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    overrides = {"offsets.topic.replication.factor": "3", "offsets.topic.num.partitions": "6"}
    with Cluster(tmp_path, overrides=overrides) as c:
        yield c


def consume_and_commit(cluster: Cluster, count: int) -> list[int]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": GROUP,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    values: list[int] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < count and time.monotonic() < deadline:
            for msg in consumer.consume(count - len(values), 1.0):
                assert msg.error() is None, msg.error()
                values.append(int(msg.value()))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return values


@pytest.mark.timeout(180)
def test_committed_offsets_survive_the_coordinators_sigkill(cluster: Cluster) -> None:
    cluster.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
    for i in range(2000):
        producer.produce(TOPIC, str(i).encode())
    assert producer.flush(30) == 0

    first = consume_and_commit(cluster, 1200)
    assert first == list(range(1200))
    admin = cluster.admin()  # kept alive until the future resolves
    described = admin.describe_consumer_groups([GROUP])[GROUP].result(15)
    coordinator = described.coordinator.id
    cluster.brokers[coordinator].kill()

    # The new coordinator (another replica's leadership) loaded the commit: the group goes
    # on exactly where it stopped.
    second = consume_and_commit(cluster, 800)
    assert second == list(range(1200, 2000))
    probe = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
    try:
        committed = probe.committed([KafkaTopicPartition(TOPIC, 0)], timeout=20)
    finally:
        probe.close()
    assert committed[0].offset == 2000

    cluster.brokers[coordinator].start()
    cluster.check_replicas_identical(TOPIC)
