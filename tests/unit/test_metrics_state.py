"""The state the metrics page reads at scrape time: partition offsets and sizes, open
transactions and their age, producer state and its evictions, consumer groups and their lag,
and replication health (a single node, a leader whose ISR shrinks and grows, the
controller's elections and offline partitions)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.broker.partition import ReplicaView
from oncelog.clock import ManualClock
from oncelog.errors import ErrorCode
from oncelog.metadata.cluster_state import (
    NO_LEADER,
    PartitionState,
    Reassignment,
    TopicAssignment,
)
from oncelog.metadata.controller import Controller
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import Broker, batch

TP = {"topic": "t", "partition": "0"}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def test_partition_offsets_and_size(broker: Broker) -> None:
    broker.create_topic("t", partitions=2)
    data = batch([b"a", b"b", b"c"])
    broker.produce("t", 0, data)
    assert broker.value("oncelog_log_end_offset", **TP) == 3
    assert broker.value("oncelog_partition_high_watermark", **TP) == 3
    assert broker.value("oncelog_partition_last_stable_offset", **TP) == 3
    assert broker.value("oncelog_partition_last_stable_offset_lag", **TP) == 0
    assert broker.value("oncelog_log_start_offset", **TP) == 0
    assert broker.value("oncelog_log_size_bytes", **TP) == len(data)
    assert broker.value("oncelog_log_segments", **TP) == 1
    assert broker.value("oncelog_log_end_offset", topic="t", partition="1") == 0
    assert broker.value("oncelog_partition_open_transactions", **TP) == 0
    assert broker.value("oncelog_partition_oldest_open_transaction_age_seconds", **TP) == 0


def test_an_open_transaction_holds_the_lso_back_and_ages(broker: Broker) -> None:
    broker.create_topic("t")
    broker.produce("t", 0, batch([b"plain"]))
    pid, epoch = broker.init_producer("tx-1")
    added = broker.call(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": "tx-1",
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
        },
    )
    assert added.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
    assert broker.value("oncelog_transactions", state="Ongoing") == 1
    opened = broker.clock.wall_ms()
    data = batch(
        [b"x", b"y"], producer_id=pid, epoch=epoch, sequence=0, transactional=True, timestamp=opened
    )
    assert broker.produce("t", 0, data, transactional_id="tx-1").error_code == 0
    broker.clock.advance(7_500)
    assert broker.value("oncelog_partition_open_transactions", **TP) == 1
    assert broker.value("oncelog_partition_high_watermark", **TP) == 3
    assert broker.value("oncelog_partition_last_stable_offset", **TP) == 1
    assert broker.value("oncelog_partition_last_stable_offset_lag", **TP) == 2
    assert broker.value("oncelog_partition_oldest_open_transaction_age_seconds", **TP) == 7.5

    ended = broker.call(
        ApiKey.END_TXN,
        3,
        {
            "transactional_id": "tx-1",
            "producer_id": pid,
            "producer_epoch": epoch,
            "committed": True,
        },
    )
    assert ended.error_code == 0
    assert broker.value("oncelog_transactions", state="Ongoing") == 0
    assert broker.value("oncelog_transactions", state="CompleteCommit") == 1
    assert broker.value("oncelog_partition_open_transactions", **TP) == 0
    assert broker.value("oncelog_partition_last_stable_offset_lag", **TP) == 0
    assert broker.value("oncelog_partition_oldest_open_transaction_age_seconds", **TP) == 0


def test_the_age_of_a_transaction_older_than_the_cached_batches_is_read_from_the_log(
    broker: Broker,
) -> None:
    broker.create_topic("t")
    pid, epoch = broker.init_producer("tx-2")
    broker.call(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        3,
        {
            "v3_and_below_transactional_id": "tx-2",
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": "t", "partitions": [0]}],
        },
    )
    start = broker.clock.wall_ms()
    for seq in range(7):  # more than the five batches the producer state caches
        data = batch(
            [b"v"],
            producer_id=pid,
            epoch=epoch,
            sequence=seq,
            transactional=True,
            timestamp=start + seq * 1000,
        )
        assert broker.produce("t", 0, data, transactional_id="tx-2").error_code == 0
    broker.clock.advance(10_000)
    assert broker.value("oncelog_partition_oldest_open_transaction_age_seconds", **TP) == 10


def test_producer_state_entries_and_evictions(tmp_path: Path) -> None:
    broker = Broker(tmp_path, **{"producer.state.max.entries": "1"})
    try:
        broker.create_topic("t")
        for _ in range(3):
            pid, epoch = broker.init_producer()
            data = batch([b"v"], producer_id=pid, epoch=epoch, sequence=0)
            assert broker.produce("t", 0, data).error_code == 0
        assert broker.value("oncelog_producer_state_entries", **TP) == 1
        assert broker.value("oncelog_producer_state_evictions_total") == 2
    finally:
        broker.close()


def test_groups_by_state_and_their_lag(broker: Broker) -> None:
    broker.create_topic("t")
    broker.produce("t", 0, batch([b"a", b"b", b"c", b"d", b"e"]))
    answer = broker.call(
        ApiKey.OFFSET_COMMIT,
        8,
        {
            "group_id": "g",
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": 2,
                            "committed_leader_epoch": -1,
                            "committed_metadata": "",
                        }
                    ],
                }
            ],
        },
    )
    assert answer.topics[0].partitions[0].error_code == ErrorCode.none
    assert broker.value("oncelog_consumer_groups", state="Empty") == 1
    assert broker.value("oncelog_consumer_groups", state="Stable") == 0
    assert broker.value("oncelog_consumer_group_committed_offset", group="g", **TP) == 2
    assert broker.value("oncelog_consumer_group_lag", group="g", **TP) == 3
    broker.produce("t", 0, batch([b"f"]))
    assert broker.value("oncelog_consumer_group_lag", group="g", **TP) == 4


def test_a_single_node_reports_healthy_replication_and_is_the_controller(broker: Broker) -> None:
    broker.create_topic("t", partitions=3)
    values = broker.samples()
    assert values[("oncelog_active_controller", frozenset())] == 1
    for name in (
        "oncelog_under_replicated_partitions",
        "oncelog_offline_partitions",
        "oncelog_reassigning_partitions",
        "oncelog_at_min_isr_partitions",
        "oncelog_under_min_isr_partitions",
        "oncelog_isr_shrinks_total",
        "oncelog_isr_expands_total",
        "oncelog_leader_elections_total",
    ):
        assert values[(name, frozenset())] == 0, name
    held = len(list(broker.replicas.logs.partitions()))  # "t" and the internal topics
    assert held >= 3
    assert values[("oncelog_leader_partitions", frozenset())] == held
    assert values[("oncelog_partitions", frozenset())] == held


def test_a_leader_counts_isr_shrinks_and_expands(tmp_path: Path) -> None:
    broker = Broker(tmp_path, **{"etcd.connect": "http://127.0.0.1:2379", "node.id": "1"})
    try:
        replicas = broker.replicas
        tp = TopicPartition("t", 0)
        replicas.apply_topic("t", uuid.uuid4(), ((1, 2, 3),), {}, False)

        def state(isr: tuple[int, ...], partition_epoch: int) -> ReplicaView:
            return ReplicaView(1, 0, isr, partition_epoch, (1, 2, 3), partition_epoch + 1)

        replicas.apply_partition_state(tp, state((1, 2, 3), 0))
        assert broker.value("oncelog_under_replicated_partitions") == 0
        assert broker.value("oncelog_leader_partitions") == 1
        replicas.apply_partition_state(tp, state((1,), 1))
        assert broker.value("oncelog_isr_shrinks_total") == 1
        assert broker.value("oncelog_under_replicated_partitions") == 1
        assert broker.value("oncelog_at_min_isr_partitions") == 1  # min.insync.replicas=1
        assert broker.value("oncelog_under_min_isr_partitions") == 0
        replicas.apply_partition_state(tp, state((1, 2), 2))
        assert broker.value("oncelog_isr_expands_total") == 1
        assert broker.value("oncelog_isr_shrinks_total") == 1
        assert broker.value("oncelog_at_min_isr_partitions") == 0
        replicas.apply_partition_state(tp, state((1, 3), 3))  # one leaves, one joins
        assert broker.value("oncelog_isr_expands_total") == 2
        assert broker.value("oncelog_isr_shrinks_total") == 2
    finally:
        broker.close()


def test_the_controller_reports_elections_and_offline_partitions(broker: Broker) -> None:
    controller = Controller()
    broker.metrics.controller = controller
    assignment = TopicAssignment("c", uuid.uuid4(), ((1, 2), (2, 1)), {}, False)
    controller.topic_changed(assignment)
    controller.partition_changed("c", 0, PartitionState(1, 0, (1, 2), 0), 10)
    controller.partition_changed("c", 1, PartitionState(2, 0, (2, 1), 0), 11)
    assert broker.value("oncelog_active_controller") == 0  # a standby
    controller.became_controller(ManualClock().monotonic_ms())
    assert broker.value("oncelog_active_controller") == 1
    controller.partition_changed("c", 0, PartitionState(2, 1, (2,), 1), 12)  # 1 died
    controller.partition_changed("c", 1, PartitionState(2, 0, (2,), 1), 13)  # ISR only
    assert broker.value("oncelog_leader_elections_total") == 1
    assert broker.value("oncelog_offline_partitions") == 0
    controller.partition_changed("c", 0, PartitionState(NO_LEADER, 2, (2,), 2), 14)
    assert broker.value("oncelog_offline_partitions") == 1
    assert broker.value("oncelog_leader_elections_total") == 1  # no leader: no election
    move = {1: Reassignment((2, 3), (2, 1))}
    moving = TopicAssignment("c", assignment.topic_id, ((2, 1), (2, 3, 1)), {}, False, move)
    controller.topic_changed(moving, 15)
    assert broker.value("oncelog_reassigning_partitions") == 1
    controller.lost_controller()
    assert broker.value("oncelog_offline_partitions") == 0  # only the active one reports
    assert broker.value("oncelog_reassigning_partitions") == 0
