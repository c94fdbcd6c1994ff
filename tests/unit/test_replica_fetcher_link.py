"""The replica fetcher's per-leader state (`_Link`): a round looks again only at partitions
that something moved, plus every partition once per sweep, and never loses one."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.broker.partition import ReplicaView
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.replication.follower import FollowerPhase
from oncelog.server.replica_fetcher import SWEEP_MS, _Link
from oncelog.storage.log_info import AppendOrigin
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import batch, clustered_replicas

TPS = [TopicPartition("data", p) for p in range(4)]
LEADER = 1


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    with clustered_replicas(tmp_path, 2) as replicas:
        replicas.apply_topic("data", uuid.uuid4(), ((1, 2, 3),) * len(TPS), {}, False)
        for tp in TPS:
            view = ReplicaView(LEADER, 0, (1, 2, 3), 0, (1, 2, 3), 1)
            replicas.apply_partition_state(tp, view)
            follower = replicas.replicas_by_tp[tp].follower
            assert follower is not None
            follower.move(FollowerPhase.FETCHING)
        yield replicas


def linked(replicas: ReplicaManager) -> _Link:
    link = _Link(1 << 20)
    link.following.update(TPS)
    link.dirty.update(TPS)
    return link


def take_changed(link: _Link) -> set[TopicPartition]:
    changed, link.changed = link.changed, set()
    return changed


def test_a_quiet_round_looks_at_nothing(replicas: ReplicaManager) -> None:
    link = linked(replicas)
    assert link.refresh(replicas.replicas_by_tp, LEADER, 0) == []
    assert set(link.fetching) == set(TPS) and take_changed(link) == set(TPS)
    assert link.positions[TPS[0]] == (0, 0, 0)
    assert link.refresh(replicas.replicas_by_tp, LEADER, 100) == []
    assert take_changed(link) == set()


def test_a_moved_partition_is_seen_when_marked_or_at_the_sweep(replicas: ReplicaManager) -> None:
    link = linked(replicas)
    link.refresh(replicas.replicas_by_tp, LEADER, 0)
    take_changed(link)
    for tp in TPS[:2]:
        data = bytearray(batch([b"v"]))
        replicas.partition(tp).append(bytes(data), origin=AppendOrigin.REPLICATION)
    link.dirty.add(TPS[0])  # what an answer that carried it does
    link.refresh(replicas.replicas_by_tp, LEADER, 500)
    assert take_changed(link) == {TPS[0]} and link.positions[TPS[0]] == (0, 1, 0)
    assert link.positions[TPS[1]] == (0, 0, 0)  # not marked: not looked at yet
    link.refresh(replicas.replicas_by_tp, LEADER, SWEEP_MS)
    assert take_changed(link) == {TPS[1]} and link.positions[TPS[1]] == (0, 1, 0)


def test_partitions_that_leave_or_truncate_are_dropped_and_handed_back(
    replicas: ReplicaManager,
) -> None:
    link = linked(replicas)
    link.refresh(replicas.replicas_by_tp, LEADER, 0)
    take_changed(link)
    # A newer state with another leader: the fetcher's `unfollow` marks it.
    replicas.apply_partition_state(TPS[1], ReplicaView(3, 1, (1, 2, 3), 1, (1, 2, 3), 2))
    link.following.discard(TPS[1])
    link.dirty.add(TPS[1])
    # A newer epoch of the same leader: truncate first (`follow` marks it).
    replicas.apply_partition_state(TPS[2], ReplicaView(LEADER, 1, (1, 2, 3), 1, (1, 2, 3), 2))
    link.dirty.add(TPS[2])
    truncating = link.refresh(replicas.replicas_by_tp, LEADER, 200)
    assert [r.tp for r in truncating] == [TPS[2]]
    assert set(link.fetching) == {TPS[0], TPS[3]} and take_changed(link) == {TPS[1], TPS[2]}
    assert TPS[1] not in link.following and TPS[2] in link.following
