"""Producer state outlives the data that retention deletes, restarts included."""

from __future__ import annotations

from pathlib import Path

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from oncelog.storage.partition_log import PartitionLog, ProducerSettings
from tests.storage.util import T0, TP, validated


def idempotent(seq: int, ts: int) -> bytes:
    return build_batch(
        base_offset=0,
        records=encode_record(offset_delta=0, key=None, value=b"x" * 200),
        record_count=1,
        last_offset_delta=0,
        base_timestamp=ts,
        max_timestamp=ts,
        producer_id=42,
        producer_epoch=0,
        base_sequence=seq,
    )


def test_duplicate_detected_after_retention_deleted_the_batch(tmp_path: Path) -> None:
    clock = ManualClock(wall_ms=T0)
    config = LogConfig(segment_bytes=300, retention_ms=1000)
    plog = PartitionLog.load(tmp_path / "t-0", TP, config, clock, clean=True)
    for seq in range(3):
        plog.append(validated(idempotent(seq, T0)), 0)
    plog.roll()
    clock.advance(5000)
    assert plog.apply_retention() == 3
    assert plog.log_start_offset == plog.log_end_offset == 3
    plog.close()
    plog = PartitionLog.load(tmp_path / "t-0", TP, config, clock, clean=True, log_start_offset=3)
    retry = plog.append(validated(idempotent(2, T0)), 0)
    assert retry.duplicate and retry.base_offset == 2
    assert plog.log_end_offset == 3


def test_a_closed_log_gives_its_producers_tracker_slots_back(tmp_path: Path) -> None:
    """A reopened log (after a failed cleaner swap, say) holds its producers once."""
    clock = ManualClock(wall_ms=T0)
    producers = ProducerSettings(tracker=ProducerTracker())
    plog = PartitionLog.load(
        tmp_path / "t-0", TP, LogConfig(), clock, clean=True, producers=producers
    )
    plog.append(validated(idempotent(0, T0)), 0)
    assert len(producers.tracker) == 1
    plog.close()
    assert len(producers.tracker) == 0
    plog = PartitionLog.load(
        tmp_path / "t-0", TP, LogConfig(), clock, clean=True, producers=producers
    )
    assert len(producers.tracker) == 1  # from the snapshot close took
    with_retry = plog.append(validated(idempotent(0, T0)), 0)
    assert with_retry.base_offset == 0  # still known: the retry is a duplicate
    plog.close()
