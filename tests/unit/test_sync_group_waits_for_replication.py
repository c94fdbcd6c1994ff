"""In a cluster, every member's SyncGroup answer waits until the assignment's record is
replicated, as Kafka answers the members only once the group's append is replicated.

The leader's SyncGroup writes the record and is held by the dispatcher until its own write
is replicated; the other members' requests are completed by it. Answered at once, a
failover before the followers have the record would leave those members with an assignment
(and generation) the new coordinator never saw."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.dispatcher import Pending, Reply
from oncelog.broker.handlers import CloseConnection
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import CLUSTERED, Broker, replica_state

OFFSETS = TopicPartition("__consumer_offsets", 0)
JOIN_V = 3
SYNC_V = 1
GROUP = "g"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(
        tmp_path,
        **CLUSTERED,
        **{"offsets.topic.num.partitions": "1", "group.initial.rebalance.delay.ms": "0"},
    )
    broker.lead("__consumer_offsets", internal=True)
    broker.groups.on_leadership(OFFSETS, True)
    try:
        yield broker
    finally:
        broker.close()


def _join(broker: Broker, member_id: str) -> Any:
    outcome, _ = broker.dispatch(
        ApiKey.JOIN_GROUP,
        JOIN_V,
        {
            "group_id": GROUP,
            "session_timeout": timedelta(seconds=30),
            "rebalance_timeout": timedelta(seconds=30),
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}],
        },
    )
    return outcome


def _sync(broker: Broker, generation: int, member_id: str, assignments: dict[str, bytes]) -> Any:
    outcome, _ = broker.dispatch(
        ApiKey.SYNC_GROUP,
        SYNC_V,
        {
            "group_id": GROUP,
            "generation_id": generation,
            "member_id": member_id,
            "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()],
        },
    )
    return outcome


def _two_members(broker: Broker) -> tuple[int, str, str]:
    """Generation, leader and follower of a group of two that has completed its join."""
    first = _join(broker, "")
    assert isinstance(first, Reply)
    a = broker.decode(ApiKey.JOIN_GROUP, JOIN_V, first.data).member_id
    waiting_b = _join(broker, "")  # a rebalance: B waits for A to join again
    assert isinstance(waiting_b, Pending)
    rejoin = _join(broker, a)
    assert isinstance(rejoin, Reply)
    joined = broker.decode(ApiKey.JOIN_GROUP, JOIN_V, rejoin.data)
    assert joined.leader == a
    b = next(m.member_id for m in joined.members if m.member_id != a)
    return joined.generation_id, a, b


def _offsets_behind(broker: Broker) -> bool:
    log = broker.replicas.partition(OFFSETS)
    return log.high_watermark < log.log_end_offset


def test_a_waiting_member_gets_its_assignment_once_it_is_replicated(broker: Broker) -> None:
    generation, leader, other = _two_members(broker)
    waiting = _sync(broker, generation, other, {})
    assert isinstance(waiting, Pending)

    led = _sync(broker, generation, leader, {leader: b"A", other: b"B"})
    assert isinstance(led, Pending)  # the dispatcher holds the leader's own write
    assert _offsets_behind(broker)
    # The assignment is there, but only on the leader: the member keeps waiting.
    assert waiting.delayed.try_complete(False) is None

    # The followers leave the ISR: the leader alone commits everything; both are answered.
    broker.replicas.apply_partition_state(OFFSETS, replica_state((1,), 1))
    assert not _offsets_behind(broker)
    answer = waiting.delayed.try_complete(False)
    assert answer is not None
    reply = broker.decode(ApiKey.SYNC_GROUP, SYNC_V, waiting.finish(answer))
    assert (reply.error_code, reply.assignment) == (0, b"B")
    assert broker.finish(ApiKey.SYNC_GROUP, SYNC_V, led).assignment == b"A"


def test_a_member_asking_after_the_leader_waits_too(broker: Broker) -> None:
    generation, leader, other = _two_members(broker)
    led = _sync(broker, generation, leader, {leader: b"A", other: b"B"})
    assert isinstance(led, Pending)
    late = _sync(broker, generation, other, {})  # filled already, by an unreplicated record
    assert isinstance(late, Pending)
    broker.replicas.apply_partition_state(OFFSETS, replica_state((1,), 1))
    assert broker.finish(ApiKey.SYNC_GROUP, SYNC_V, late).assignment == b"B"


def test_a_leadership_move_before_replication_closes_the_waiting_member(broker: Broker) -> None:
    generation, leader, other = _two_members(broker)
    waiting = _sync(broker, generation, other, {})
    assert isinstance(waiting, Pending)
    assert isinstance(_sync(broker, generation, leader, {leader: b"A", other: b"B"}), Pending)
    assert waiting.delayed.try_complete(False) is None
    # A new leader epoch of the offsets partition (this broker still leads, in a new term):
    # the record may not survive; the member is disconnected and finds the coordinator again.
    broker.replicas.apply_partition_state(OFFSETS, replica_state((1, 2, 3), 1, leader_epoch=1))
    assert isinstance(waiting.delayed.try_complete(False), CloseConnection)
