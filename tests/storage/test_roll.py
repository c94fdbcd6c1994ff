"""Segment roll (by size, by time, on a full index) and the on-disk layout."""

from __future__ import annotations

import os
from pathlib import Path

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.protocol.records.speedups import speedups
from oncelog.storage.partition_log import PartitionLog
from oncelog.types import TopicPartition
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

BATCH = len(make_batch([b"x" * 10]))  # every test batch below has this size


def _names(*bases: int) -> list[str]:
    return sorted(f"{b:020d}{ext}" for b in bases for ext in (".log", ".index", ".timeindex"))


def test_batch_size_is_what_the_tests_assume() -> None:
    assert BATCH == 78


def test_new_log_layout(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert plog.directory == tmp_path / "t-0"
    assert segment_files(tmp_path / "t-0") == _names(0)
    assert (plog.log_start_offset, plog.log_end_offset) == (0, 0)
    plog.close()


def test_roll_by_size(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=3 * BATCH))
    infos = [append(plog, [b"x" * 10]) for _ in range(7)]
    assert [(i.base_offset, i.last_offset) for i in infos] == [(n, n) for n in range(7)]
    assert [s.base_offset for s in plog.segments] == [0, 3, 6]
    assert [s.size for s in plog.segments] == [3 * BATCH, 3 * BATCH, BATCH]
    assert [s.next_offset for s in plog.segments] == [3, 6, 7]
    assert segment_files(plog.directory) == _names(0, 3, 6)
    assert (plog.directory / "00000000000000000003.log").stat().st_size == 3 * BATCH
    assert batch_offsets(read_all(plog)) == [(n, n) for n in range(7)]
    plog.close()


def test_roll_by_size_counts_the_whole_append(tmp_path: Path) -> None:
    two = make_batch([b"x" * 10]) + make_batch([b"x" * 10])
    plog = open_log(tmp_path, LogConfig(segment_bytes=3 * BATCH))
    append(plog, [b"x" * 10])
    append(plog, [b"x" * 10])
    info = plog.append(validated(two, client=False), 0)  # 2 + 2 > 3: the pair rolls
    assert (info.base_offset, info.last_offset) == (2, 3)
    assert [(s.base_offset, s.next_offset) for s in plog.segments] == [(0, 2), (2, 4)]
    plog.close()


def test_batch_larger_than_segment_bytes_goes_into_an_empty_segment(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=BATCH // 2))
    append(plog, [b"x" * 10])
    append(plog, [b"x" * 10])
    assert [(s.base_offset, s.size) for s in plog.segments] == [(0, BATCH), (1, BATCH)]
    plog.close()


def test_roll_by_time_counts_batch_timestamps_not_the_clock(tmp_path: Path) -> None:
    """Kafka's rule: with timestamps in the batches, the time a segment waited to roll is the
    new batch's timestamp minus its first batch's, whatever the wall clock says."""
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    append(plog, [b"x" * 10], timestamp=T0)
    clock.advance(10_000)  # long past segment.ms on the clock
    append(plog, [b"x" * 10], timestamp=T0 + 1000)  # exactly segment.ms: not yet
    assert [s.base_offset for s in plog.segments] == [0]
    append(plog, [b"x" * 10], timestamp=T0 + 1001)
    assert [s.base_offset for s in plog.segments] == [0, 2]
    # the new segment's time starts at its first batch (timestamp T0 + 1001)
    append(plog, [b"x" * 10], timestamp=T0 + 2001)
    assert [s.base_offset for s in plog.segments] == [0, 2]
    append(plog, [b"x" * 10], timestamp=T0 + 2002)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert segment_files(plog.directory) == _names(0, 2, 4)
    plog.close()


def test_old_timestamps_do_not_roll_a_segment_per_append(tmp_path: Path) -> None:
    """Records stamped long ago (a replay of history, a mirrored topic) stay in one segment:
    comparing them to the wall clock would roll, and open three files, at every append."""
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    old = T0 - 30 * 24 * 3_600_000
    for i in range(20):
        append(plog, [b"x" * 10], timestamp=old + i)
    assert [s.base_offset for s in plog.segments] == [0]
    plog.close()


def test_roll_by_time_with_batch_timestamps(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    append(plog, [b"x" * 10], timestamp=T0)
    append(plog, [b"x" * 10], timestamp=T0 + 1000)
    assert len(plog.segments) == 1
    append(plog, [b"x" * 10], timestamp=T0 + 1001)  # the clock has not moved
    assert [s.base_offset for s in plog.segments] == [0, 2]
    plog.close()


def test_empty_segment_never_rolls_by_time(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=10), clock)
    clock.advance(1_000_000)
    append(plog, [b"x" * 10], timestamp=T0)
    assert [s.base_offset for s in plog.segments] == [0]
    plog.close()


def test_roll_after_reload_uses_the_first_batch_timestamp(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    config = LogConfig(segment_ms=1000)
    plog = open_log(tmp_path, config, clock)
    append(plog, [b"x" * 10], timestamp=T0)
    append(plog, [b"x" * 10], timestamp=T0 + 900)
    plog.close()
    clock.advance(1001)
    plog = open_log(tmp_path, config, clock)
    assert plog.active.first_batch_timestamp == T0
    append(plog, [b"x" * 10], timestamp=clock.wall_ms())
    assert [s.base_offset for s in plog.segments] == [0, 2]
    plog.close()


def test_roll_when_the_index_is_full(tmp_path: Path) -> None:
    # index.interval.bytes=0 indexes every batch; 16 bytes hold two 8-byte entries.
    plog = open_log(tmp_path, LogConfig(segment_index_bytes=16, index_interval_bytes=0))
    for _ in range(5):
        append(plog, [b"x" * 10])
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert [s.index.entries for s in plog.segments] == [2, 2, 1]
    assert (plog.directory / "00000000000000000002.index").read_bytes() == (
        bytes.fromhex("00000000 00000000") + (1).to_bytes(4, "big") + BATCH.to_bytes(4, "big")
    )
    plog.close()


def test_explicit_roll_and_roll_of_empty_active(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert plog.roll() is plog.active  # nothing to roll
    append(plog, [b"a", b"b", b"c"])
    old = plog.roll()
    assert old.base_offset == 0
    assert [s.base_offset for s in plog.segments] == [0, 3]
    info = append(plog, [b"d"])
    assert (info.base_offset, info.last_offset) == (3, 3)
    assert segment_files(plog.directory) == _names(0, 3)
    plog.close()


def test_reload_keeps_segments_and_offsets(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=2 * BATCH)
    plog = open_log(tmp_path, config)
    for _ in range(5):
        append(plog, [b"x" * 10])
    before = read_all(plog)
    plog.close()
    plog = open_log(tmp_path, config)
    assert [s.base_offset for s in plog.segments] == [0, 2, 4]
    assert plog.log_end_offset == 5
    assert read_all(plog) == before
    assert append(plog, [b"y"]).base_offset == 5
    plog.close()


def test_partition_directory_name(tmp_path: Path) -> None:
    tp = TopicPartition("my.topic-x", 12)
    plog = PartitionLog.load(tmp_path / str(tp), tp, LogConfig(), ManualClock(T0), clean=True)
    assert plog.directory.name == "my.topic-x-12"
    plog.close()


def test_segment_without_timestamps_rolls_by_creation_time(tmp_path: Path) -> None:
    """Batches without timestamps (-1) still roll after segment.ms, counted from creation."""
    clock = ManualClock(wall_ms=T0)
    tp = TopicPartition("t", 0)
    plog = PartitionLog.load(tmp_path / "t-0", tp, LogConfig(segment_ms=1000), clock, clean=True)
    append(plog, [b"a"], timestamp=-1)
    clock.advance(500)
    append(plog, [b"b"], timestamp=-1)
    assert len(plog.segments) == 1
    clock.advance(600)
    append(plog, [b"c"], timestamp=-1)
    assert [s.base_offset for s in plog.segments] == [0, 2]


def _allocated(path: Path) -> int:
    return path.stat().st_blocks * 512


def test_large_writes_reserve_blocks_ahead_and_a_roll_gives_them_back(tmp_path: Path) -> None:
    """A segment written in large batches holds room for 16 more allocated past its end (sizes
    unchanged); the roll, a truncation and a close give what is left back."""
    big = [b"v" * 1000] * 40  # one 40 KB batch: above the 16 KiB that reserves
    plog = open_log(tmp_path, LogConfig(segment_bytes=10 * len(make_batch(big))))
    first = plog.directory / "00000000000000000000.log"
    append(plog, big)
    size = plog.active.size
    assert first.stat().st_size == size
    assert _allocated(first) >= 16 * size
    append(plog, [b"x" * 10])  # a small write does not
    while len(plog.segments) == 1:
        append(plog, big)
    rolled = plog.segments[0]
    assert _allocated(first) < rolled.size + 8192
    assert batch_offsets(read_all(plog))[-1][1] == plog.log_end_offset - 1

    active = plog.directory / f"{plog.active.base_offset:020d}.log"
    append(plog, big)
    assert _allocated(active) > 8 * plog.active.size
    plog.truncate_to(plog.active.base_offset + 40)
    assert _allocated(active) < plog.active.size + 8192
    append(plog, big)
    plog.close()
    assert _allocated(active) < active.stat().st_size + 8192


def test_a_reservation_left_by_a_crash_is_given_back_at_the_next_roll(tmp_path: Path) -> None:
    assert speedups is not None  # the C helper is built wherever the tests run
    config = LogConfig(segment_bytes=100 * BATCH)
    plog = open_log(tmp_path, config)
    append(plog, [b"x" * 10])
    plog.close(flush=False)
    first = plog.directory / "00000000000000000000.log"
    fd = os.open(first, os.O_RDWR)  # what a crash after a large write leaves
    assert speedups.reserve_blocks(fd, BATCH, 4 << 20)
    os.close(fd)
    assert first.stat().st_size == BATCH
    assert _allocated(first) >= 4 << 20
    plog = open_log(tmp_path, config)
    while len(plog.segments) == 1:
        append(plog, [b"x" * 10])
    assert _allocated(first) < 100 * BATCH + 8192
    assert batch_offsets(read_all(plog)) == [(n, n) for n in range(plog.log_end_offset)]
    plog.close()
