"""Kafka's rack-unaware replica assignment and its manual-assignment checks."""

from __future__ import annotations

import pytest

from oncelog.errors import InvalidPartitions, InvalidReplicaAssignment, InvalidReplicationFactor
from oncelog.metadata.placement import (
    add_partitions_start_index,
    assign_replicas,
    validate_manual_assignment,
)

# AdminRackAwareTest.testReplicaAssignment: 5 brokers, 10 partitions, RF 3, fixed start 0
# (Kafka then uses 0 for the shift too); also the table in AdminUtils' javadoc.
KAFKA_5_10_3 = (
    (0, 1, 2),
    (1, 2, 3),
    (2, 3, 4),
    (3, 4, 0),
    (4, 0, 1),
    (0, 2, 3),
    (1, 3, 4),
    (2, 4, 0),
    (3, 0, 1),
    (4, 1, 2),
)


def test_kafka_known_output() -> None:
    got = assign_replicas([4, 2, 0, 3, 1], 10, 3, start_index=0, next_replica_shift=0)
    assert got == KAFKA_5_10_3


def test_start_index_and_shift() -> None:
    # Derived by hand from Kafka's loop: first replica at (2 + p) % 5, followers at
    # first + 1 + (shift + j) % 4, shift 1 then 2 from partition 5 on.
    got = assign_replicas(range(5), 6, 3, start_index=2, next_replica_shift=1)
    assert got == ((2, 4, 0), (3, 0, 1), (4, 1, 2), (0, 2, 3), (1, 3, 4), (2, 0, 1))


def test_broker_ids_are_sorted_not_indexes() -> None:
    got = assign_replicas([30, 10, 20], 3, 2, start_index=0, next_replica_shift=0)
    assert got == ((10, 20), (20, 30), (30, 10))


def test_every_partition_has_distinct_replicas_and_leaders_spread() -> None:
    for shift in range(6):
        got = assign_replicas(range(6), 24, 4, start_index=3, next_replica_shift=shift)
        assert all(len(set(r)) == 4 for r in got)
        leaders = [r[0] for r in got]
        assert all(leaders.count(b) == 4 for b in range(6))


def test_add_partitions_continues_kafka_round_robin() -> None:
    first = assign_replicas(range(5), 3, 3, start_index=0, next_replica_shift=0)
    start = add_partitions_start_index(range(5), first[0])
    more = assign_replicas(
        range(5), 7, 3, start_index=start, next_replica_shift=start, first_partition=3
    )
    assert first + more == KAFKA_5_10_3


def test_single_broker() -> None:
    assert assign_replicas([7], 3, 1, start_index=0, next_replica_shift=0) == ((7,),) * 3


@pytest.mark.parametrize(
    ("rf", "msg"),
    [
        (4, "Replication factor: 4 larger than available brokers: 3."),
        (0, "Replication factor must be larger than 0."),
        (-1, "Replication factor must be larger than 0."),
    ],
)
def test_replication_factor_refused(rf: int, msg: str) -> None:
    with pytest.raises(InvalidReplicationFactor) as info:
        assign_replicas([1, 2, 3], 1, rf, start_index=0, next_replica_shift=0)
    assert str(info.value) == msg


def test_no_partitions_refused() -> None:
    with pytest.raises(InvalidPartitions):
        assign_replicas([1, 2, 3], 0, 1, start_index=0, next_replica_shift=0)


def test_manual_assignment_accepted() -> None:
    validate_manual_assignment([[1, 2], [2, 3]], {1, 2, 3})
    validate_manual_assignment([[3, 1]], {1, 2, 3}, replication_factor=2)


@pytest.mark.parametrize(
    ("assignment", "rf", "match"),
    [
        ([[1, 1]], None, "broker 1 more than once"),
        ([[1, 9]], None, "broker 9, but no such broker is registered"),
        ([[1, 2], [1]], None, "partition with 1 replica"),
        ([[1, 2]], 3, "which have 3 replica"),
        ([[]], None, "empty replica list"),
    ],
)
def test_manual_assignment_refused(assignment: list[list[int]], rf: int | None, match: str) -> None:
    with pytest.raises(InvalidReplicaAssignment, match=match):
        validate_manual_assignment(assignment, [1, 2, 3], rf)
