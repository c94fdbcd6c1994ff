"""Replication throttles on a real cluster (three brokers, etcd): a partition moved to a new
broker under a leader or a follower throttle is copied no faster than the rate lets it, while
an acks=all producer writing to it meanwhile is not held back (its in-sync replicas are never
throttled); the copy ends identical. The throttles are set as Kafka's tools set them, with
confluent-kafka's IncrementalAlterConfigs, and the move with kafka-python's
AlterPartitionReassignments.

The copy's duration is bounded from below only: a throttle cannot make it faster, a loaded
machine only slower."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient

from tests.cluster_process import Cluster

pytestmark = pytest.mark.integration

#: 100 kB/s, measured over at least 10 s: 1 MB goes at once, the next MB takes 10 s more.
RATE = 100_000
MESSAGE = b"r" * 1000
COUNT = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(
        tmp_path_factory.mktemp("throttle"), overrides={"auto.leader.rebalance.enable": "false"}
    ) as c:
        yield c


def set_configs(cluster: Cluster, rtype: ResourceType, name: str, configs: dict[str, str]) -> None:
    resource = ConfigResource(
        rtype,
        name,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()
        ],
    )
    admin = cluster.admin()  # kept alive until the future resolves
    admin.incremental_alter_configs([resource])[resource].result(30)


def produce(cluster: Cluster, topic: str, count: int) -> int:
    """Send `count` messages with acks=all; how many were acknowledged."""
    acked = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for _ in range(count):
        producer.produce(topic, MESSAGE, on_delivery=lambda e, m: acked.append(e is None))
        producer.poll(0)
    assert producer.flush(60) == 0
    return sum(acked)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("side", ["leader", "follower"])
def test_a_throttled_move_is_copied_at_the_rate_and_producers_go_on(
    cluster: Cluster, side: str
) -> None:
    topic = f"throttled-{side}"
    cluster.create_topic(topic, 1, 2, {"min.insync.replicas": "2"}, assignment=[[1, 2]])
    assert produce(cluster, topic, COUNT) == COUNT  # 2 MB to copy
    # The leader (1) sends the copy, the new replica (3) fetches it: throttle one side.
    broker, replicas = ("1", "0:1,0:2") if side == "leader" else ("3", "0:3")
    set_configs(
        cluster, ResourceType.BROKER, broker, {f"{side}.replication.throttled.rate": str(RATE)}
    )
    set_configs(
        cluster, ResourceType.TOPIC, topic, {f"{side}.replication.throttled.replicas": replicas}
    )
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        started = time.monotonic()
        admin.alter_partition_reassignments({KTP(topic, 0): [1, 2, 3]})
        # Producers are not held back meanwhile: the in-sync replicas 1 and 2 acknowledge.
        assert produce(cluster, topic, 100) == 100

        def copied() -> bool:
            _, shown, isr = cluster.partitions(topic)[0]
            return shown == [1, 2, 3] and sorted(isr) == [1, 2, 3]

        cluster.wait_for(copied, 120, f"{topic} copied to broker 3")
        taken = time.monotonic() - started
    finally:
        admin.close()
    # The second MB at 100 kB/s: at least 5 s (unthrottled, well under one).
    assert taken > 5.0, taken
    cluster.check_replicas_identical(topic)
