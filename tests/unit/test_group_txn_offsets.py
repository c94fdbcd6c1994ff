"""TxnOffsetCommit in the group coordinator: offsets staged per producer, decided by markers,
KIP-447 member fencing, and replay of transactional batches plus control batches."""

from __future__ import annotations

from typing import Any

from oncelog.coordinator.group import GroupCoordinator, GroupSettings
from oncelog.coordinator.group.records import (
    GroupRecord,
    OffsetValue,
    TxnEnd,
    decode_entries,
    encode_batch,
)
from oncelog.errors import ErrorCode as E
from oncelog.protocol.records.control import build_marker
from oncelog.types import TopicPartition
from tests.unit.test_group_coordinator import TP, G, Harness, form_group

TP1 = TopicPartition("t", 1)
PID, EPOCH = 7, 3


def txn_commit(h: Harness, offsets: dict[TopicPartition, int], **kw: Any) -> Any:
    return h.run(
        h.coordinator.commit_txn_offsets(
            kw.get("group", G),
            kw.get("pid", PID),
            EPOCH,
            kw.get("generation", -1),
            kw.get("member", ""),
            kw.get("instance"),
            {tp: OffsetValue(o) for tp, o in offsets.items()},
        )
    )


def marker(h: Harness, commit: bool, pid: int = PID, group: str = G) -> None:
    h.coordinator.complete_txn_offsets(pid, h.coordinator.partition_for(group), commit)


def committed(h: Harness, group: str = G) -> dict[TopicPartition, int]:
    return {tp: v.offset for tp, v in h.coordinator.fetch_offsets(group, None).items() if v}


def test_offsets_wait_for_the_commit_marker() -> None:
    h = Harness()
    assert txn_commit(h, {TP: 5, TP1: 9}) == {TP: E.none, TP1: E.none}
    assert all(r.producer_id == PID and r.producer_epoch == EPOCH for r in h.log)
    assert committed(h) == {}
    assert h.coordinator.unstable_partitions(G) == {TP, TP1}
    marker(h, commit=True, pid=PID + 1)  # another producer's marker changes nothing
    assert committed(h) == {}
    marker(h, commit=True)
    assert committed(h) == {TP: 5, TP1: 9}
    assert h.coordinator.unstable_partitions(G) == set()


def test_abort_marker_drops_them() -> None:
    h = Harness()
    h.run(h.coordinator.commit_offsets(G, -1, "", None, {TP: OffsetValue(2)}))
    txn_commit(h, {TP: 5})
    marker(h, commit=False)
    assert committed(h) == {TP: 2}
    assert h.coordinator.unstable_partitions(G) == set()


def test_a_later_plain_commit_wins_over_an_earlier_transactional_one() -> None:
    h = Harness()
    txn_commit(h, {TP: 5, TP1: 6})
    h.run(h.coordinator.commit_offsets(G, -1, "", None, {TP: OffsetValue(8)}))
    marker(h, commit=True)
    assert committed(h) == {TP: 8, TP1: 6}


def test_members_are_fenced_by_generation_member_and_instance() -> None:
    h = Harness()
    a, b = form_group(h, 2)
    gen = h.group.generation
    assert txn_commit(h, {TP: 1}, generation=gen - 1, member=a) == {TP: E.illegal_generation}
    assert txn_commit(h, {TP: 1}, generation=gen, member="ghost") == {TP: E.unknown_member_id}
    assert txn_commit(h, {TP: 1}, generation=gen, member=a) == {TP: E.none}
    assert txn_commit(h, {TP: 1}, generation=-1, member="") == {TP: E.none}  # no group mgmt
    h.coordinator.groups[G].static_members["inst"] = b
    assert txn_commit(h, {TP: 1}, generation=gen, member=a, instance="inst") == {
        TP: E.fenced_instance_id
    }
    # A group that does not exist yet is created by the transaction's offsets.
    assert txn_commit(h, {TP: 4}, group="fresh") == {TP: E.none}
    assert txn_commit(h, {TP: 4}, group="fresh2", generation=3) == {TP: E.illegal_generation}
    marker(h, commit=True, group="fresh")
    assert committed(h, "fresh") == {TP: 4}


def test_metadata_too_large_is_refused_per_partition() -> None:
    h = Harness()
    result = h.coordinator.commit_txn_offsets(
        G, PID, EPOCH, -1, "", None, {TP: OffsetValue(1, metadata="x" * 5000), TP1: OffsetValue(2)}
    )
    assert result.response == {TP: E.offset_metadata_too_large, TP1: E.none}
    assert len(result.records) == 1


def test_replay_of_batches_and_markers_rebuilds_the_offsets() -> None:
    """The log of one offsets partition: plain commit, a committed transaction, an aborted
    one, and one still open. Replaying it gives the committed offsets and keeps the open
    one pending until its marker."""
    h = Harness()
    plain = [GroupRecord(*_offset(TP, 1))]
    done = [GroupRecord(*_offset(TP, 10), producer_id=1, producer_epoch=0)]
    aborted = [GroupRecord(*_offset(TP1, 20), producer_id=2, producer_epoch=0)]
    still_open = [GroupRecord(*_offset(TP1, 30), producer_id=3, producer_epoch=0)]
    data = b"".join(
        [
            encode_batch(plain, 1),
            encode_batch(done, 1, 1, 0),
            encode_batch(aborted, 1, 2, 0),
            _marker(1, commit=True),
            _marker(2, commit=False),
            encode_batch(still_open, 1, 3, 0),
        ]
    )
    entries, _ = decode_entries(data)
    assert entries[-3:-1] == [TxnEnd(1, True), TxnEnd(2, False)]
    fresh = GroupCoordinator(GroupSettings(), h.clock)
    partition = fresh.partition_for(G)
    for entry in entries:
        if isinstance(entry, TxnEnd):
            fresh.complete_txn_offsets(entry.producer_id, partition, entry.commit)
        else:
            fresh.replay(entry)
    offsets = fresh.fetch_offsets(G, None)
    assert {tp: v.offset for tp, v in offsets.items() if v} == {TP: 10}
    assert fresh.unstable_partitions(G) == {TP1}
    fresh.complete_txn_offsets(3, partition, True)  # the coordinator's restart finishes it
    offsets = fresh.fetch_offsets(G, None)
    assert {tp: v.offset for tp, v in offsets.items() if v} == {TP: 10, TP1: 30}


def _offset(tp: TopicPartition, offset: int) -> tuple[Any, OffsetValue]:
    from oncelog.coordinator.group.records import OffsetKey

    return OffsetKey(G, tp.topic, tp.partition), OffsetValue(offset, -1, "", 1)


def _marker(pid: int, *, commit: bool) -> bytes:
    return build_marker(
        producer_id=pid, producer_epoch=0, commit=commit, coordinator_epoch=0, timestamp=1
    )
