"""A three-broker cluster on etcd: leaders SIGKILLed under idempotent acks=all load.

Every acknowledged message must be read back exactly once, in per-partition order, and at
the end every replica of every partition holds the same batches up to the high watermark.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from tests.cluster_process import Cluster

TOPIC = "failover"
PARTITIONS = 3


@pytest.fixture
def cluster(tmp_path: Path):  # type: ignore[no-untyped-def]
    with Cluster(tmp_path) as c:
        yield c


def produce(cluster: Cluster, count: int, rate: int, acked: dict[int, list[int]]) -> list[str]:
    """Send `count` messages (value = sequence number) at about `rate`/s; fill `acked`."""
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 120_000,
            "retry.backoff.ms": 100,
        }
    )

    def delivered(err, msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            acked[msg.partition()].append(int(msg.value()))

    start = time.monotonic()
    for i in range(count):
        while True:
            try:
                value = str(i).encode()
                producer.produce(TOPIC, value=value, key=value, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        ahead = i / rate - (time.monotonic() - start)
        if ahead > 0.01:
            time.sleep(ahead)
    left = producer.flush(120)
    if left:
        errors.append(f"{left} messages never delivered")
    return errors


def read_all(cluster: Cluster, expected: int) -> dict[int, list[int]]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "failover-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    got: dict[int, list[int]] = defaultdict(list)
    total = 0
    idle_until = time.monotonic() + 30
    try:
        while time.monotonic() < idle_until:
            batch = consumer.consume(10_000, 1.0)
            for msg in batch:
                if msg.error() is None:
                    got[msg.partition()].append(int(msg.value()))
                    total += 1
            if batch:
                idle_until = time.monotonic() + (3 if total >= expected else 30)
    finally:
        consumer.close()
    return got


def check_exactly_once(acked: dict[int, list[int]], got: dict[int, list[int]]) -> None:
    """No duplicates in any partition; every acknowledged message stored, in the order the
    producer's sequence gave it (a partition's acked values ascend with the sequence)."""
    for p, values in got.items():
        assert len(values) == len(set(values)), f"partition {p}: duplicates in the log"
    for p, values in acked.items():
        stored = got.get(p, [])
        wanted = set(values)
        missing = wanted - set(stored)
        assert not missing, f"partition {p}: {len(missing)} acknowledged messages lost"
        in_log = [v for v in stored if v in wanted]
        assert in_log == sorted(values), f"partition {p}: stored out of order"


@pytest.mark.timeout(300)
def test_leaders_killed_under_idempotent_acks_all_lose_and_duplicate_nothing(
    cluster: Cluster,
) -> None:
    cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
    acked: dict[int, list[int]] = defaultdict(list)
    stop = threading.Event()
    kills: list[int] = []

    thread = threading.Thread(
        target=cluster.kill_leaders_in_turn, args=(TOPIC, PARTITIONS, stop, kills)
    )
    thread.start()
    try:
        errors = produce(cluster, 200_000, 8_000, acked)
    finally:
        stop.set()
        thread.join()
    assert not errors, errors[:5]
    assert len(kills) >= 3, kills
    total = sum(len(v) for v in acked.values())
    assert total == 200_000
    got = read_all(cluster, total)
    check_exactly_once(acked, got)
    cluster.check_replicas_identical(TOPIC)
