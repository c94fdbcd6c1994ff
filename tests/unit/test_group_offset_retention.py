"""offsets.retention.minutes (KIP-211): which committed offsets expire, and when."""

from __future__ import annotations

from oncelog.coordinator.group.records import GroupKey, OffsetKey, OffsetValue
from oncelog.coordinator.group.state import GroupState
from oncelog.types import TopicPartition
from tests.unit.test_group_coordinator import TP, G, Harness, form_group
from tests.unit.test_group_txn_offsets import marker, txn_commit

RETENTION = 60_000
TP1 = TopicPartition("t", 1)


def commit(h: Harness, offsets: dict[TopicPartition, int], group: str = G, **kw: object) -> None:
    now = h.clock.wall_ms()
    values = {tp: OffsetValue(o, commit_timestamp=now) for tp, o in offsets.items()}
    gen, member = kw.get("generation", -1), kw.get("member", "")
    h.run(h.coordinator.commit_offsets(group, gen, member, None, values))  # type: ignore[arg-type]


def expire(h: Harness) -> list[object]:
    records = h.coordinator.expire_offsets(h.clock.wall_ms(), RETENTION)
    for r in records:
        h.coordinator.replay(r)
    return [r.key for r in records]


def committed(h: Harness, group: str = G) -> set[TopicPartition]:
    group_ = h.coordinator.groups.get(group)
    return set(group_.offsets) if group_ is not None else set()


def test_a_group_without_protocol_expires_each_offset_from_its_commit() -> None:
    h = Harness()
    commit(h, {TP: 1})
    h.clock.advance(40_000)
    commit(h, {TP1: 2})
    h.clock.advance(30_000)  # TP committed 70 s ago, TP1 30 s ago
    assert expire(h) == [OffsetKey(G, "t", 0)]
    assert committed(h) == {TP1}
    h.clock.advance(30_000)
    assert expire(h) == [OffsetKey(G, "t", 1), GroupKey(G)]
    assert G not in h.coordinator.groups


def test_an_active_consumer_group_keeps_its_offsets() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    gen = h.group.generation
    commit(h, {TP: 5}, generation=gen, member=a)
    h.clock.advance(10 * RETENTION)
    h.coordinator.heartbeat(G, gen, a, None)
    h.coordinator.heartbeat(G, gen, b, None)
    assert h.group.state is GroupState.STABLE
    assert expire(h) == []
    assert committed(h) == {TP}


def test_an_empty_consumer_group_counts_from_when_it_became_empty() -> None:
    h = Harness()
    (a,) = form_group(h, 1)
    commit(h, {TP: 5}, generation=h.group.generation, member=a)
    h.clock.advance(2 * RETENTION)  # old commit, but the group is still active
    h.run(h.coordinator.leave(G, [(a, None)]))
    assert h.group.state is GroupState.EMPTY
    h.clock.advance(RETENTION - 1)
    assert expire(h) == []
    h.clock.advance(1)
    assert expire(h) == [OffsetKey(G, "t", 0), GroupKey(G)]
    assert G not in h.coordinator.groups


def test_pending_transactional_offsets_hold_the_group() -> None:
    h = Harness()
    commit(h, {TP: 1})
    txn_commit(h, {TP1: 9})
    h.clock.advance(2 * RETENTION)
    assert expire(h) == []  # a transaction still decides TP1: nothing of the group goes
    marker(h, commit=True)
    assert committed(h) == {TP, TP1}
    assert OffsetKey(G, "t", 0) in expire(h)
