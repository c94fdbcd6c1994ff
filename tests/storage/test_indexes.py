"""OffsetIndex and TimeIndex on their own, and LogSegment lookups."""

from __future__ import annotations

import os
from pathlib import Path

from oncelog.protocol.records.batch import iter_batches
from oncelog.storage.index_file import BLOCK
from oncelog.storage.offset_index import OffsetIndex
from oncelog.storage.segment import LogSegment, segment_name
from oncelog.storage.time_index import TimeIndex
from tests.storage.util import T0, make_batch


def test_segment_name_is_20_digits() -> None:
    assert segment_name(0) == "00000000000000000000"
    assert segment_name(1234567) == "00000000000001234567"
    assert segment_name(2**63 - 1) == "09223372036854775807"


def test_offset_index_file_format_and_lookup(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", 100)
    index.open()
    index.append(100, 0)
    index.append(105, 4000)
    index.append(105, 5000)  # not above the last offset: ignored
    index.append(110, 8000)
    assert (tmp_path / "x.index").read_bytes() == b""  # gathered in memory until a flush
    index.flush()
    assert (tmp_path / "x.index").read_bytes() == bytes.fromhex(
        "00000000 00000000 00000005 00000fa0 0000000a 00001f40"
    )
    assert index.entries == 3 and index.last_offset == 110
    assert [index.lookup(o) for o in (99, 100, 104, 105, 109, 110, 10**9)] == [
        0,
        0,
        0,
        4000,
        4000,
        8000,
        8000,
    ]
    index.truncate_to_position(4000)
    assert (index.entries, index.last_offset) == (1, 100)
    assert (tmp_path / "x.index").stat().st_size == 8
    index.close()


def test_index_entries_are_written_in_blocks_and_at_close(tmp_path: Path) -> None:
    """One write per block of entries, not per entry; close writes the rest."""
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0)
    index.open()
    per_block = BLOCK // 8
    for i in range(per_block - 1):
        index.append(i, i * 4096)
    assert path.stat().st_size == 0
    index.append(per_block - 1, (per_block - 1) * 4096)
    assert path.stat().st_size == BLOCK
    index.append(per_block, per_block * 4096)
    assert path.stat().st_size == BLOCK
    index.close()
    assert path.stat().st_size == BLOCK + 8
    reloaded = OffsetIndex(path, 0)
    assert reloaded.load(log_size=10**9) and reloaded.entries == per_block + 1


def test_truncating_an_index_keeps_its_gathered_entries_in_order(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0)
    index.open()
    for i in range(5):
        index.append(i, i * 100)
    index.truncate_to_position(300)  # entries 0-2 stay, whether written or not
    index.append(7, 700)
    index.close()
    reloaded = OffsetIndex(path, 0)
    assert reloaded.load(log_size=10**6)
    assert [reloaded.lookup(o) for o in (2, 3, 7)] == [200, 200, 700]


def test_offset_index_load_rejects_inconsistent_files(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    index = OffsetIndex(path, 100)
    good = bytes.fromhex("00000000 00000000 00000005 00000fa0")
    path.write_bytes(good)
    assert index.load(log_size=4001) and index.entries == 2
    assert not index.load(log_size=4000)  # a position at or past the end of the log
    assert index.entries == 0
    path.write_bytes(good + b"\x00")
    assert not index.load(log_size=10**6)
    path.write_bytes(bytes.fromhex("00000005 00000fa0 00000000 00001000"))  # offsets descend
    assert not index.load(log_size=10**6)
    path.write_bytes(bytes.fromhex("00000000 00001000 00000005 00000fa0"))  # positions descend
    assert not index.load(log_size=10**6)
    path.unlink()
    assert index.load(log_size=0) and index.entries == 0
    index.close()


def test_time_index_file_format_and_lookup(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", 100)
    index.open()
    index.maybe_append(T0, 100)
    index.maybe_append(T0, 103)  # not above: ignored
    index.maybe_append(T0 + 50, 106)
    index.maybe_append(T0 + 10, 109)  # below: ignored
    index.flush()
    assert (tmp_path / "x.timeindex").read_bytes() == (
        T0.to_bytes(8, "big") + (0).to_bytes(4, "big") + (T0 + 50).to_bytes(8, "big") + b"\0\0\0\6"
    )
    assert (index.entries, index.last_timestamp) == (2, T0 + 50)
    # an offset at or before the first record with a timestamp >= the target
    assert [index.lookup(t) for t in (0, T0, T0 + 1, T0 + 50, T0 + 51)] == [
        100,
        100,
        100,
        100,
        106,
    ]
    index.truncate_to_offset(106)
    assert (index.entries, index.last_timestamp) == (1, T0)
    assert index.load(next_offset=101) and index.entries == 1
    assert not index.load(next_offset=100)  # an entry at or past the segment's end
    index.close()


def _segment_with(tmp_path: Path, batches: list[bytes], interval: int) -> LogSegment:
    segment = LogSegment(tmp_path, 50, interval)
    segment.open()
    segment.next_offset = 50
    offset = 50
    for batch in batches:
        data = bytearray(batch)
        data[:8] = offset.to_bytes(8, "big")
        headers = list(iter_batches(data))
        segment.append([data], headers)
        offset = headers[-1][1].next_offset
    return segment


def test_segment_position_of_and_read(tmp_path: Path) -> None:
    batches = [make_batch([b"a"] * n, timestamp=T0 + n) for n in (1, 3, 2, 4)]  # 50 51-53 ...
    segment = _segment_with(tmp_path, batches, interval=100)
    sizes = [len(b) for b in batches]
    starts = [sum(sizes[:i]) for i in range(4)]
    assert segment.index.entries == 2  # the first batch, then after > 100 bytes
    assert segment.next_offset == 60
    assert segment.size == sum(sizes)
    spans = {50: 0, 51: 1, 53: 1, 54: 2, 55: 2, 56: 3, 59: 3}
    for offset, i in spans.items():
        assert segment.position_of(offset) == starts[i], offset
        data = segment.read(offset, 1)
        assert data[8:] == batches[i][8:]
    assert segment.position_of(60) is None
    assert segment.read(60, 1 << 20) == b""
    assert segment.find_offset_by_timestamp(T0 + 1, 50) == (50, T0 + 1)
    assert segment.find_offset_by_timestamp(T0 + 2, 50) == (51, T0 + 3)
    assert segment.find_offset_by_timestamp(T0 + 2, 54) == (54, T0 + 2)
    assert segment.find_offset_by_timestamp(T0 + 3, 50) == (51, T0 + 3)
    assert segment.find_offset_by_timestamp(T0 + 3, 55) == (56, T0 + 4)
    assert segment.find_offset_by_timestamp(T0 + 5, 50) is None
    assert segment.max_timestamp == T0 + 4
    assert segment.first_batch_timestamp == T0 + 1
    segment.close()


def test_index_entries_gathered_while_a_worker_writes_them_out(tmp_path: Path) -> None:
    """Checkpoints fsync the active segment from a worker thread while the loop appends."""
    import threading

    path = tmp_path / "x.index"
    index = OffsetIndex(path, 0)
    index.open()
    done = threading.Event()

    def flusher() -> None:
        while not done.is_set():
            index.write_pending()  # what a flush does before its fsync

    worker = threading.Thread(target=flusher)
    worker.start()
    try:
        for i in range(200_000):
            index.append(i, i * 10)
    finally:
        done.set()
        worker.join()
    index.close()
    reloaded = OffsetIndex(path, 0)
    assert reloaded.load(log_size=10**9) and reloaded.entries == 200_000


def test_a_tail_read_finds_its_batch_without_reading_headers(tmp_path: Path) -> None:
    """Batches appended since the last index entry are remembered: a caught-up reader's
    lookup reads nothing; older ones, gaps and truncation still answer as the files do."""
    segment = LogSegment(tmp_path, 0, index_interval_bytes=10_000)
    segment.open()
    offset = 0
    for count in (1, 3, 1, 2):
        raw = make_batch([b"v" * 10] * count, base_offset=offset)
        header = next(iter_batches(raw))[1]
        segment.append([raw], [(0, header)])
        offset += count + 2  # a gap after each batch, as a compacted leader's log has
    reads = 0
    real_pread = os.pread

    def counting_pread(fd: int, n: int, pos: int) -> bytes:
        nonlocal reads
        reads += 1
        return real_pread(fd, n, pos)

    expected = {}
    for o in range(offset + 2):
        found = None
        for pos, h in iter_batches(real_pread(segment._fd, segment.size, 0)):
            if h.last_offset >= o:
                found = (pos, h.base_offset)
                break
        expected[o] = found
    os.pread = counting_pread  # type: ignore[assignment]
    try:
        got = {o: segment._batch_at(o) for o in range(offset + 2)}
    finally:
        os.pread = real_pread  # type: ignore[assignment]
    assert {o: (g[0], g[1].base_offset) if g else None for o, g in got.items()} == expected
    assert reads == 0
    segment.truncate_to(3)  # the second batch and after go
    assert segment._batch_at(3) is None and segment._batch_at(0) is not None
    segment.close()
