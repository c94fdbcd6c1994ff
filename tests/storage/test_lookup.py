"""Lookups by offset (sparse index, segment boundaries) and by timestamp."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.errors import OffsetOutOfRange
from oncelog.protocol.records.batch import iter_batches
from oncelog.protocol.records.compression import Codec
from oncelog.storage.partition_log import PartitionLog
from tests.storage.util import (
    T0,
    append,
    batch_offsets,
    make_batch,
    open_log,
    read_all,
)

ALL_CODECS = [Codec.NONE, Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def _many_segments(root: Path, **config: int) -> tuple[PartitionLog, list[tuple[int, int]]]:
    """~60 batches of 1-4 records in segments of ~600 bytes, index entry every ~150 bytes."""
    rng = random.Random(7)
    plog = open_log(
        root, LogConfig(segment_bytes=600, index_interval_bytes=150, **config), ManualClock(T0)
    )
    spans = []
    for i in range(60):
        n = rng.randint(1, 4)
        info = append(plog, [bytes([i]) * rng.randint(1, 40) for _ in range(n)])
        spans.append((info.base_offset, info.last_offset))
    return plog, spans


def test_read_from_every_offset_returns_the_batch_holding_it(tmp_path: Path) -> None:
    plog, spans = _many_segments(tmp_path)
    assert len(plog.segments) > 5
    assert all(s.index.entries >= 2 for s in plog.segments[:-1])  # the index is sparse
    assert sum(s.index.entries for s in plog.segments) < len(spans)
    end = spans[-1][1] + 1
    assert plog.log_end_offset == end
    for offset in range(end):
        data = plog.read(offset, 1).records  # max_bytes 1: exactly the first batch
        span = next(s for s in spans if s[0] <= offset <= s[1])
        assert batch_offsets(data) == [span], offset
    plog.close()


def test_read_stops_at_segment_end_and_continues_in_the_next(tmp_path: Path) -> None:
    plog, spans = _many_segments(tmp_path)
    first, second = plog.segments[0], plog.segments[1]
    last_of_first = first.next_offset - 1
    data = plog.read(last_of_first, 1 << 20).records
    # a read serves one segment: it ends at the segment boundary
    assert batch_offsets(data)[-1][1] == last_of_first
    assert len(batch_offsets(data)) == 1
    data = plog.read(first.next_offset, 1 << 20).records
    assert batch_offsets(data)[0][0] == second.base_offset
    # reading the whole log fetch by fetch yields every batch once, in order
    assert batch_offsets(read_all(plog)) == spans
    assert batch_offsets(read_all(plog, max_bytes=1)) == spans
    plog.close()


def test_read_max_bytes_returns_whole_batches(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    sizes = [len(make_batch([b"x" * n])) for n in (10, 20, 30)]
    for n in (10, 20, 30):
        append(plog, [b"x" * n])
    assert batch_offsets(plog.read(0, sizes[0] + sizes[1] - 1).records) == [(0, 0)]
    assert batch_offsets(plog.read(0, sizes[0] + sizes[1]).records) == [(0, 0), (1, 1)]
    assert batch_offsets(plog.read(1, 1).records) == [(1, 1)]  # min_one
    assert plog.read(1, 1, min_one=False).records == b""
    assert plog.read(1, 0, min_one=False).records == b""
    assert len(plog.read(0, 1 << 20).records) == sum(sizes)
    plog.close()


def test_read_upper_bound_cuts_whole_batches(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    for _ in range(3):
        append(plog, [b"a", b"b"])
    assert batch_offsets(plog.read(0, 1 << 20, upper_bound=3).records) == [(0, 1), (2, 3)]
    assert batch_offsets(plog.read(0, 1 << 20, upper_bound=2).records) == [(0, 1)]
    assert plog.read(2, 1 << 20, upper_bound=2).records == b""
    plog.close()


def test_read_outside_the_log_is_out_of_range(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"a", b"b"])
    result = plog.read(2, 1 << 20)  # the log end: empty, not an error
    assert (result.records, result.high_watermark, result.log_end_offset) == (b"", 2, 2)
    with pytest.raises(OffsetOutOfRange):
        plog.read(3, 1 << 20)
    with pytest.raises(OffsetOutOfRange):
        plog.read(-1, 1 << 20)
    plog.close()


def test_read_returns_stored_bytes_with_assigned_offsets(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"a"])
    batch = make_batch([b"b", b"c"])
    append(plog, [b"b", b"c"])
    stored = plog.read(1, 1 << 20).records
    # only baseOffset and partitionLeaderEpoch differ from what the producer sent
    assert stored[:8] == (1).to_bytes(8, "big")
    assert stored[12:16] == (0).to_bytes(4, "big")
    assert stored[8:12] == batch[8:12] and stored[16:] == batch[16:]
    plog.close()


def test_lookups_after_reload_use_the_loaded_index(tmp_path: Path) -> None:
    plog, spans = _many_segments(tmp_path)
    before = read_all(plog)
    entries = [s.index.entries for s in plog.segments]
    plog.close()
    plog = open_log(tmp_path, LogConfig(segment_bytes=600, index_interval_bytes=150))
    assert [s.index.entries for s in plog.segments] == entries
    assert read_all(plog) == before
    for offset in (0, 17, 55, spans[-1][1]):
        span = next(s for s in spans if s[0] <= offset <= s[1])
        assert batch_offsets(plog.read(offset, 1).records) == [span]
    plog.close()


# -- by timestamp ---------------------------------------------------------------------------


@pytest.mark.parametrize("codec", ALL_CODECS, ids=lambda c: c.name)
def test_offset_for_timestamp_inside_a_batch(tmp_path: Path, codec: Codec) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"a", b"b"], timestamps=[T0 + 10, T0 + 20], codec=codec)  # 0-1
    # out-of-order timestamps inside one batch: 30, 50, 40, 60
    append(
        plog, [b"c", b"d", b"e", b"f"], timestamps=[T0 + 30, T0 + 50, T0 + 40, T0 + 60], codec=codec
    )
    append(plog, [b"g"], timestamp=T0 + 70, codec=codec)  # 6
    expected = {
        0: (0, T0 + 10),
        T0: (0, T0 + 10),
        T0 + 10: (0, T0 + 10),
        T0 + 11: (1, T0 + 20),
        T0 + 21: (2, T0 + 30),
        T0 + 35: (3, T0 + 50),  # the first record >= target, not the smallest timestamp
        T0 + 45: (3, T0 + 50),
        T0 + 50: (3, T0 + 50),
        T0 + 51: (5, T0 + 60),
        T0 + 61: (6, T0 + 70),
        T0 + 70: (6, T0 + 70),
    }
    for target, want in expected.items():
        assert plog.offset_for_timestamp(target) == want, target - T0
    assert plog.offset_for_timestamp(T0 + 71) is None
    plog.close()


def test_offset_for_timestamp_across_segments_and_a_sparse_index(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=1000, index_interval_bytes=200))
    stamps = [T0 + 10 * i for i in range(100)]
    for ts in stamps:
        append(plog, [b"v" * 5], timestamp=ts)
    assert len(plog.segments) > 5
    for i, ts in enumerate(stamps):
        assert plog.offset_for_timestamp(ts) == (i, ts)
        assert plog.offset_for_timestamp(ts - 5) == (i, ts)
    plog.close()


def test_offset_for_timestamp_finds_unindexed_batch_with_a_later_timestamp(
    tmp_path: Path,
) -> None:
    # Batch 1 is not indexed and carries the largest timestamp; batch 2 is indexed with a
    # smaller one. A time index holding per-batch maxima would skip batch 1.
    config = LogConfig(index_interval_bytes=100)
    plog = open_log(tmp_path, config)
    for ts in (T0 + 100, T0 + 500, T0 + 200, T0 + 200):
        append(plog, [b"a"], timestamp=ts)
    assert plog.active.index.entries == 2
    assert plog.offset_for_timestamp(T0 + 300) == (1, T0 + 500)
    assert plog.offset_for_timestamp(T0 + 150) == (1, T0 + 500)
    assert plog.offset_for_timestamp(T0 + 501) is None
    assert plog.max_timestamp_and_offset() == (T0 + 500, 1)
    plog.close()
    # and the same after a clean reload, which trusts the time index for the max timestamp
    plog = open_log(tmp_path, config)
    assert plog.active.max_timestamp == T0 + 500
    assert plog.offset_for_timestamp(T0 + 300) == (1, T0 + 500)
    assert plog.max_timestamp_and_offset() == (T0 + 500, 1)
    plog.close()


def test_offset_for_timestamp_respects_the_log_start(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"a", b"b", b"c"], timestamps=[T0 + 500, T0 + 100, T0 + 200])  # 0-2
    append(plog, [b"d"], timestamp=T0 + 400)  # 3
    plog.delete_records_before(1)
    assert plog.offset_for_timestamp(T0 + 150) == (2, T0 + 200)
    # offset 0 (ts 500) is below the start: the answer is in the next batch
    assert plog.offset_for_timestamp(T0 + 300) == (3, T0 + 400)
    assert plog.offset_for_timestamp(T0 + 450) is None
    assert plog.offset_for_timestamp(0) == (1, T0 + 100)
    plog.close()


def test_offset_for_timestamp_with_log_append_time(tmp_path: Path) -> None:
    clock = ManualClock(T0 + 1000)
    plog = open_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock)
    append(plog, [b"a", b"b"], timestamps=[T0, T0 + 5])
    clock.advance(10)
    append(plog, [b"c"], timestamp=T0)
    stored = plog.read(0, 1 << 20).records
    headers = [h for _, h in iter_batches(stored)]
    assert [h.max_timestamp for h in headers] == [T0 + 1000, T0 + 1010]
    assert all(h.log_append_time for h in headers)
    assert plog.offset_for_timestamp(T0 + 1) == (0, T0 + 1000)
    assert plog.offset_for_timestamp(T0 + 1005) == (2, T0 + 1010)
    assert plog.max_timestamp_and_offset() == (T0 + 1010, 2)
    plog.close()


def test_offset_for_timestamp_on_an_empty_log(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    assert plog.offset_for_timestamp(0) is None
    assert plog.max_timestamp_and_offset() == (-1, -1)
    plog.close()


# -- max timestamp --------------------------------------------------------------------------


def test_max_timestamp_and_offset(tmp_path: Path) -> None:
    plog = open_log(tmp_path, LogConfig(segment_bytes=200))
    append(plog, [b"a", b"b"], timestamps=[T0 + 5, T0 + 1])  # 0-1
    # KIP-734: the record holding the max timestamp (0), not its batch's last offset (1).
    assert plog.max_timestamp_and_offset() == (T0 + 5, 0)
    append(plog, [b"c", b"d", b"e"], timestamps=[T0 + 9, T0 + 2, T0 + 3])  # 2-4
    append(plog, [b"f"], timestamp=T0 + 9)  # 5: same max, the first batch with it wins
    append(plog, [b"g"], timestamp=T0 + 4)  # 6
    assert len(plog.segments) > 1
    assert plog.max_timestamp_and_offset() == (T0 + 9, 2)
    plog.delete_records_before(5)
    assert plog.max_timestamp_and_offset() == (T0 + 9, 5)
    plog.delete_records_before(6)
    assert plog.max_timestamp_and_offset() == (T0 + 4, 6)
    plog.close()


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_max_timestamp_names_the_record_in_the_middle_of_its_batch(
    tmp_path: Path, codec: Codec
) -> None:
    """KAFKA-16310: the max-timestamp record sits mid-batch, so neither the batch's base
    nor its last offset is the answer; compressed batches are decoded the same way."""
    plog = open_log(tmp_path)
    append(plog, [b"x"], timestamp=T0 + 50)  # 0
    stamps = [T0 + 10, T0 + 20, T0 + 99, T0 + 30, T0 + 99, T0 + 40]  # 1-6
    append(plog, [b"r%d" % i for i in range(6)], timestamps=stamps, codec=codec)
    append(plog, [b"y"], timestamp=T0 + 60)  # 7
    # The first of the two records with the max timestamp, at offset 1 + 2.
    assert plog.max_timestamp_and_offset() == (T0 + 99, 3)
    plog.delete_records_before(4)
    assert plog.max_timestamp_and_offset() == (T0 + 99, 5)
    plog.close()
