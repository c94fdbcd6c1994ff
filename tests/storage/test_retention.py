"""Retention by time and size (whole segments only) and DeleteRecords."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.errors import OffsetOutOfRange
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from oncelog.storage.partition_log import PartitionLog
from tests.storage.util import (
    T0,
    append,
    batch_offsets,
    make_batch,
    open_log,
    read_all,
    segment_files,
    validated,
)

BATCH = len(make_batch([b"x" * 10]))


def _log_with_segments(
    root: Path, clock: ManualClock, stamps: list[list[int]], **config: int
) -> PartitionLog:
    """One segment per inner list, one single-record batch per timestamp in it."""
    plog = open_log(root, LogConfig(**config), clock)
    for i, segment_stamps in enumerate(stamps):
        if i:
            plog.roll()
        for ts in segment_stamps:
            append(plog, [b"x" * 10], timestamp=ts)
    return plog


def _bases(plog: PartitionLog) -> list[int]:
    return [s.base_offset for s in plog.segments]


def _log_names(plog: PartitionLog) -> list[str]:
    return [n for n in segment_files(plog.directory) if n.endswith(".log")]


# -- retention.ms ---------------------------------------------------------------------------


def test_time_retention_deletes_old_segments_by_batch_timestamps(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    stamps = [[T0, T0 + 100], [T0 + 500, T0 + 600], [T0 + 1000]]
    plog = _log_with_segments(tmp_path, clock, stamps, retention_ms=1000)
    assert _bases(plog) == [0, 2, 4]

    clock.advance(1100)  # now - 100 == 1000: not more than retention.ms
    assert plog.apply_retention() == 0
    clock.advance(1)  # segment 0's largest timestamp is now 1001 ms old
    assert plog.apply_retention() == 1
    assert _bases(plog) == [2, 4]
    assert plog.log_start_offset == 2
    assert _log_names(plog) == ["00000000000000000002.log", "00000000000000000004.log"]
    assert not (plog.directory / "00000000000000000000.index").exists()
    assert not (plog.directory / "00000000000000000000.timeindex").exists()

    clock.advance(499)  # segment 2 (max T0+600) is 1000 ms old: kept
    assert plog.apply_retention() == 0
    clock.advance(1)
    assert plog.apply_retention() == 1
    assert plog.log_start_offset == 4
    assert batch_offsets(read_all(plog)) == [(4, 4)]
    for offset in (0, 1, 3):
        with pytest.raises(OffsetOutOfRange):
            plog.read(offset, 1 << 20)
    plog.close()


def test_time_retention_uses_the_largest_timestamp_not_the_first(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 10_000)
    plog = _log_with_segments(tmp_path, clock, [[T0, T0 + 9_500], [T0 + 9_999]], retention_ms=1000)
    assert plog.apply_retention() == 0  # the first batch is old, the segment's max is not
    plog.close()


def test_time_retention_rolls_and_deletes_an_expired_active_segment(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = _log_with_segments(tmp_path, clock, [[T0], [T0, T0]], retention_ms=1000)
    clock.advance(1001)
    assert plog.apply_retention() == 2
    # everything expired: a new empty active segment starts at the log end
    assert _bases(plog) == [3]
    assert (plog.log_start_offset, plog.log_end_offset) == (3, 3)
    assert _log_names(plog) == ["00000000000000000003.log"]
    assert plog.read(3, 1 << 20).records == b""
    with pytest.raises(OffsetOutOfRange):
        plog.read(2, 1 << 20)
    with pytest.raises(OffsetOutOfRange):
        plog.read(4, 1 << 20)
    assert append(plog, [b"new"], timestamp=clock.wall_ms()).base_offset == 3
    assert plog.apply_retention() == 0  # a fresh batch does not expire
    clock.advance(10_000)
    assert plog.apply_retention() == 1  # and an empty active segment is never "deleted"
    assert plog.apply_retention() == 0
    assert (plog.log_start_offset, plog.log_end_offset, _bases(plog)) == (4, 4, [4])
    plog.close()


def test_time_retention_stops_at_the_first_unexpired_segment(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    # segment 1 carries a timestamp in the future; segment 2 behind it is old but stays
    plog = _log_with_segments(
        tmp_path, clock, [[T0], [T0 + 1_000_000], [T0], [T0]], retention_ms=1000
    )
    clock.advance(2000)
    assert plog.apply_retention() == 1
    assert _bases(plog) == [1, 2, 3]
    plog.close()


def test_time_retention_disabled_with_minus_one(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = _log_with_segments(tmp_path, clock, [[T0], [T0]], retention_ms=-1)
    clock.advance(10**12)
    assert plog.apply_retention() == 0
    assert _bases(plog) == [0, 1]
    plog.close()


def test_time_retention_without_timestamps_uses_the_file_mtime(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(retention_ms=1000), clock)
    record = encode_record(offset_delta=0, key=None, value=b"v")
    no_ts = build_batch(
        base_offset=0,
        records=record,
        record_count=1,
        last_offset_delta=0,
        base_timestamp=-1,
        max_timestamp=-1,
    )
    plog.append(validated(no_ts), 0)
    plog.roll()
    append(plog, [b"x"], timestamp=T0)
    assert plog.segments[0].max_timestamp == -1
    mtime = (T0 - 5000) / 1000
    os.utime(plog.segments[0].log_path, (mtime, mtime))
    assert plog.apply_retention() == 1
    assert _bases(plog) == [1]
    plog.close()


# -- retention.bytes ------------------------------------------------------------------------


def test_size_retention_deletes_oldest_whole_segments(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_bytes=2 * BATCH, retention_bytes=3 * BATCH), clock)
    for _ in range(7):
        append(plog, [b"x" * 10])
    assert [(s.base_offset, s.size) for s in plog.segments] == [
        (0, 2 * BATCH),
        (2, 2 * BATCH),
        (4, 2 * BATCH),
        (6, BATCH),
    ]
    # 7 batches: dropping segment 0 leaves 5 >= 3, dropping segment 2 leaves 3 >= 3, stop.
    assert plog.apply_retention() == 2
    assert _bases(plog) == [4, 6]
    assert plog.size_bytes == 3 * BATCH
    assert plog.log_start_offset == 4
    assert _log_names(plog) == ["00000000000000000004.log", "00000000000000000006.log"]
    with pytest.raises(OffsetOutOfRange):
        plog.read(3, 1 << 20)
    assert batch_offsets(plog.read(4, 1).records) == [(4, 4)]
    assert plog.apply_retention() == 0
    plog.close()


def test_size_retention_keeps_the_active_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=2 * BATCH, retention_bytes=0))
    for _ in range(5):
        append(plog, [b"x" * 10])
    assert plog.apply_retention() == 2
    assert [(s.base_offset, s.size) for s in plog.segments] == [(4, BATCH)]
    assert plog.log_start_offset == 4
    assert plog.apply_retention() == 0
    plog.close()


def test_size_retention_disabled_with_minus_one(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=BATCH, retention_bytes=-1))
    for _ in range(4):
        append(plog, [b"x" * 10])
    assert plog.apply_retention() == 0
    assert len(plog.segments) == 4
    plog.close()


def test_retention_survives_reload_via_log_start_offset(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2 * BATCH, retention_bytes=2 * BATCH)
    plog = open_log(tmp_path, config)
    for _ in range(6):
        append(plog, [b"x" * 10])
    plog.apply_retention()
    assert plog.log_start_offset == 4
    plog.close()
    plog = open_log(tmp_path, config)
    assert (plog.log_start_offset, plog.log_end_offset) == (4, 6)
    assert batch_offsets(read_all(plog)) == [(4, 4), (5, 5)]
    plog.close()


# -- DeleteRecords --------------------------------------------------------------------------


def test_delete_records_moves_the_start_and_deletes_whole_segments(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=2 * len(make_batch([b"a", b"b"]))))
    for _ in range(5):
        append(plog, [b"a", b"b"])  # batches [0,1] [2,3] | [4,5] [6,7] | [8,9]
    assert _bases(plog) == [0, 4, 8]

    assert plog.delete_records_before(3) == 3  # inside segment 0: nothing deleted
    assert _bases(plog) == [0, 4, 8]
    with pytest.raises(OffsetOutOfRange):
        plog.read(2, 1 << 20)
    # the batch holding offset 3 is returned whole; consumers skip the records below
    assert batch_offsets(plog.read(3, 1 << 20).records) == [(2, 3)]

    assert plog.delete_records_before(5) == 5
    assert _bases(plog) == [4, 8]
    assert _log_names(plog) == ["00000000000000000004.log", "00000000000000000008.log"]
    assert plog.read(5, 1 << 20).log_start_offset == 5
    assert batch_offsets(read_all(plog)) == [(4, 5), (6, 7), (8, 9)]

    assert plog.delete_records_before(1) == 5  # never moves back
    assert plog.delete_records_before(5) == 5

    assert plog.delete_records_before(10) == 10  # the high watermark: all but the active
    assert _bases(plog) == [8]
    assert (plog.log_start_offset, plog.log_end_offset) == (10, 10)
    assert plog.read(10, 1 << 20).records == b""
    info = append(plog, [b"c"])
    assert (info.base_offset, info.log_start_offset) == (10, 10)
    plog.close()


def test_delete_records_beyond_the_high_watermark_fails(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"a", b"b"])
    with pytest.raises(OffsetOutOfRange):
        plog.delete_records_before(3)
    with pytest.raises(OffsetOutOfRange):
        plog.delete_records_before(-1)
    assert plog.log_start_offset == 0
    plog.close()


def test_delete_records_start_is_restored_on_load(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"a", b"b", b"c"])
    plog.delete_records_before(2)
    plog.close()
    plog = open_log(tmp_path, log_start_offset=2)
    assert plog.log_start_offset == 2
    with pytest.raises(OffsetOutOfRange):
        plog.read(1, 100)
    plog.close()
    # a checkpointed start beyond the end (data lost) is capped at the end
    plog = open_log(tmp_path, log_start_offset=99)
    assert (plog.log_start_offset, plog.log_end_offset) == (3, 3)
    plog.close()
