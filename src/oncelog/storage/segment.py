"""One log segment: `<base offset>.log` with its `.index` and `.timeindex`.

Batches are appended as bytes and read back as bytes; the segment only looks at batch
headers (never records) to find positions, so reads and writes cost per batch, not per record.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from oncelog.fileio import FileRegion
from oncelog.protocol.records.batch import (
    CRC_START,
    CURRENT_MAGIC,
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    iter_batches,
    parse_header,
    span_batches,
)
from oncelog.protocol.records.control import parse_marker_at
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.storage.offset_index import OffsetIndex
from oncelog.storage.time_index import TimeIndex
from oncelog.storage.txn_index import TransactionIndex

_SCAN_CHUNK = 1 << 20
#: Index entries hold offsets relative to the segment's base as int32, as Kafka's do; a batch
#: beyond that is garbage (a garbled tail), not something to index.
_MAX_RELATIVE_OFFSET = 2**31 - 1
_IOV_MAX = 1024
#: Reads this large are answered as a FileRegion (sent with sendfile); smaller ones are
#: copied, which costs less than the extra system calls of sending a region.
REGION_MIN_BYTES = 32 * 1024
#: At most this many batches since the last index entry are remembered (`_recent`).
_RECENT_MAX = 256
#: A deleted segment's files until they are removed (`LogSegment.delete`).
DELETED_SUFFIX = ".deleted"
#: Writes this large reserve room for `_RESERVE_WRITES` more like them, up to
#: `_RESERVE_BYTES`, ahead of time (`_reserve`); a partition written in small batches never
#: holds blocks past its end.
_RESERVE_MIN_WRITE = 16 * 1024
_RESERVE_WRITES = 16
_RESERVE_BYTES = 4 << 20


def segment_name(base_offset: int) -> str:
    return f"{base_offset:020d}"


@dataclass(slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    next_offset: int


class LogSegment:
    def __init__(
        self, directory: Path, base_offset: int, index_interval_bytes: int, suffix: str = ""
    ) -> None:
        """`suffix` is appended to every file name: the cleaner writes `.cleaned` segments."""
        self.base_offset = base_offset
        name = segment_name(base_offset)
        self.log_path = directory / f"{name}.log{suffix}"
        self.index = OffsetIndex(directory / f"{name}.index{suffix}", base_offset)
        self.time_index = TimeIndex(directory / f"{name}.timeindex{suffix}", base_offset)
        self.txn_index = TransactionIndex(directory / f"{name}.txnindex{suffix}")
        self.index_interval_bytes = index_interval_bytes
        self.size = 0
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.first_batch_timestamp = -1
        self.created_ms = -1  # set by the owning log; time roll falls back to it
        self._bytes_since_index = 0
        self._fd = -1
        self._recent: list[tuple[int, BatchHeader]] = []
        """(position, header) of the batches appended since the last index entry, in order
        and up to the segment's end: a reader at the tail (a consumer or follower caught up)
        finds its batch here instead of reading headers forward from the index entry."""
        self._recent_offsets: list[int] = []
        self._reserved = 0
        """End of the blocks reserved past `size` (`_reserve`); 0 when none may be."""
        self._can_reserve = _speedups is not None

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> None:
        self._fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        st = os.fstat(self._fd)
        self.size = st.st_size
        # Blocks past the end: a reservation a crash left behind, given back at the next roll.
        allocated = st.st_blocks * 512
        self._reserved = allocated if allocated > self.size + 8192 else 0
        self.index.open()
        self.time_index.open()
        self.txn_index.open()

    def load(self, *, recover: bool) -> RecoveryResult:
        """Open and bring the in-memory state up to date with the files.

        With `recover`, every batch is checked (length, magic, CRC, offsets ascending) and the
        log is truncated after the last valid one; indexes are rebuilt. Otherwise indexes are
        trusted when consistent and only the last indexed region is scanned.
        """
        self.open()
        if not recover and self.index.load(self.size) and self._index_tail_ok():
            start = self.index.lookup(2**63 - 1)
            result = self._scan(start, validate=False, rebuild=False)
            if (
                result.truncated_bytes == 0
                and self.time_index.load(result.next_offset)
                and (self.time_index.entries > 0) == (self.index.entries > 0)
            ):
                self.first_batch_timestamp = self._first_timestamp()
                self.max_timestamp = max(self.max_timestamp, self.time_index.last_timestamp)
                return result
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp = -1
        self._bytes_since_index = 0
        result = self._scan(0, validate=True, rebuild=True)
        if result.truncated_bytes:
            self._cut(result.valid_bytes)
        self.txn_index.truncate_from(result.next_offset)
        self.first_batch_timestamp = self._first_timestamp()
        self.write_indexes()
        self._forget_recent()  # the scan's batches may have been cut after it
        return result

    def write_indexes(self) -> None:
        """Write the index entries gathered in memory (a rebuild, a roll): the files then
        hold the whole index without waiting for the next fsync."""
        self.index.write_pending()
        self.time_index.write_pending()

    def _index_tail_ok(self) -> bool:
        """A clean load trusts the index only if a non-empty log has one (a missing or
        emptied `.index` would otherwise never be rebuilt) and its last entry points at the
        batch it names."""
        if self.index.entries == 0:
            return self.size == 0
        pos = self.index.lookup(2**63 - 1)
        if pos + HEADER_SIZE > self.size:
            return False
        header = parse_header(os.pread(self._fd, HEADER_SIZE, pos))
        return header.base_offset == self.index.last_offset

    def _scan(self, start: int, *, validate: bool, rebuild: bool) -> RecoveryResult:
        """Walk batch headers from `start`; stop at the first invalid or torn batch."""
        pos = start
        next_offset = self.index.last_offset if start > 0 else self.base_offset
        want = _SCAN_CHUNK
        while pos < self.size:
            chunk = os.pread(self._fd, want, pos)
            planned = self._planned_scan(
                chunk, pos, next_offset, validate=validate, rebuild=rebuild
            )
            if planned is not None:
                advanced, next_offset, stopped = planned
            else:
                advanced, next_offset, stopped = self._scan_chunk(
                    chunk, pos, next_offset, validate=validate, rebuild=rebuild
                )
            pos += advanced
            if stopped:
                break
            if advanced == 0:
                # No complete batch in the chunk: a torn tail, or one batch bigger than it.
                if len(chunk) < HEADER_SIZE:
                    break
                first = parse_header(chunk, 0)
                if first.batch_length < MIN_BATCH_LENGTH or pos + first.size > self.size:
                    break
                want = first.size
                continue
            want = _SCAN_CHUNK
        self.next_offset = next_offset
        return RecoveryResult(pos, self.size - pos, next_offset)

    def _planned_scan(
        self, chunk: bytes, pos: int, next_offset: int, *, validate: bool, rebuild: bool
    ) -> tuple[int, int, bool] | None:
        """`_scan_chunk` with the walk in C (`_speedups.plan_scan`) and one crc32c call per
        batch; None (the caller walks in Python) without the extension or when a CRC does not
        match, so the rare damaged chunk takes the reference path."""
        if _speedups is None:
            return None
        crcs, advanced, next_offset, max_ts, since, entries, stopped = _speedups.plan_scan(
            chunk,
            next_offset,
            self.base_offset,
            self._bytes_since_index,
            self.index_interval_bytes,
            self.index.entries > 0,
            self.max_timestamp,
        )
        if validate:
            view = memoryview(chunk)
            if any(crc32c(view[p + CRC_START : p + n]) != crc for p, n, crc in crcs):
                return None
        self.max_timestamp = max_ts
        if rebuild:
            self._bytes_since_index = since
            for offset, rel, running_max in entries:
                self.index.append(offset, pos + rel)
                self.time_index.maybe_append(running_max, offset)
        return advanced, next_offset, stopped

    def _scan_chunk(
        self, chunk: bytes, pos: int, next_offset: int, *, validate: bool, rebuild: bool
    ) -> tuple[int, int, bool]:
        """(bytes advanced, next offset, stopped at an invalid batch) of one chunk's walk."""
        advanced = 0
        stopped = False
        for rel, header in iter_batches(chunk):
            if not _plausible(header, next_offset, self.base_offset) or (
                validate and not _crc_ok(chunk, rel, header)
            ):
                stopped = True
                break
            self._note_batch(header, pos + rel, rebuild)
            next_offset = header.next_offset
            advanced = rel + header.size
        return advanced, next_offset, stopped

    def _note_batch(self, header: BatchHeader, position: int, rebuild: bool) -> None:
        self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
        if rebuild:
            self._maybe_index(header, position)

    def _first_timestamp(self) -> int:
        if self.size < HEADER_SIZE:
            return -1
        return parse_header(os.pread(self._fd, HEADER_SIZE, 0)).max_timestamp

    # -- writes ------------------------------------------------------------------------------

    def append(
        self,
        pieces: Sequence[bytes | bytearray | memoryview],
        headers: Sequence[tuple[int, BatchHeader]],
    ) -> None:
        """Append offset-assigned batches given as buffers, in one vectored write.

        `headers` are (position relative to the first piece, header). A failed or short write
        is cut off again, and so is a whole write whose index entries fail (a full disk): the
        caller answers an error, so the log must not keep a batch whose offsets the next append
        would reuse.
        """
        total = sum(map(len, pieces))
        start = self._write_at_end(pieces, total)
        saved = (self.max_timestamp, self._bytes_since_index)
        try:
            for rel, header in headers:
                self.max_timestamp = max(self.max_timestamp, header.max_timestamp)
                self._maybe_index(header, start + rel)
        except OSError:
            self._undo_indexes(start, headers[0][1].base_offset, saved)
            raise
        self.size += total
        if self.first_batch_timestamp < 0 and headers:
            self.first_batch_timestamp = headers[0][1].max_timestamp
        self.next_offset = headers[-1][1].next_offset

    def append_batch(self, head: bytes | bytearray, body: memoryview, header: BatchHeader) -> None:
        """`append` of one offset-assigned batch as its stamped header bytes and the rest
        (a client's Produce): the same steps and guarantees, without `append`'s loops."""
        total = len(head) + len(body)
        start = self._write_at_end((head, body), total)
        saved = (self.max_timestamp, self._bytes_since_index)
        if header.max_timestamp > self.max_timestamp:  # noqa: PLR1730  # max() costs ~7x this
            self.max_timestamp = header.max_timestamp
        try:
            self._maybe_index(header, start)
        except OSError:
            self._undo_indexes(start, header.base_offset, saved)
            raise
        self.size = start + total
        if self.first_batch_timestamp < 0:
            self.first_batch_timestamp = header.max_timestamp
        self.next_offset = header.base_offset + header.last_offset_delta + 1

    def _write_at_end(self, pieces: Sequence[bytes | bytearray | memoryview], total: int) -> int:
        """Write `pieces` (`total` bytes) after the segment's data, their blocks reserved
        first when large; return where they begin. A failed or short write is cut off again.
        The size is the caller's to move, once the index entries are in too."""
        start = self.size
        if total >= _RESERVE_MIN_WRITE and start + total > self._reserved and self._can_reserve:
            self._reserve(start, total)
        try:
            if len(pieces) <= _IOV_MAX:
                written = os.writev(self._fd, pieces)
            else:
                written = 0
                for i in range(0, len(pieces), _IOV_MAX):
                    written += os.writev(self._fd, pieces[i : i + _IOV_MAX])
            if written != total:
                raise OSError(f"short write to {self.log_path}: {written} of {total} bytes")
        except OSError:
            self._cut(start)
            raise
        return start

    def _undo_indexes(self, start: int, first_offset: int, saved: tuple[int, int]) -> None:
        """Take back a write at `start` whose index entries failed: the caller answers an
        error, so neither the bytes nor the entries may stay."""
        self._cut(start)
        self.index.truncate_to_position(start)
        self.time_index.truncate_to_offset(first_offset)
        self.max_timestamp, self._bytes_since_index = saved
        self._forget_recent()

    def _reserve(self, start: int, total: int) -> None:
        """Allocate the blocks of this write and the next ones before writing: on ext4 a
        write into allocated blocks skips the per-block delayed allocation, about a third of
        a large write's kernel time. The size does not change (FALLOC_FL_KEEP_SIZE), so
        readers, recovery and crash safety see the file as before; `release_reserve` gives
        the rest back when the segment stops growing."""
        assert _speedups is not None
        length = max(total, min(total * _RESERVE_WRITES, _RESERVE_BYTES))
        if _speedups.reserve_blocks(self._fd, start, length):
            self._reserved = start + length
        else:  # a file system without it, or a full one: write as usual, and stop asking
            self._can_reserve = False

    def release_reserve(self) -> None:
        """Give back the blocks reserved past the end (a roll, a close): a truncation to the
        same size frees them on ext4 and leaves the data alone."""
        if self._reserved > self.size and self._fd >= 0:
            self._cut(self.size)
        self._reserved = 0

    def _cut(self, size: int) -> None:
        """Truncate the file to `size`, which also frees any reservation past it."""
        os.ftruncate(self._fd, size)
        self.size = size
        self._reserved = 0

    def _maybe_index(self, header: BatchHeader, position: int) -> None:
        """Index the batch; the time entry carries the segment's running max timestamp (as
        Kafka's does), so no unindexed earlier batch can hold a later timestamp than an entry
        says: a lookup then never starts past a match, and the last entry is the max on load.
        The caller updates `max_timestamp` with this batch first."""
        self._bytes_since_index += header.size
        if self._bytes_since_index > self.index_interval_bytes or self.index.entries == 0:
            self.index.append(header.base_offset, position)
            self.time_index.maybe_append(self.max_timestamp, header.base_offset)
            self._bytes_since_index = 0
            self._recent = [(position, header)]
            self._recent_offsets = [header.base_offset]
        elif len(self._recent) < _RECENT_MAX:
            self._recent.append((position, header))
            self._recent_offsets.append(header.base_offset)
        else:  # a huge index interval: not worth remembering
            self._forget_recent()

    def _forget_recent(self) -> None:
        self._recent = []
        self._recent_offsets = []

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after `offset` (whole batches only)."""
        position = self.position_of(offset)
        if position is None:
            return
        self._forget_recent()
        self._cut(position)
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_from(offset)
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._scan(0, validate=False, rebuild=False)
        # The roll-by-time clock starts again from the (new) first batch, if any.
        self.first_batch_timestamp = self._first_timestamp()

    # -- reads -------------------------------------------------------------------------------

    def position_of(self, offset: int) -> int | None:
        """Position of the batch containing `offset`, or None if it is past this segment."""
        found = self._batch_at(offset)
        return None if found is None else found[0]

    def _batch_at(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the batch containing `offset` (or the first after it, past
        a gap), None past this segment."""
        recent = self._recent_offsets
        if recent and offset >= recent[0]:
            i = bisect.bisect_right(recent, offset) - 1
            found = self._recent[i]
            if found[1].last_offset >= offset:
                return found
            return self._recent[i + 1] if i + 1 < len(recent) else None
        pos = self.index.lookup(offset)
        while pos + HEADER_SIZE <= self.size:
            header = parse_header(os.pread(self._fd, HEADER_SIZE, pos))
            if header.last_offset >= offset:
                return pos, header
            pos += header.size
        return None

    def read(
        self, offset: int, max_bytes: int, *, min_one: bool = True, max_offset: int | None = None
    ) -> bytes | memoryview:
        """Whole batches from the one containing `offset`, up to `max_bytes` and (if given)
        below a batch whose base offset is `max_offset` or more; with `min_one` at least the
        first batch whatever its size. A view, not a copy, when cut short."""
        return self.read_batches(offset, max_bytes, min_one=min_one, max_offset=max_offset)[0]

    def read_batches(
        self, offset: int, max_bytes: int, *, min_one: bool = True, max_offset: int | None = None
    ) -> tuple[bytes | memoryview, int]:
        """`read`, plus the offset after the last batch returned (-1 when none is)."""
        return self._copy_batches(self.position_of(offset), max_bytes, min_one, max_offset)

    def read_region(
        self, offset: int, max_bytes: int, *, min_one: bool = True, max_offset: int | None = None
    ) -> tuple[bytes | memoryview | FileRegion, int]:
        """`read_batches`, as a region of the file when it spans `REGION_MIN_BYTES` or more,
        so the batches reach the socket without passing through Python (sendfile). Where
        the batches end comes from the offset index and a header or two instead of from
        reading the span, as Kafka's LogSegment.read finds its upper bound; the region holds
        whole batches only, so it may end up to one index interval short of `max_bytes`."""
        start = self.position_of(offset)
        if start is None or max_bytes < REGION_MIN_BYTES:
            return self._copy_batches(start, max_bytes, min_one, max_offset)
        stop, stop_offset = self.size, self.next_offset
        if max_offset is not None and max_offset < self.next_offset:
            bound = self._batch_at(max_offset)
            if bound is None:
                return self._copy_batches(start, max_bytes, min_one, max_offset)
            stop, header = bound
            stop_offset = header.base_offset
            if header.base_offset < max_offset:  # the batch begins below the bound: it is in
                stop, stop_offset = stop + header.size, header.next_offset
        if stop - start > max_bytes:
            floor = self.index.floor_by_position(start + max_bytes)
            if floor is None or floor[1] <= start:
                return self._copy_batches(start, max_bytes, min_one, max_offset)
            stop_offset, stop = floor
        if stop - start < REGION_MIN_BYTES:
            return self._copy_batches(start, max_bytes, min_one, max_offset)
        return FileRegion(self._fd, start, stop - start), stop_offset

    def _copy_batches(
        self, start: int | None, max_bytes: int, min_one: bool, max_offset: int | None
    ) -> tuple[bytes | memoryview, int]:
        end = self.size
        if start is None or start >= end or (max_bytes <= 0 and not min_one):
            return b"", -1
        data = os.pread(self._fd, min(max(max_bytes, HEADER_SIZE), end - start), start)
        cut, next_offset = span_batches(data, -1 if max_offset is None else max_offset)
        if cut == 0:
            if not min_one or len(data) < HEADER_SIZE:
                return b"", -1
            first = parse_header(data, 0)
            if max_offset is not None and first.base_offset >= max_offset:
                return b"", -1
            return os.pread(self._fd, min(first.size, end - start), start), first.next_offset
        return (data if cut == len(data) else memoryview(data)[:cut]), next_offset

    def headers_from(self, offset: int) -> list[tuple[int, BatchHeader]]:
        """(position, header) of each batch from the one holding `offset` to the end."""
        return [(pos, header) for pos, header, _ in self.batches_from(offset)]

    def batches_from(
        self, offset: int, *, markers: bool = False
    ) -> Iterator[tuple[int, BatchHeader, tuple[bool, int] | None]]:
        """(position, header, marker) of each batch from the one holding `offset` to the end,
        read in chunks; with `markers`, a control batch's (is COMMIT, coordinator epoch)."""
        start = self.position_of(offset)
        if start is None:
            return
        pos = start
        want = _SCAN_CHUNK
        while pos + HEADER_SIZE <= self.size:
            chunk = os.pread(self._fd, min(want, self.size - pos), pos)
            walked = list(iter_batches(chunk))
            if not walked:
                first = parse_header(chunk, 0)
                if first.batch_length < MIN_BATCH_LENGTH or pos + first.size > self.size:
                    return
                want = first.size
                continue
            for rel, header in walked:
                marker = parse_marker_at(chunk, rel) if markers and header.is_control else None
                yield pos + rel, header, marker
            last_rel, last = walked[-1]
            pos += last_rel + last.size
            want = _SCAN_CHUNK

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first batch with max timestamp >= `timestamp`."""
        begin = max(self.time_index.lookup(timestamp), start_offset)
        for _, header in self.headers_from(begin):
            if header.max_timestamp >= timestamp and header.last_offset >= start_offset:
                return max(header.base_offset, start_offset), header.max_timestamp
        return None

    def flush(self) -> None:
        os.fsync(self._fd)
        self.index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self, *, release: bool = True) -> None:
        if self._fd >= 0:
            if release:
                with contextlib.suppress(OSError):
                    self.release_reserve()
            os.close(self._fd)
            self._fd = -1
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def delete(self) -> list[Path]:
        """Rename the files to `<name>.deleted` (Kafka's suffix), indexes first: a crash in
        between leaves a log whose indexes are rebuilt on load, never orphan indexes a later
        segment would append to. The renamed files are returned for the caller to remove:
        unlinking a gigabyte segment takes the kernel a while, too long for the event loop;
        a load removes any it finds."""
        self.close(release=False)
        paths = (self.txn_index.path, self.time_index.path, self.index.path, self.log_path)
        retired = []
        for path in paths:
            target = path.with_name(path.name + DELETED_SUFFIX)
            with contextlib.suppress(FileNotFoundError):
                path.rename(target)
                retired.append(target)
        return retired

    def last_modified_ms(self) -> int:
        return int(os.stat(self.log_path).st_mtime * 1000)


def _plausible(header: BatchHeader, next_offset: int, base_offset: int) -> bool:
    return (
        header.magic == CURRENT_MAGIC
        and header.base_offset >= max(next_offset, base_offset)
        and header.last_offset_delta >= 0
        and header.last_offset - base_offset <= _MAX_RELATIVE_OFFSET
        and header.batch_length >= MIN_BATCH_LENGTH
    )


def _crc_ok(buf: bytes, pos: int, header: BatchHeader) -> bool:
    return bool(crc32c(memoryview(buf)[pos + CRC_START : pos + header.size]) == header.crc)
