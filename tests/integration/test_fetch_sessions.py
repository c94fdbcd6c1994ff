"""Incremental fetch sessions (KIP-227) with real clients and a real cluster.

kafka-python's consumer asks for a session, as Java's does: it must read every record once, in
order, while its requests name only what moved. In a three-broker cluster every follower
fetches on a session; the idle partitions it never names must neither stall nor fall out of
the ISR, however long they stay idle.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KafkaTopicPartition

from tests.broker_process import BrokerProcess
from tests.cluster_process import FAST, Cluster
from tests.integration.test_metrics_cluster import gauge, scrape

pytestmark = pytest.mark.integration

HTTP = {"http.listeners": "http://127.0.0.1:0"}


def test_kafka_python_reads_every_record_once_on_a_session(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory("data", HTTP).start()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("sessions", num_partitions=3)])["sessions"].result(30)
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=100,
    )
    consumer.assign([KafkaTopicPartition("sessions", p) for p in range(3)])
    consumer.seek_to_beginning()
    got: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    sent: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    try:
        for rnd in range(6):
            # Mostly one partition, so most requests leave the other two unnamed.
            partition = 1 if rnd % 3 else rnd % 2 * 2
            for i in range(25):
                value = f"r{rnd}-{i}".encode()
                producer.produce("sessions", value=value, partition=partition)
                sent[partition].append(value)
            assert producer.flush(30) == 0
            deadline = time.monotonic() + 30
            while sum(map(len, got.values())) < sum(map(len, sent.values())):
                assert time.monotonic() < deadline, (got, sent)
                for tp, records in consumer.poll(timeout_ms=200).items():
                    got[tp.partition].extend(r.value for r in records)
        page = scrape(broker)
        assert page[("oncelog_fetch_sessions", frozenset())] >= 1
        assert page[("oncelog_fetch_session_partitions", frozenset())] >= 3
        # Nothing more arrives later: no record was answered twice.
        for tp, records in consumer.poll(timeout_ms=1000).items():
            got[tp.partition].extend(r.value for r in records)
    finally:
        consumer.close()
    assert got == sent


@pytest.mark.timeout(180)
def test_followers_keep_idle_partitions_in_sync_on_sessions(tmp_path: Path) -> None:
    with Cluster(tmp_path, overrides=HTTP) as cluster:
        cluster.create_topic("busy", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
        cluster.create_topic("idle", partitions=12, rf=3, configs={"min.insync.replicas": "2"})
        cluster.wait_isr_full("busy")
        cluster.wait_isr_full("idle")
        brokers = list(cluster.brokers.values())
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "acks": "all", "enable.idempotence": True}
        )

        sent = {"busy": 0, "idle": 0}

        def produce(topic: str, partitions: int, n: int) -> None:
            for i in range(n):
                producer.produce(topic, value=f"{topic}-{i}".encode(), partition=i % partitions)
            assert producer.flush(30) == 0
            sent[topic] += n

        produce("busy", 3, 300)
        # Each partition has two followers; each keeps it in its session with the leader.
        cluster.wait_for(
            lambda: sum(gauge(b, "oncelog_fetch_session_partitions") for b in brokers) >= 30,
            15,
            "every follower's partitions in a session",
        )
        assert all(gauge(b, "oncelog_fetch_sessions") >= 2 for b in brokers)
        # Longer than replica.lag.time.max.ms with the idle topic untouched, and the busy
        # one busy: the followers name only "busy" partitions all that time.
        idle_for = int(FAST["replica.lag.time.max.ms"]) / 1000 * 2
        deadline = time.monotonic() + idle_for
        while time.monotonic() < deadline:
            produce("busy", 3, 30)
        for b in brokers:
            assert gauge(b, "oncelog_isr_shrinks_total") == 0
        for p, (_, replicas, isr) in cluster.partitions("idle").items():
            assert sorted(isr) == sorted(replicas), p
        # The first records after the long idle are acknowledged by the whole ISR at once.
        started = time.monotonic()
        produce("idle", 12, 120)
        assert time.monotonic() - started < 10
        for b in brokers:
            assert gauge(b, "oncelog_isr_shrinks_total") == 0
            assert gauge(b, "oncelog_fetch_session_evictions_total") == 0
        cluster.check_replicas_identical("idle")
        cluster.check_replicas_identical("busy")
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "check"})
        try:
            for topic, parts in (("idle", 12), ("busy", 3)):
                total = sum(
                    consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                    for p in range(parts)
                )
                assert total == sent[topic], topic
        finally:
            consumer.close()
