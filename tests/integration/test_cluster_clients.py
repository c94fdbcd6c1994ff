"""Leaders SIGKILLed under a second client library: kafka-python's idempotent producer.

The scenario of test_cluster_failover.py (librdkafka) with kafka-python's own idempotence
and retry logic: every acknowledged message is stored exactly once, in per-partition order,
and every replica ends with the same batches.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka import KafkaProducer

from tests.cluster_process import Cluster
from tests.integration.test_cluster_failover import check_exactly_once
from tests.integration.test_cluster_faults import read_all

TOPIC = "clients"
PARTITIONS = 3
COUNT = 60_000
RATE = 5_000


def read_along(cluster: Cluster, stop: threading.Event, seen: list[tuple[int, int, int]]) -> None:
    """Consume every partition from the start until `stop`: (partition, offset, value)."""
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "along", "enable.auto.commit": False}
    )
    consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            for msg in consumer.consume(1000, 0.2):
                if msg.error() is None:
                    seen.append((msg.partition(), msg.offset(), int(msg.value())))
    finally:
        consumer.close()


@pytest.mark.timeout(240)
def test_kafka_python_idempotent_producer_across_leader_kills(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        cluster.wait_isr_full(TOPIC)
        acked: dict[int, list[int]] = defaultdict(list)
        errors: list[str] = []
        lock = threading.Lock()
        stop = threading.Event()
        kills: list[int] = []

        def ok(value: int, metadata: Any) -> None:
            with lock:
                acked[metadata.partition].append(value)

        def failed(value: int, exc: BaseException) -> None:
            with lock:
                errors.append(f"{value}: {exc!r}")

        producer = KafkaProducer(
            bootstrap_servers=cluster.bootstrap.split(","),
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            retry_backoff_ms=100,
            request_timeout_ms=10_000,
            delivery_timeout_ms=120_000,
            reconnect_backoff_max_ms=1000,
        )
        # A consumer reads along: it may only ever see committed records, so everything it
        # saw is in the final log at the same offset.
        seen: list[tuple[int, int, int]] = []
        thread = threading.Thread(
            target=cluster.kill_leaders_in_turn, args=(TOPIC, PARTITIONS, stop, kills)
        )
        thread.start()
        reading = threading.Thread(target=read_along, args=(cluster, stop, seen))
        reading.start()
        try:
            start = time.monotonic()
            for i in range(COUNT):
                value = str(i).encode()
                future = producer.send(TOPIC, key=value, value=value)
                future.add_callback(ok, i)
                future.add_errback(failed, i)
                ahead = i / RATE - (time.monotonic() - start)
                if ahead > 0.01:
                    time.sleep(ahead)
            producer.flush(120)
        finally:
            stop.set()
            thread.join()
            reading.join()
            producer.close(10)
        assert not errors, errors[:5]
        assert len(kills) >= 2, kills
        assert sum(len(v) for v in acked.values()) == COUNT
        got = read_all(cluster, TOPIC)
        check_exactly_once(acked, got)
        assert sum(len(v) for v in got.values()) == COUNT
        assert len(seen) > COUNT // 2, len(seen)
        wrong = [(p, o, v) for p, o, v in seen if o >= len(got[p]) or got[p][o] != v]
        assert not wrong, f"{len(wrong)} records read that the final log has not: {wrong[:5]}"
        cluster.check_replicas_identical(TOPIC)
