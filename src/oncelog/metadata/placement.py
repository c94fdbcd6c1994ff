"""Where a new partition's replicas go: Kafka's rack-unaware assignment, and manual checks.

Kafka's `AdminUtils.assignReplicasToBrokers` (ZooKeeper mode): the brokers are sorted, the
first replica of partition p goes to broker `(start_index + p) % n`, so leaders go round
robin; each follower sits a shift after the first replica, and the shift grows by one every
n partitions so that the same broker sets do not repeat. Callers draw `start_index` and
`next_replica_shift` at random (Kafka does, so that topics do not all start on broker 0);
tests pass fixed values and get Kafka's exact outputs. Racks are not used yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from oncelog.errors import (
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidReplicationFactor,
)

Assignment = tuple[tuple[int, ...], ...]


def assign_replicas(
    brokers: Iterable[int],
    partitions: int,
    replication_factor: int,
    *,
    start_index: int,
    next_replica_shift: int,
    first_partition: int = 0,
) -> Assignment:
    """Replica lists of partitions `first_partition ..` (preferred leader first).

    `first_partition` > 0 is CreatePartitions: the round robin goes on from the partition
    ids already there, as Kafka's startPartitionId does.
    """
    ids = sorted(set(brokers))
    _check_counts(partitions, replication_factor, len(ids))
    n = len(ids)
    shift = next_replica_shift
    out: list[tuple[int, ...]] = []
    for p in range(first_partition, first_partition + partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (start_index + p) % n
        followers = (_follower_index(first, shift, j, n) for j in range(replication_factor - 1))
        out.append((ids[first], *(ids[i] for i in followers)))
    return tuple(out)


def _check_counts(partitions: int, replication_factor: int, brokers: int) -> None:
    if partitions <= 0:
        raise InvalidPartitions("Number of partitions must be larger than 0.")
    if replication_factor <= 0:
        raise InvalidReplicationFactor("Replication factor must be larger than 0.")
    if replication_factor > brokers:
        raise InvalidReplicationFactor(
            f"Replication factor: {replication_factor} larger than available brokers: {brokers}."
        )


def _follower_index(first: int, shift: int, j: int, n: int) -> int:
    """Kafka's replicaIndex: never `first` itself, and distinct for j < n - 1."""
    return (first + 1 + (shift + j) % (n - 1)) % n


def add_partitions_start_index(brokers: Iterable[int], partition0: Sequence[int]) -> int:
    """Where CreatePartitions resumes: Kafka takes the index of the first broker whose id is
    at least partition 0's preferred leader (0 if none), for start index and shift alike."""
    ids = sorted(set(brokers))
    return next((i for i, b in enumerate(ids) if b >= partition0[0]), 0)


def validate_manual_assignment(
    assignment: Sequence[Sequence[int]],
    live_brokers: Iterable[int],
    replication_factor: int | None = None,
) -> None:
    """Refuse a CreateTopics/CreatePartitions replica assignment Kafka would refuse.

    INVALID_REPLICA_ASSIGNMENT with Kafka's messages (ReplicationControlManager's).
    `replication_factor` is that of the partitions already there, else partition 0's.
    """
    live = set(live_brokers)
    expected = replication_factor
    for replicas in assignment:
        if not replicas:
            raise InvalidReplicaAssignment(
                "The manual partition assignment includes an empty replica list."
            )
        previous = None
        for broker in sorted(replicas):
            if broker not in live:
                raise InvalidReplicaAssignment(
                    f"The manual partition assignment includes broker {broker}, but no such "
                    "broker is registered."
                )
            if broker == previous:
                raise InvalidReplicaAssignment(
                    f"The manual partition assignment includes the broker {broker} more than once."
                )
            previous = broker
        expected = len(replicas) if expected is None else expected
        if len(replicas) != expected:
            raise InvalidReplicaAssignment(
                f"The manual partition assignment includes a partition with {len(replicas)} "
                "replica(s), but this is not consistent with previous partitions, which have "
                f"{expected} replica(s)."
            )
