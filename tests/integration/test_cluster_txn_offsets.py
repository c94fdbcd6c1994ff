"""Transactional offset commits survive a change of group coordinator: the broker that takes
over an offsets partition loads the last committed offset of every partition, whatever
transactions were aborted after it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from oncelog.coordinator.group.records import partition_for
from tests.cluster_process import Cluster

OFFSETS_PARTITIONS = 3
INTERNAL = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.num.partitions": "3",
    "transaction.state.log.min.isr": "2",
}
SOURCE = "src"
SINK = "sink"
GROUP = "copier"


def commit_offset(producer: Producer, group: Consumer, offset: int, commit: bool) -> None:
    """One transaction writing a record and the group's offset of src-0; committed or not."""
    producer.begin_transaction()
    producer.produce(SINK, b"x%d" % offset, partition=0)
    producer.send_offsets_to_transaction(
        [KafkaTopicPartition(SOURCE, 0, offset)], group.consumer_group_metadata(), 30
    )
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def committed(cluster: Cluster) -> int:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": GROUP,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        [tp] = consumer.committed([KafkaTopicPartition(SOURCE, 0)], timeout=30)
        assert tp.error is None, tp.error
        return int(tp.offset)
    finally:
        consumer.close()


@pytest.mark.timeout(180)
def test_an_aborted_offset_commit_does_not_hide_the_committed_one_after_failover(
    tmp_path: Path,
) -> None:
    with Cluster(tmp_path, overrides=INTERNAL) as cluster:
        cluster.create_topic(SOURCE, 1, 3)
        cluster.create_topic(SINK, 1, 3)
        producer = Producer(
            {"bootstrap.servers": cluster.bootstrap, "transactional.id": "copier-txn"}
        )
        producer.init_transactions(60)
        group = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": GROUP})
        commit_offset(producer, group, 100, commit=True)
        commit_offset(producer, group, 200, commit=False)
        assert committed(cluster) == 100
        offsets_tp = partition_for(GROUP, OFFSETS_PARTITIONS)
        cluster.wait_isr_full("__consumer_offsets")
        leader = cluster.leader("__consumer_offsets", offsets_tp)
        cluster.brokers[leader].kill()
        cluster.wait_for(
            lambda: cluster.leader("__consumer_offsets", offsets_tp) not in (-1, leader),
            30,
            "a new leader of the group's offsets partition",
        )
        time.sleep(1)
        assert committed(cluster) == 100
        cluster.brokers[leader].start()
        group.close()


def name_led_by(cluster: Cluster, internal: str, node: int, prefix: str) -> str:
    """A group or transactional id whose partition of `internal` broker `node` leads."""
    leaders = {p: state[0] for p, state in cluster.partitions(internal).items()}
    for n in range(10_000):
        if leaders.get(partition_for(f"{prefix}{n}", OFFSETS_PARTITIONS)) == node:
            return f"{prefix}{n}"
    raise AssertionError(f"broker {node} leads no partition of {internal}")


@pytest.mark.timeout(150)
def test_offsets_and_data_on_brokers_that_are_not_the_transaction_coordinator(
    tmp_path: Path,
) -> None:
    """RF=1 internal topics: the transaction coordinator (broker 1), the group coordinator
    (broker 2) and the data (RF=1 on 3, RF=2 on 2 and 3) are different brokers; a
    committed transaction's offsets and records appear, an aborted one's do not."""
    rf1 = {
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.num.partitions": str(OFFSETS_PARTITIONS),
        "transaction.state.log.min.isr": "1",
    }
    with Cluster(tmp_path, overrides=rf1) as cluster:
        cluster.create_topic(SOURCE, assignment=[[3]])
        cluster.create_topic(SINK, assignment=[[3, 2]])
        Producer(
            {"bootstrap.servers": cluster.bootstrap, "transactional.id": "warm-up"}
        ).init_transactions(60)
        cluster.wait_for(lambda: len(cluster.partitions("__transaction_state")) == 3, 30)
        txn_id = name_led_by(cluster, "__transaction_state", 1, "txn-")
        # A group's first FindCoordinator creates __consumer_offsets (committed() asks it).
        first = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "first"})
        first.committed([KafkaTopicPartition(SOURCE, 0)], timeout=30)
        first.close()
        cluster.wait_for(lambda: len(cluster.partitions("__consumer_offsets")) == 3, 30)
        group_id = name_led_by(cluster, "__consumer_offsets", 2, "group-")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id})
        producer.init_transactions(60)
        group = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group_id})
        for offset, commit in ((10, True), (20, False), (30, True), (40, False)):
            commit_offset(producer, group, offset, commit)
        group.close()
        reader = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group_id,
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        [tp] = reader.committed([KafkaTopicPartition(SOURCE, 0)], timeout=30)
        assert tp.error is None and tp.offset == 30, tp
        reader.assign([KafkaTopicPartition(SINK, 0, 0)])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(values) < 2:
            values += [m.value() for m in reader.consume(10, 0.5) if m.error() is None]
        values += [m.value() for m in reader.consume(10, 1.0) if m.error() is None]
        reader.close()
        assert values == [b"x10", b"x30"]
