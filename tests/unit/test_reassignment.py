"""Partition reassignment (KIP-455) in the sans-IO controller: a move is requested, the new
replicas catch up, and the controller ends it by cutting the replicas to the target in the
same write as the partition state (a leader outside the target hands over)."""

from __future__ import annotations

import uuid

import pytest

from oncelog.errors import (
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
    NoReassignmentInProgress,
    UnknownTopicOrPartition,
)
from oncelog.metadata.cluster_state import (
    BrokerRegistration,
    ClusterStateError,
    PartitionState,
    Reassignment,
    TopicAssignment,
)
from oncelog.metadata.controller import (
    Controller,
    PartitionWrite,
    complete_reassignment,
    isr_change,
)
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)


class Etcd:
    """Topic and partition keys with mod_revisions; a write with a topic update applies
    both keys or neither, as the IO adapter's two-key transaction does."""

    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.revision = 10
        self.topics: dict[str, tuple[TopicAssignment, int]] = {}
        self.partitions: dict[TopicPartition, tuple[PartitionState, int]] = {}
        self.applied: list[PartitionWrite] = []

    def put_topic(self, assignment: TopicAssignment) -> None:
        self.revision += 1
        self.topics[assignment.name] = (assignment, self.revision)
        self.apply(self.c.topic_changed(assignment, self.revision))

    def put_partition(self, tp: TopicPartition, state: PartitionState) -> list[PartitionWrite]:
        self.revision += 1
        self.partitions[tp] = (state, self.revision)
        return self.c.partition_changed(tp.topic, tp.partition, state, self.revision)

    def apply(self, writes: list[PartitionWrite]) -> None:
        for _ in range(100):
            if not writes:
                return
            follow: list[PartitionWrite] = []
            for w in writes:
                current = self.partitions.get(w.tp)
                if (current[1] if current else 0) != w.expected_mod_revision:
                    continue
                topic_moved = self.topics[w.topic][1] != w.topic_mod_revision
                if w.topic_update is not None and topic_moved:
                    continue
                self.applied.append(w)
                follow += self.put_partition(w.tp, w.new_state)
                if w.topic_update is not None:
                    self.revision += 1
                    self.topics[w.topic] = (w.topic_update, self.revision)
                    follow += self.c.topic_changed(w.topic_update, self.revision)
            writes = follow
        raise AssertionError("writes never settled")

    def state(self) -> PartitionState:
        return self.partitions[TP][0]

    def topic(self) -> TopicAssignment:
        return self.topics["t"][0]

    def leader_sets_isr(self, isr: tuple[int, ...]) -> None:
        state = self.state()
        new = isr_change(state, isr, state.leader, self.topic().replicas[0])
        assert isinstance(new, PartitionState)
        self.apply(self.put_partition(TP, new))


def cluster(replicas: tuple[int, ...] = (1, 2), brokers: int = 4) -> Etcd:
    controller = Controller()
    for node in range(1, brokers + 1):
        controller.broker_registered(BrokerRegistration(node, "h", 9092))
    controller.became_controller(0)
    etcd = Etcd(controller)
    etcd.put_topic(TopicAssignment("t", uuid.UUID(int=1), (replicas,), {}))
    assert etcd.state().leader == replicas[0] and etcd.state().isr == replicas
    return etcd


def start(etcd: Etcd, target: list[int] | None) -> None:
    assignment, outcome = etcd.c.reassign("t", {0: target})
    assert outcome == {0: None}
    assert assignment is not None
    etcd.put_topic(assignment)


def test_a_move_waits_for_the_new_replica_then_hands_leadership_over() -> None:
    etcd = cluster((1, 2))
    start(etcd, [2, 3])
    assert etcd.topic().replicas == ((2, 3, 1),)
    assert etcd.topic().reassignments == {0: Reassignment((2, 3), (1, 2))}
    assert etcd.state().leader == 1 and etcd.state().isr == (1, 2)  # 3 has not caught up
    epoch = etcd.state().leader_epoch
    etcd.leader_sets_isr((1, 2, 3))
    assert etcd.topic().replicas == ((2, 3),) and not etcd.topic().reassignments
    assert etcd.state().leader == 2 and etcd.state().isr == (2, 3)
    assert etcd.state().leader_epoch == epoch + 1
    assert "reassignment complete" in etcd.applied[-1].reason


def test_a_leader_in_the_target_keeps_leading_in_its_epoch() -> None:
    etcd = cluster((1, 2))
    start(etcd, [1, 3])
    epoch = etcd.state().leader_epoch
    etcd.leader_sets_isr((1, 2, 3))
    assert etcd.topic().replicas == ((1, 3),)
    assert etcd.state().leader == 1 and etcd.state().isr == (1, 3)
    assert etcd.state().leader_epoch == epoch


def test_a_cancel_goes_back_to_the_original_replicas_at_once() -> None:
    etcd = cluster((1, 2))
    start(etcd, [3, 4])
    assert etcd.topic().replicas == ((3, 4, 1, 2),)
    start(etcd, None)
    assert etcd.topic().replicas == ((1, 2),) and not etcd.topic().reassignments
    assert etcd.state().leader == 1 and etcd.state().isr == (1, 2)


def test_a_new_target_replaces_the_move_and_keeps_its_original() -> None:
    etcd = cluster((1, 2))
    start(etcd, [3, 4])
    start(etcd, [2, 4])
    assert etcd.topic().replicas == ((2, 4, 3, 1),)
    assert etcd.topic().reassignments == {0: Reassignment((2, 4), (1, 2))}
    etcd.leader_sets_isr((1, 2, 4))
    assert etcd.topic().replicas == ((2, 4),)
    assert etcd.state().leader == 2 and etcd.state().isr == (2, 4)


def test_a_move_is_not_ended_by_a_standby_or_without_the_topic_revision() -> None:
    move = Reassignment((2, 3), (1, 2))
    state = PartitionState(1, 0, (1, 2, 3), 1)
    assert complete_reassignment(state, move, {1, 2, 3}) == PartitionState(2, 1, (2, 3), 2)
    assert complete_reassignment(PartitionState(1, 0, (1, 2), 1), move, {1, 2, 3}) is None
    recovering = PartitionState(1, 0, (1, 2, 3), 1, leader_recovery=True)
    assert complete_reassignment(recovering, move, {1, 2, 3}) is None
    offline = PartitionState(-1, 0, (1, 2, 3), 1)
    assert complete_reassignment(offline, move, {1, 2, 3}) is None

    etcd = cluster((1, 2))
    start(etcd, [2, 3])
    etcd.c.lost_controller()
    etcd.leader_sets_isr((1, 2, 3))
    assert etcd.topic().reassignments  # nobody ended it
    assert etcd.c.became_controller(0)[0].topic_update is not None  # the next one does


def test_requests_that_kafka_refuses() -> None:
    etcd = cluster((1, 2), brokers=3)
    c = etcd.c
    assignment, outcome = c.reassign(
        "t", {0: [1, 9], 5: [1, 2]}, allow_replication_factor_change=True
    )
    assert assignment is None
    assert isinstance(outcome[0], InvalidReplicaAssignment) and "9" in str(outcome[0])
    assert isinstance(outcome[5], UnknownTopicOrPartition)
    assert isinstance(c.reassign("t", {0: [2, 2]})[1][0], InvalidReplicaAssignment)
    assert isinstance(c.reassign("t", {0: []})[1][0], InvalidReplicaAssignment)
    assert isinstance(c.reassign("t", {0: None})[1][0], NoReassignmentInProgress)
    assert isinstance(c.reassign("nope", {0: [1]})[1][0], UnknownTopicOrPartition)
    refused = c.reassign("t", {0: [1, 2, 3]}, allow_replication_factor_change=False)[1][0]
    assert isinstance(refused, InvalidReplicationFactor)
    assert c.reassign("t", {0: [1, 2]}) == (None, {0: None})  # already there


def test_a_move_survives_the_round_trip_through_etcd_bytes() -> None:
    moving = TopicAssignment(
        "t", uuid.UUID(int=1), ((2, 3, 1), (1, 2)), {}, False, {0: Reassignment((2, 3), (1, 2))}
    )
    assert TopicAssignment.from_bytes(moving.to_bytes()) == moving
    plain = TopicAssignment("t", uuid.UUID(int=1), ((1, 2),), {})
    assert b"reassignments" not in plain.to_bytes()
    with pytest.raises(ClusterStateError):
        TopicAssignment(
            "t", uuid.UUID(int=1), ((1, 2),), {}, False, {0: Reassignment((3,), (1, 2))}
        )


def test_partitions_added_during_a_move_take_its_target_size() -> None:
    etcd = cluster((1, 2))
    start(etcd, [2])  # partition 0 shrinks to one replica: it is (2, 1) meanwhile
    grown = etcd.c.add_partitions("t", 3)
    assert grown.reassignments == etcd.topic().reassignments
    assert [len(r) for r in grown.replicas[1:]] == [1, 1]


def test_a_new_order_of_the_same_replicas_is_no_move() -> None:
    etcd = cluster((1, 2, 3))
    etcd.leader_sets_isr((1, 2))  # 3 lags: a move would wait for it
    start(etcd, [2, 1, 3])
    assert etcd.topic().replicas == ((2, 1, 3),) and not etcd.topic().reassignments


def test_a_replaced_move_lists_what_its_first_target_added_as_removing() -> None:
    etcd = cluster((1, 2, 3), brokers=6)
    start(etcd, [4, 5, 6])
    start(etcd, [1, 2, 4])
    move = etcd.topic().reassignments[0]
    assert move == Reassignment((1, 2, 4), (1, 2, 3))
    assert etcd.topic().replicas == ((1, 2, 4, 5, 6, 3),)
    assert move.adding == (4,) and move.removing(etcd.topic().replicas[0]) == (5, 6, 3)
    etcd.leader_sets_isr((1, 2, 3, 4))
    assert etcd.topic().replicas == ((1, 2, 4),) and etcd.state().isr == (1, 2, 4)
