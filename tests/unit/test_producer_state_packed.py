"""Producer state stored as packed records behaves as the objects it replaced.

A reference model, the former representation (a dict of entries holding a deque of the last
five batches per partition, an OrderedDict keyed by (partition, producer id) for the LRU),
is driven by Hypothesis through the same batches, markers, expiries, clears and evictions
as the real managers sharing one tracker; after each step both must hold the same entries,
the same open transactions, the same LRU order and find the same duplicates.
"""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from oncelog.fileio import CorruptFileError
from oncelog.producer_state import snapshot
from oncelog.producer_state.entry import (
    RECORD_SIZE,
    BatchMetadata,
    ProducerStateEntry,
    producer_id_at,
)
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, BatchHeader
from oncelog.types import TopicPartition

PIDS = (0, 1, 2, 9, 1 + 2**20, 1 + 2**40, 2**63 - 1)
"""Some collide in the low bits the id map probes first."""
SEQS = st.sampled_from([-1, 0, 1, 2, 5, 2**31 - 2, 2**31 - 1])
TPS = (TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0))


def header(
    pid: int, epoch: int, seq: int, delta: int, offset: int, ts: int, txn: bool = False
) -> BatchHeader:
    attributes = TRANSACTIONAL_FLAG if txn else 0
    return BatchHeader(offset, 100, 0, 2, 0, attributes, delta, ts, ts, pid, epoch, seq, delta + 1)


@dataclass
class RefEntry:
    epoch: int = -1
    batches: deque[tuple[int, int, int, int, int]] = field(default_factory=lambda: deque(maxlen=5))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    txn_first: int = -1

    def update_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def copy(self) -> RefEntry:
        return RefEntry(
            self.epoch,
            deque(self.batches, maxlen=5),
            self.last_timestamp,
            self.coordinator_epoch,
            self.txn_first,
        )


class Reference:
    """The former dict / deque / OrderedDict representation, reduced to its state changes."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.evicted = 0
        self.lru: OrderedDict[tuple[TopicPartition, int], None] = OrderedDict()
        self.producers: dict[TopicPartition, dict[int, RefEntry]] = {tp: {} for tp in TPS}

    def update(self, tp: TopicPartition, pid: int, entry: RefEntry) -> None:
        self.producers[tp][pid] = entry
        key = (tp, pid)
        if key in self.lru:
            self.lru.move_to_end(key)
            return
        self.lru[key] = None
        attempts = len(self.lru)
        while len(self.lru) > self.max_entries and attempts > 0:
            attempts -= 1
            (vtp, vpid), _ = self.lru.popitem(last=False)
            if self.producers[vtp][vpid].txn_first >= 0:
                self.lru[(vtp, vpid)] = None
                continue
            del self.producers[vtp][vpid]
            self.evicted += 1

    def entry(self, tp: TopicPartition, pid: int) -> RefEntry:
        current = self.producers[tp].get(pid)
        return current.copy() if current is not None else RefEntry()

    def stage(self, tp: TopicPartition, h: BatchHeader) -> None:
        entry = self.entry(tp, h.producer_id)
        if h.is_transactional and entry.txn_first < 0:
            entry.txn_first = h.base_offset
        entry.update_epoch(h.producer_epoch)
        entry.batches.append(
            (h.base_sequence, h.last_sequence, h.last_offset, h.last_offset_delta, h.max_timestamp)
        )
        entry.last_timestamp = max(entry.last_timestamp, h.max_timestamp)
        self.update(tp, h.producer_id, entry)

    def marker(self, tp: TopicPartition, pid: int, epoch: int, coordinator_epoch: int) -> None:
        entry = self.entry(tp, pid)
        entry.update_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first = -1
        self.update(tp, pid, entry)

    def remove_expired(self, tp: TopicPartition, now: int, expiration: int) -> int:
        expired = [
            pid
            for pid, e in self.producers[tp].items()
            if now - e.last_timestamp >= expiration and e.txn_first < 0
        ]
        for pid in expired:
            del self.producers[tp][pid]
            self.lru.pop((tp, pid), None)
        return len(expired)

    def clear(self, tp: TopicPartition) -> None:
        for pid in self.producers[tp]:
            self.lru.pop((tp, pid), None)
        self.producers[tp].clear()


def lru_order(tracker: ProducerTracker, managers: dict[int, ProducerStateManager]) -> list:
    """(partition, producer id), least recently used first, read from the tracker's list."""
    order = []
    slot = tracker._next[0]
    while slot:
        owner = tracker._owners[tracker._owner[slot]]
        order.append((owner.tp, producer_id_at(tracker.records, slot * RECORD_SIZE)))  # type: ignore[union-attr]
        slot = tracker._next[slot]
    return order


class PackedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.offset = 0
        self.max_entries = 4
        self.tracker = ProducerTracker(self.max_entries)
        self.ref = Reference(self.max_entries)
        self.managers = {
            i: ProducerStateManager(tp, expiration_ms=1000, tracker=self.tracker)
            for i, tp in enumerate(TPS)
        }

    def next_offset(self, n: int) -> int:
        self.offset += n
        return self.offset - n

    @rule(
        part=st.integers(0, 2),
        pid=st.sampled_from(PIDS),
        epoch=st.integers(0, 2),
        seq=SEQS,
        delta=st.sampled_from([0, 1, 4, 2**31 - 1]),
        ts=st.integers(-5, 3000),
        txn=st.booleans(),
    )
    def batch(
        self, part: int, pid: int, epoch: int, seq: int, delta: int, ts: int, txn: bool
    ) -> None:
        mgr = self.managers[part]
        h = header(pid, epoch, seq, delta, self.next_offset(delta + 1), ts, txn)
        info = mgr.prepare(pid)
        info.stage(h)
        mgr.update(info)
        self.ref.stage(mgr.tp, h)

    @rule(
        part=st.integers(0, 2),
        pid=st.sampled_from(PIDS),
        epoch=st.integers(0, 2),
        coordinator_epoch=st.integers(-1, 3),
        commit=st.booleans(),
    )
    def marker(self, part: int, pid: int, epoch: int, coordinator_epoch: int, commit: bool) -> None:
        mgr = self.managers[part]
        info = mgr.prepare(pid)
        info.end_transaction(epoch, coordinator_epoch, commit, self.next_offset(1), check=False)
        mgr.update(info)
        self.ref.marker(mgr.tp, pid, epoch, coordinator_epoch)

    @rule(part=st.integers(0, 2), now=st.integers(0, 4000))
    def expire(self, part: int, now: int) -> None:
        mgr = self.managers[part]
        assert mgr.remove_expired(now) == self.ref.remove_expired(mgr.tp, now, 1000)

    @rule(part=st.integers(0, 2))
    def clear(self, part: int) -> None:
        mgr = self.managers[part]
        mgr.clear()
        self.ref.clear(mgr.tp)

    @rule(cap=st.integers(0, 6))
    def new_cap(self, cap: int) -> None:
        self.tracker.max_entries = self.ref.max_entries = cap

    @rule(
        part=st.integers(0, 2),
        pid=st.sampled_from(PIDS),
        epoch=st.integers(0, 2),
        seq=SEQS,
        delta=st.sampled_from([0, 1, 4, 2**31 - 1]),
    )
    def duplicate(self, part: int, pid: int, epoch: int, seq: int, delta: int) -> None:
        mgr = self.managers[part]
        h = header(pid, epoch, seq, delta, 0, 0)
        found = mgr.find_duplicate(h)
        ref = self.ref.producers[mgr.tp].get(pid)
        expected = None
        if ref is not None and ref.epoch == epoch:
            expected = next(
                (BatchMetadata(*b) for b in ref.batches if b[:2] == (seq, h.last_sequence)), None
            )
        assert found == expected
        entry = mgr.entry(pid)
        assert (entry.find_duplicate(epoch, seq, h.last_sequence) if entry else None) == expected

    @invariant()
    def same_state(self) -> None:
        for mgr in self.managers.values():
            ref = self.ref.producers[mgr.tp]
            got = {
                pid: (
                    e.producer_epoch,
                    [tuple(vars_of(b)) for b in e.batches],
                    e.last_timestamp,
                    e.coordinator_epoch,
                    e.current_txn_first_offset,
                )
                for pid, e in mgr.producers.items()
            }
            want = {
                pid: (e.epoch, list(e.batches), e.last_timestamp, e.coordinator_epoch, e.txn_first)
                for pid, e in ref.items()
            }
            assert got == want
            assert len(mgr) == len(ref)
            assert mgr.ongoing_transactions() == {
                pid: e.txn_first for pid, e in ref.items() if e.txn_first >= 0
            }
            for pid, e in ref.items():
                entry = mgr.entry(pid)
                assert entry is not None
                assert entry.last_seq == (e.batches[-1][1] if e.batches else -1)
                assert entry.last_offset == (e.batches[-1][2] if e.batches else -1)
                assert entry.is_empty == (not e.batches)
        assert len(self.tracker) == len(self.ref.lru)
        assert self.tracker.evicted == self.ref.evicted
        assert lru_order(self.tracker, self.managers) == list(self.ref.lru)


def vars_of(b: BatchMetadata) -> tuple[int, int, int, int, int]:
    return (b.first_seq, b.last_seq, b.last_offset, b.offset_delta, b.timestamp)


PackedMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_packed_state_matches_the_former_representation = PackedMachine.TestCase


def test_id_map_survives_growth_deletion_and_colliding_ids() -> None:
    mgr = ProducerStateManager(TopicPartition("t", 0))
    pids = [i << 20 for i in range(3000)] + list(range(1, 3001))
    for n, pid in enumerate(pids):
        info = mgr.prepare(pid)
        info.stage(header(pid, 0, 0, 0, n, ts=n))
        mgr.update(info)
    assert len(mgr) == len(mgr.tracker) == len(pids)
    assert mgr.remove_expired(now_ms=10_000) == 0
    mgr.expiration_ms = 1
    assert mgr.remove_expired(now_ms=3000) == 3000  # the first half, by timestamp
    assert set(mgr.producers) == set(pids[3000:])
    for pid in pids[3000:]:
        assert mgr.entry(pid) is not None and mgr.entry(pid).producer_id == pid  # type: ignore[union-attr]
    assert not any(pid in mgr.producers for pid in pids[:3000] if pid not in pids[3000:])
    slots_before = len(mgr.tracker._prev)
    for n, pid in enumerate(pids[:3000]):  # freed slots are reused
        info = mgr.prepare(pid)
        info.stage(header(pid, 0, 0, 0, n, ts=10**6))
        mgr.update(info)
    assert len(mgr.tracker._prev) == slots_before
    assert len(mgr) == len(mgr.tracker) == len(pids)


def test_a_partition_without_entries_is_not_held_by_the_tracker() -> None:
    tracker = ProducerTracker()
    mgr = ProducerStateManager(TopicPartition("t", 0), tracker=tracker)
    info = mgr.prepare(5)
    info.stage(header(5, 0, 0, 0, 0, 1))
    mgr.update(info)
    ref = weakref.ref(mgr)
    mgr.clear()
    del mgr, info
    gc.collect()
    assert ref() is None and len(tracker) == 0


def test_entries_are_copies_and_compare_by_content() -> None:
    mgr = ProducerStateManager(TopicPartition("t", 0))
    for seq in range(7):
        info = mgr.prepare(3)
        info.stage(header(3, 1, seq, 0, seq, 100 + seq))
        mgr.update(info)
    entry = mgr.entry(3)
    assert entry is not None
    assert [b.first_seq for b in entry.batches] == [2, 3, 4, 5, 6]
    rebuilt = ProducerStateEntry(3, 1, entry.batches, 106)
    assert rebuilt == entry and rebuilt.to_record() == entry.to_record()
    entry.update_epoch(2)
    assert entry != mgr.entry(3) and mgr.entry(3) == rebuilt
    assert list(mgr.frozen_entries()) == [rebuilt]


def test_a_snapshot_batch_whose_last_sequence_does_not_follow_is_corrupt(tmp_path: Path) -> None:
    good = ProducerStateEntry(1, 0, [BatchMetadata(0, 4, 4, 4, 1)], 1)
    data = bytearray(snapshot.encode(10, [good]))
    assert snapshot.decode(bytes(data))[1] == [good]
    with pytest.raises(ValueError):
        ProducerStateEntry(1, 0, [BatchMetadata(0, 5, 4, 4, 1)], 1)
    # the same file with last seq 5 instead of 4 (and a checksum that matches)
    from crc32c import crc32c

    payload = bytearray(data[10:])
    last_seq_at = 12 + 31 + 4
    payload[last_seq_at : last_seq_at + 4] = (5).to_bytes(4, "big")
    forged = data[:6] + crc32c(bytes(payload)).to_bytes(4, "big") + payload
    with pytest.raises(CorruptFileError):
        snapshot.decode(bytes(forged))


def test_duplicate_search_finds_the_oldest_match_and_only_whole_batches() -> None:
    mgr = ProducerStateManager(TopicPartition("t", 0))
    seq = 0x01020304
    # Replay applies without checks: the same sequence range twice, and batches whose
    # other fields hold the sequence's bytes (offset, timestamp, offset delta).
    for h in (
        header(7, 0, 5, 0, seq, ts=seq),
        header(7, 0, seq, 2, 100, ts=1),
        header(7, 0, 6, seq, seq << 8, ts=seq << 16),
        header(7, 0, seq, 2, 200, ts=2),
    ):
        mgr.replay([h])
    dup = mgr.find_duplicate(header(7, 0, seq, 2, 0, 0))
    assert dup is not None and dup.last_offset == 102
    assert mgr.find_duplicate(header(7, 0, seq, 3, 0, 0)) is None
    assert mgr.find_duplicate(header(7, 0, seq >> 8, 0, 0, 0)) is None
    entry = mgr.entry(7)
    assert entry is not None and entry.find_duplicate(0, seq, seq + 2) == dup
