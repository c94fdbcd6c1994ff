"""The idempotence rules of producer_state, one by one."""

from __future__ import annotations

import pytest

from oncelog.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)


def header(pid: int, epoch: int, seq: int, count: int, offset: int, ts: int = 1000) -> BatchHeader:
    return BatchHeader(offset, 100, 0, 2, 0, 0, count - 1, ts, ts, pid, epoch, seq, count)


def append(mgr: ProducerStateManager, h: BatchHeader) -> None:
    info = mgr.prepare(h.producer_id)
    info.append(h)
    mgr.update(info)


def test_in_sequence_batches_are_accepted_and_duplicates_found() -> None:
    mgr = ProducerStateManager(TP)
    append(mgr, header(7, 0, 0, 3, 0))
    append(mgr, header(7, 0, 3, 2, 3))
    dup = mgr.find_duplicate(header(7, 0, 0, 3, 99))
    assert dup is not None and dup.first_offset == 0 and dup.last_offset == 2
    assert mgr.find_duplicate(header(7, 0, 3, 2, 99)) is not None
    assert mgr.find_duplicate(header(7, 1, 0, 3, 99)) is None


def test_only_the_last_five_batches_are_cached() -> None:
    mgr = ProducerStateManager(TP)
    for i in range(6):
        append(mgr, header(7, 0, i, 1, i))
    assert mgr.find_duplicate(header(7, 0, 0, 1, 0)) is None
    assert mgr.find_duplicate(header(7, 0, 1, 1, 0)) is not None
    # the evicted batch retried is out of order, never silently appended
    with pytest.raises(OutOfOrderSequenceNumber):
        mgr.prepare(7).validate(header(7, 0, 0, 1, 10))


def test_gap_is_out_of_order() -> None:
    mgr = ProducerStateManager(TP)
    append(mgr, header(7, 0, 0, 2, 0))
    with pytest.raises(OutOfOrderSequenceNumber, match="expected sequence 2, got 5"):
        mgr.prepare(7).validate(header(7, 0, 5, 1, 2))


def test_stale_epoch_is_fenced() -> None:
    mgr = ProducerStateManager(TP)
    append(mgr, header(7, 3, 0, 1, 0))
    with pytest.raises(InvalidProducerEpoch):
        mgr.prepare(7).validate(header(7, 2, 1, 1, 1))


def test_new_epoch_must_start_at_zero() -> None:
    mgr = ProducerStateManager(TP)
    append(mgr, header(7, 0, 0, 5, 0))
    with pytest.raises(OutOfOrderSequenceNumber):
        mgr.prepare(7).validate(header(7, 1, 5, 1, 5))
    append(mgr, header(7, 1, 0, 1, 5))
    assert mgr.entry(7) is not None and mgr.entry(7).producer_epoch == 1  # type: ignore[union-attr]


def test_unknown_producer_is_accepted_at_any_sequence() -> None:
    mgr = ProducerStateManager(TP)
    append(mgr, header(9, 4, 1234, 1, 0))
    assert mgr.entry(9) is not None


def test_sequence_wraps_at_int32() -> None:
    mgr = ProducerStateManager(TP)
    append(mgr, header(7, 0, 2**31 - 2, 2, 0))
    assert mgr.entry(7).last_seq == 2**31 - 1  # type: ignore[union-attr]
    append(mgr, header(7, 0, 0, 1, 2))
    with pytest.raises(OutOfOrderSequenceNumber):
        mgr.prepare(7).validate(header(7, 0, 5, 1, 3))


def test_staged_state_is_not_applied_without_update() -> None:
    mgr = ProducerStateManager(TP)
    info = mgr.prepare(7)
    info.append(header(7, 0, 0, 1, 0))
    assert mgr.entry(7) is None


def test_replay_rebuilds_and_expiry_drops() -> None:
    mgr = ProducerStateManager(TP, expiration_ms=1000)
    mgr.replay([header(1, 0, 0, 1, 0, ts=100), header(2, 0, 0, 1, 1, ts=5000)])
    assert set(mgr.producers) == {1, 2} and mgr.map_end_offset == 2
    assert mgr.remove_expired(now_ms=1500) == 1
    assert set(mgr.producers) == {2}


def test_tracker_evicts_the_least_recently_used_producer() -> None:
    from oncelog.producer_state.tracker import ProducerTracker

    tracker = ProducerTracker(max_entries=2)
    a = ProducerStateManager(TopicPartition("t", 0), tracker=tracker)
    b = ProducerStateManager(TopicPartition("t", 1), tracker=tracker)
    append(a, header(1, 0, 0, 1, 0))
    append(b, header(2, 0, 0, 1, 0))
    append(a, header(1, 0, 1, 1, 1))  # producer 1 is now the most recent
    append(b, header(3, 0, 0, 1, 1))
    assert set(a.producers) == {1} and set(b.producers) == {3}
    assert tracker.evicted == 1 and len(tracker) == 2
    a.remove_expired(now_ms=10**12)
    assert len(tracker) == 1
