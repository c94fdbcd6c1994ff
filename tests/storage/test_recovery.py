"""Recovery after unclean stops: torn and garbled tails, lost or corrupt indexes."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.protocol.records.batch import HEADER_SIZE, iter_batches
from oncelog.storage.partition_log import PartitionLog
from tests.storage.util import (
    T0,
    append,
    batch_offsets,
    make_batch,
    open_log,
    read_all,
    segment_files,
)

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=150)
NAME = "{:020d}{}"


class Snapshot:
    """A closed multi-segment log and copies of every file, to compare after recovery."""

    def __init__(self, root: Path) -> None:
        plog = open_log(root, CONFIG)
        rng = random.Random(3)
        for i in range(40):
            append(plog, [bytes([65 + i % 26]) * rng.randint(1, 30) for _ in range(i % 3 + 1)])
        self.bases = [s.base_offset for s in plog.segments]
        self.end = plog.log_end_offset
        self.data = read_all(plog)
        plog.close()
        self.directory = plog.directory
        self.files = {
            name: (self.directory / name).read_bytes() for name in segment_files(self.directory)
        }
        assert len(self.bases) >= 4

    def path(self, base: int, ext: str) -> Path:
        return self.directory / NAME.format(base, ext)

    def original(self, base: int, ext: str) -> bytes:
        return self.files[NAME.format(base, ext)]

    def last_batch(self, base: int) -> tuple[int, int, int]:
        """(position, size, base offset) of the last batch of a segment."""
        pos, header = list(iter_batches(self.original(base, ".log")))[-1]
        return pos, header.size, header.base_offset

    def batches_before(self, offset: int) -> bytes:
        """The stored bytes of every batch below `offset`."""
        end = 0
        for pos, header in iter_batches(self.data):
            if header.base_offset >= offset:
                break
            end = pos + header.size
        return self.data[:end]


def _indexes_match_original(snap: Snapshot, plog: PartitionLog) -> None:
    """Rebuilt indexes equal the ones written while appending (cut at the log end)."""
    for segment in plog.segments:
        segment.flush()  # index entries are gathered in memory until then
        index = snap.original(segment.base_offset, ".index")
        keep = [
            index[i : i + 8]
            for i in range(0, len(index), 8)
            if int.from_bytes(index[i + 4 : i + 8], "big") < segment.size
        ]
        assert segment.index.path.read_bytes() == b"".join(keep)
        tindex = snap.original(segment.base_offset, ".timeindex")
        keep = [
            tindex[i : i + 12]
            for i in range(0, len(tindex), 12)
            if segment.base_offset + int.from_bytes(tindex[i + 8 : i + 12], "big")
            < segment.next_offset
        ]
        assert segment.time_index.path.read_bytes() == b"".join(keep)


def _check_continues(snap: Snapshot, plog: PartitionLog, expected_end: int) -> None:
    assert plog.log_end_offset == expected_end
    assert read_all(plog) == snap.batches_before(expected_end)
    info = append(plog, [b"after", b"recovery"])
    assert (info.base_offset, info.last_offset) == (expected_end, expected_end + 1)
    assert batch_offsets(plog.read(expected_end, 1 << 20).records) == [
        (expected_end, expected_end + 1)
    ]
    plog.close()
    plog = open_log(snap.directory.parent, CONFIG, clean=False)
    assert plog.log_end_offset == expected_end + 2
    assert batch_offsets(read_all(plog))[-1] == (expected_end, expected_end + 1)
    plog.close()


@pytest.fixture
def snap(tmp_path: Path) -> Snapshot:
    return Snapshot(tmp_path)


# -- (a) truncated tail ---------------------------------------------------------------------


@pytest.mark.parametrize("cut", [1, 7, HEADER_SIZE, -1])
@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
def test_torn_tail_is_truncated(snap: Snapshot, cut: int, clean: bool) -> None:
    last = snap.bases[-1]
    pos, size, torn_offset = snap.last_batch(last)
    keep = pos + (cut if cut > 0 else size + cut)  # cut inside the last batch
    with open(snap.path(last, ".log"), "r+b") as handle:
        handle.truncate(keep)
    plog = open_log(snap.directory.parent, CONFIG, clean=clean, recovery_point=0)
    # even with the marker a torn tail in the last indexed region is found and cut
    assert plog.active.size == pos
    assert snap.path(last, ".log").stat().st_size == pos
    assert [s.base_offset for s in plog.segments] == snap.bases
    _indexes_match_original(snap, plog)
    _check_continues(snap, plog, torn_offset)


def test_whole_tail_segment_torn_to_a_few_bytes(snap: Snapshot) -> None:
    last = snap.bases[-1]
    with open(snap.path(last, ".log"), "r+b") as handle:
        handle.truncate(5)
    plog = open_log(snap.directory.parent, CONFIG, clean=False)
    assert plog.active.size == 0
    assert plog.active.index.entries == 0
    assert snap.path(last, ".index").read_bytes() == b""
    _check_continues(snap, plog, last)


# -- (b) garbled tail -----------------------------------------------------------------------


@pytest.mark.parametrize("where", ["records", "crc", "attributes", "max_timestamp"])
def test_garbled_last_batch_fails_crc_and_is_truncated(snap: Snapshot, where: str) -> None:
    last = snap.bases[-1]
    pos, size, bad_offset = snap.last_batch(last)
    at = {"records": size - 2, "crc": 18, "attributes": 22, "max_timestamp": 40}[where]
    raw = bytearray(snap.original(last, ".log"))
    raw[pos + at] ^= 0x5A
    snap.path(last, ".log").write_bytes(raw)
    plog = open_log(snap.directory.parent, CONFIG, clean=False)
    assert plog.active.size == pos
    assert snap.path(last, ".log").read_bytes() == snap.original(last, ".log")[:pos]
    _indexes_match_original(snap, plog)
    _check_continues(snap, plog, bad_offset)


def test_garbled_batch_in_the_middle_drops_everything_after_it(snap: Snapshot) -> None:
    second = snap.bases[1]
    batches = list(iter_batches(snap.original(second, ".log")))
    pos, header = batches[1]
    raw = bytearray(snap.original(second, ".log"))
    raw[pos + HEADER_SIZE] ^= 0xFF
    snap.path(second, ".log").write_bytes(raw)
    plog = open_log(snap.directory.parent, CONFIG, clean=False, recovery_point=0)
    assert [s.base_offset for s in plog.segments] == [0, second]
    assert plog.active.size == pos
    for base in snap.bases[2:]:  # later segments are removed with their indexes
        for ext in (".log", ".index", ".timeindex"):
            assert not snap.path(base, ext).exists()
    _indexes_match_original(snap, plog)
    _check_continues(snap, plog, header.base_offset)


@pytest.mark.parametrize(
    "garbage",
    [b"\x00" * 100, b"\x00" * 10, bytes(random.Random(1).getrandbits(8) for _ in range(500))],
    ids=["zeros", "few-zeros", "random"],
)
@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
def test_garbage_after_valid_batches_is_truncated(
    snap: Snapshot, garbage: bytes, clean: bool
) -> None:
    last = snap.bases[-1]
    original = snap.original(last, ".log")
    snap.path(last, ".log").write_bytes(original + garbage)
    plog = open_log(snap.directory.parent, CONFIG, clean=clean)
    assert snap.path(last, ".log").read_bytes() == original
    _indexes_match_original(snap, plog)
    _check_continues(snap, plog, snap.end)


def test_plausible_batch_with_a_bad_crc_after_valid_batches_is_truncated(
    snap: Snapshot,
) -> None:
    # offsets continue, magic 2, sane length: only the CRC tells it is not what was written
    last = snap.bases[-1]
    original = snap.original(last, ".log")
    fake = bytearray(make_batch([b"x" * 20], base_offset=snap.end))
    fake[-1] ^= 1
    snap.path(last, ".log").write_bytes(original + fake)
    plog = open_log(snap.directory.parent, CONFIG, clean=False)
    assert snap.path(last, ".log").read_bytes() == original
    _check_continues(snap, plog, snap.end)


def test_batch_with_offsets_going_backwards_ends_the_log(snap: Snapshot) -> None:
    last = snap.bases[-1]
    original = snap.original(last, ".log")
    replay = make_batch([b"dup"], base_offset=snap.end - 1)  # valid CRC, offset already used
    snap.path(last, ".log").write_bytes(original + replay)
    plog = open_log(snap.directory.parent, CONFIG, clean=False)
    assert snap.path(last, ".log").read_bytes() == original
    _check_continues(snap, plog, snap.end)


# -- (c) missing or corrupt indexes ---------------------------------------------------------


def _damage(path: Path, how: str, log_size: int) -> None:
    if how == "missing":
        path.unlink()
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "odd-length":
        path.write_bytes(path.read_bytes()[:-3])
    elif how == "random":
        path.write_bytes(bytes(random.Random(5).getrandbits(8) for _ in range(48)))
    elif how == "beyond-log":  # ascending entries, the last one past the end of the log
        suffix = path.suffix
        entry = (10_000).to_bytes(4, "big") + log_size.to_bytes(4, "big")
        if suffix == ".timeindex":
            entry = (2**62).to_bytes(8, "big") + (10_000).to_bytes(4, "big")
        path.write_bytes(path.read_bytes() + entry)
    elif how == "wrong-offset":  # last entry names a batch other than the one it points at
        data = bytearray(path.read_bytes())
        data[-8:-4] = (int.from_bytes(data[-8:-4], "big") + 1).to_bytes(4, "big")
        path.write_bytes(data)
    else:  # pragma: no cover
        raise AssertionError(how)


@pytest.mark.parametrize("clean", [False, True], ids=["unclean", "clean"])
@pytest.mark.parametrize(
    ("ext", "how"),
    [
        (".index", "missing"),
        (".index", "empty"),
        (".index", "odd-length"),
        (".index", "random"),
        (".index", "beyond-log"),
        (".index", "wrong-offset"),
        (".timeindex", "missing"),
        (".timeindex", "empty"),
        (".timeindex", "odd-length"),
        (".timeindex", "random"),
        (".timeindex", "beyond-log"),
    ],
)
@pytest.mark.parametrize("segment", [0, -1], ids=["first-segment", "active-segment"])
def test_damaged_index_is_rebuilt(
    snap: Snapshot, clean: bool, ext: str, how: str, segment: int
) -> None:
    base = snap.bases[segment]
    _damage(snap.path(base, ext), how, len(snap.original(base, ".log")))
    # a recovery point at the end: an unclean start scans only the active segment
    plog = open_log(snap.directory.parent, CONFIG, clean=clean, recovery_point=snap.end)
    assert snap.path(base, ext).read_bytes() == snap.original(base, ext)
    _indexes_match_original(snap, plog)
    assert [s.base_offset for s in plog.segments] == snap.bases
    assert plog.segments[segment].max_timestamp == max(
        h.max_timestamp for _, h in iter_batches(snap.original(base, ".log"))
    )
    _check_continues(snap, plog, snap.end)


def test_index_of_an_empty_segment_with_entries_is_reset(snap: Snapshot) -> None:
    plog = open_log(snap.directory.parent, CONFIG)
    plog.roll()
    empty = plog.active
    plog.close()
    empty.time_index.path.write_bytes(snap.original(snap.bases[-1], ".timeindex"))
    empty.index.path.write_bytes(snap.original(snap.bases[-1], ".index"))
    plog = open_log(snap.directory.parent, CONFIG)
    assert plog.active.base_offset == snap.end
    assert (plog.active.index.entries, plog.active.time_index.entries) == (0, 0)
    assert plog.active.max_timestamp == -1
    assert empty.index.path.read_bytes() == b""
    _check_continues(snap, plog, snap.end)


# -- clean start: no scan -------------------------------------------------------------------


def test_clean_start_does_not_check_crcs(snap: Snapshot) -> None:
    first = snap.bases[0]
    raw = bytearray(snap.original(first, ".log"))
    raw[HEADER_SIZE + 1] ^= 0xFF  # inside the first batch of the first segment
    snap.path(first, ".log").write_bytes(raw)
    plog = open_log(snap.directory.parent, CONFIG, clean=True)
    assert plog.log_end_offset == snap.end
    assert snap.path(first, ".log").read_bytes() == bytes(raw)
    data = plog.read(0, 1).records
    assert data == bytes(raw[: len(data)])  # served as stored: nothing was scanned
    plog.close()


def test_unclean_start_skips_segments_below_the_recovery_point(snap: Snapshot) -> None:
    first = snap.bases[0]
    raw = bytearray(snap.original(first, ".log"))
    raw[HEADER_SIZE + 1] ^= 0xFF
    snap.path(first, ".log").write_bytes(raw)
    # segment 0 ends before the recovery point: trusted
    plog = open_log(snap.directory.parent, CONFIG, clean=False, recovery_point=snap.bases[1])
    assert plog.log_end_offset == snap.end
    assert plog.recovery_point == snap.bases[1]
    plog.close()
    # with a recovery point inside segment 0 it is scanned and cut at the bad batch
    plog = open_log(snap.directory.parent, CONFIG, clean=False, recovery_point=1)
    assert (plog.log_end_offset, [s.base_offset for s in plog.segments]) == (0, [0])
    assert snap.path(first, ".log").read_bytes() == b""
    assert plog.recovery_point == 0
    assert [n for n in segment_files(snap.directory) if n.endswith(".log")] == [
        NAME.format(0, ".log")
    ]
    _check_continues(snap, plog, 0)


def test_clean_load_keeps_the_recovery_point_at_the_end(snap: Snapshot) -> None:
    plog = open_log(snap.directory.parent, CONFIG, clean=True, recovery_point=3)
    assert plog.recovery_point == snap.end
    plog.close()
    plog = open_log(snap.directory.parent, CONFIG, clean=False, recovery_point=10**9)
    assert plog.recovery_point == snap.end
    plog.close()


def test_stale_tmp_files_are_removed(snap: Snapshot) -> None:
    stale = snap.directory / "leftover.tmp"
    stale.write_bytes(b"x")
    open_log(snap.directory.parent, CONFIG).close()
    assert not stale.exists()


def test_truncate_to_rewinds_offsets_indexes_and_roll_time(snap: Snapshot) -> None:
    plog = open_log(snap.directory.parent, CONFIG)
    target = snap.bases[2] + 1
    # truncation is by whole batches: find the batch boundary at or after `target`
    boundary = next(b for b, _ in batch_offsets(snap.data) if b >= target)
    plog.truncate_to(boundary)
    assert plog.log_end_offset == boundary
    assert [s.base_offset for s in plog.segments] == snap.bases[:3]
    assert read_all(plog) == snap.batches_before(boundary)
    _indexes_match_original(snap, plog)
    plog.truncate_to(snap.bases[2])  # a segment base: that segment goes
    assert plog.log_end_offset == snap.bases[2]
    assert [s.base_offset for s in plog.segments] == snap.bases[:2]
    assert not snap.path(snap.bases[2], ".log").exists()
    plog.truncate_to(0)  # everything: segment 0 stays, empty
    assert [(s.base_offset, s.size) for s in plog.segments] == [(0, 0)]
    assert (plog.active.first_batch_timestamp, plog.active.max_timestamp) == (-1, -1)
    assert plog.active.index.entries == plog.active.time_index.entries == 0
    _check_continues(snap, plog, 0)


def test_truncate_to_restarts_the_roll_clock(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = open_log(tmp_path, LogConfig(segment_ms=1000), clock)
    append(plog, [b"old"], timestamp=T0)
    plog.truncate_to(0)
    clock.advance(5000)
    append(plog, [b"a"], timestamp=clock.wall_ms())
    append(plog, [b"b"], timestamp=clock.wall_ms())  # same segment: it started at T0+5000
    assert [(s.base_offset, s.next_offset) for s in plog.segments] == [(0, 2)]
    plog.close()


def test_tail_batch_with_an_offset_beyond_the_index_range_is_truncated(tmp_path: Path) -> None:
    """A garbled tail whose base offset is more than int32 past the segment's base cannot be
    indexed (index entries are relative int32, as Kafka's): recovery cuts it off instead of
    failing the start."""
    plog = open_log(tmp_path, CONFIG)
    append(plog, [b"a", b"b"])
    end, stored = plog.log_end_offset, read_all(plog)
    plog.close()
    log_file = next(plog.directory.glob("*.log"))
    with log_file.open("ab") as f:
        f.write(make_batch([b"garbled"], base_offset=2**40))
    reloaded = open_log(tmp_path, CONFIG, clean=False)
    assert reloaded.log_end_offset == end
    assert read_all(reloaded) == stored
