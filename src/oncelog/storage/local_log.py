"""The segments of one partition on local disk (Kafka's LocalLog).

A `LocalLog` owns the ordered segment list (lookup by offset, the active segment), the roll
rules and the roll itself, reads of segment bytes, truncation, segment deletion and fsyncs
(the recovery point). It knows nothing of producers, transactions, leader epochs or the high
watermark: `PartitionLog` (Kafka's UnifiedLog) keeps those and calls in here.
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import shutil
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.fileio import FileRegion, fsync_dir
from oncelog.protocol.records.batch import HEADER_SIZE, BatchHeader, parse_header
from oncelog.protocol.records.compression import batch_records
from oncelog.protocol.records.record import record_offsets_and_timestamps
from oncelog.storage.segment import LogSegment
from oncelog.storage.txn_index import AbortedTxn
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1


class SegmentShape(Protocol):
    """What `segments_unchanged` compares (the cleaner's SegmentRef)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...


class LocalLog:
    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        hooks: LogHooks | None = None,
    ) -> None:
        self.directory = directory
        self.tp = tp
        self.config = config
        self.clock = clock
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.recovery_point = 0
        """Below it everything is known fsynced (`recovery-point-offset-checkpoint`)."""
        self.unflushed_messages = 0
        self.last_flush_ms = clock.monotonic_ms()
        self.rolled_unflushed: list[LogSegment] = []
        """Segments rolled since the last `flush_rolled_segments`."""
        self.hooks = hooks or LogHooks()

    # -- the segment list --------------------------------------------------------------------

    def new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(self.directory, base_offset, self.config.index_interval_bytes)
        segment.open()
        segment.next_offset = base_offset
        return segment

    def add_segment(self, segment: LogSegment) -> None:
        segment.created_ms = self.clock.wall_ms()
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def segment_index(self, offset: int) -> int:
        """Index of the segment that holds `offset` (the first one if it lies below)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return i if i > 0 else 0

    def segment_for(self, offset: int) -> LogSegment:
        return self.segments[self.segment_index(offset)]

    def replace(self, first: int, count: int, segment: LogSegment) -> None:
        """Put `segment` in place of the `count` segments from index `first` (a swap)."""
        self.segments[first : first + count] = [segment]
        self._bases[first : first + count] = [segment.base_offset]

    def forget_rolled(self, segment: LogSegment) -> None:
        """`segment` leaves the log: no fsync of it is owed any more."""
        if segment in self.rolled_unflushed:
            self.rolled_unflushed.remove(segment)

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- roll rules and rolling --------------------------------------------------------------

    def roll_due(
        self,
        seg: LogSegment,
        size_after: int,
        rolling_ts: int,
        max_timestamp: int,
        end_offset: int,
        index_entries: int,
    ) -> bool:
        """Whether a non-empty `seg` must roll before a write that would make it `size_after`
        bytes, ending at `end_offset`, of batches up to `max_timestamp`.

        Kafka's time rule (`LogSegment.timeWaitedForRoll`): when the segment's first batch has
        a timestamp (`rolling_ts`, `seg.first_batch_timestamp`), the new batches' timestamp
        minus it; otherwise the wall clock since the segment was created. Not the wall clock
        against an old first timestamp: records with old timestamps (a replay of history)
        would then roll a segment per append."""
        too_big = size_after > self.config.segment_bytes
        if rolling_ts >= 0:
            waited = max_timestamp - rolling_ts
        else:
            waited = self.clock.wall_ms() - seg.created_ms
        too_old = waited > self.max_segment_ms()
        index_full = (index_entries + 1) * 8 > self.config.segment_index_bytes
        offset_overflow = end_offset - seg.base_offset > INT32_MAX
        return too_big or too_old or index_full or offset_overflow

    def max_segment_ms(self) -> int:
        """segment.ms, or max.compaction.lag.ms when lower on a compacted topic: the active
        segment is never cleaned, so it must roll for its records to be (KIP-354)."""
        if not self.config.compact:
            return self.config.segment_ms
        return min(self.config.segment_ms, self.config.max_compaction_lag_ms)

    def should_roll(self, size: int, max_timestamp: int, end_offset: int) -> bool:
        """Whether the active segment must roll before a write of `size` bytes of batches up
        to `max_timestamp`, ending at `end_offset` (an empty segment never rolls)."""
        seg = self.segments[-1]
        if seg.size == 0:
            return False
        return self.roll_due(
            seg,
            seg.size + size,
            seg.first_batch_timestamp,
            max_timestamp,
            end_offset,
            seg.index.entries,
        )

    def fits_one_write(
        self, first: BatchHeader, last: BatchHeader, n: int, size: int, max_timestamp: int
    ) -> bool:
        """Whether `n` batches from `first` to `last` (a follower append) all go into the
        active segment without a roll: the roll rule is monotonic in size, timestamp, end
        offset and index entries, so if the whole append does not make the segment roll, no
        batch of it alone would (checked batch by batch otherwise, `run_end`)."""
        seg = self.segments[-1]
        if seg.size > 0:
            rolling_ts = seg.first_batch_timestamp
        elif first.base_offset + first.last_offset_delta - seg.base_offset > INT32_MAX:
            return False  # an empty segment far below the batch: replaced first
        elif n == 1:
            return True  # the first batch of an empty segment never rolls it
        else:
            rolling_ts = first.max_timestamp
        return not self.roll_due(
            seg,
            seg.size + size,
            rolling_ts,
            max_timestamp,
            last.base_offset + last.last_offset_delta + 1,
            seg.index.entries + n - 1,
        )

    def first_rolls(self, first: BatchHeader) -> bool:
        """Whether the active segment must roll before the batch `first` alone."""
        seg = self.segments[-1]
        return seg.size > 0 and self.roll_due(
            seg,
            seg.size + first.size,
            seg.first_batch_timestamp,
            first.max_timestamp,
            first.next_offset,
            seg.index.entries,
        )

    def replace_empty_active(self, first: BatchHeader) -> None:
        """An empty active segment far below the batch `first` (after a gap), whose index
        could not hold it, gives way to one starting at the batch."""
        seg = self.segments[-1]
        if seg.size == 0 and first.last_offset - seg.base_offset > INT32_MAX:
            self.segments.pop()
            self._bases.pop()
            self.discard(seg.delete())
            self.add_segment(self.new_segment(first.base_offset))

    def run_end(self, batches: list[tuple[int, BatchHeader]], i: int) -> int:
        """The end of the run of batches from `i` that go into the active segment in one
        write (the batch at `i` goes in): each batch rolls exactly when the leader's append
        of it alone would have."""
        _, first = batches[i]
        seg = self.segments[-1]
        base_size = seg.size
        rolling_ts = seg.first_batch_timestamp if seg.size > 0 else first.max_timestamp
        size = first.size
        j = i + 1
        while j < len(batches):
            header = batches[j][1]
            if self.roll_due(
                seg,
                base_size + size + header.size,
                rolling_ts,
                header.max_timestamp,
                header.next_offset,
                seg.index.entries + (j - i),  # at most one entry per batch
            ):
                break
            size += header.size
            j += 1
        return j

    def append_run(self, view: memoryview, run: list[tuple[int, BatchHeader]]) -> None:
        """Write stored batches (a follower's run, (position in `view`, header) each) to the
        active segment in one write."""
        start = run[0][0]
        size = run[-1][0] + run[-1][1].size - start
        self.segments[-1].append([view[start : start + size]], [(p - start, h) for p, h in run])

    def roll(self, at: int | None = None) -> LogSegment | None:
        """Start a new active segment at the log end (or at `at` beyond it: the base offset
        of a follower's next batch after a gap); the old one, returned, is left for
        `flush_rolled_segments`. None (and no roll) when the active segment is empty."""
        old = self.segments[-1]
        if old.size == 0:
            return None
        old.write_indexes()
        old.release_reserve()
        self.rolled_unflushed.append(old)
        self.add_segment(self.new_segment(max(old.next_offset, at or 0)))
        log.debug("%s: rolled new segment at offset %d", self.tp, self.log_end_offset)
        return old

    # -- flush -------------------------------------------------------------------------------

    def flush_rolled_segments(self) -> None:
        """fsync segments rolled since the last call and move the recovery point past them."""
        pending, self.rolled_unflushed = self.rolled_unflushed, []
        for segment in pending:
            with contextlib.suppress(OSError, ValueError):
                self.hooks.flush(segment.flush)
                self.recovery_point = max(self.recovery_point, segment.next_offset)

    def flush_active(self) -> None:
        """fsync the active segment; everything is on disk (the recovery point is the end)."""
        self.hooks.flush(self.segments[-1].flush)
        self.recovery_point = self.log_end_offset
        self.unflushed_messages = 0
        self.last_flush_ms = self.clock.monotonic_ms()

    def flush_due(self) -> bool:
        """Whether `flush.ms` has passed since the last flush with messages unflushed."""
        return bool(self.unflushed_messages) and (
            self.clock.monotonic_ms() - self.last_flush_ms >= self.config.flush_ms
        )

    # -- reads -------------------------------------------------------------------------------

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one: bool, regions: bool
    ) -> tuple[bytes | memoryview | FileRegion, int]:
        """(batches from `offset`, the offset after them; -1 with none) below `max_offset`,
        from the first segment that has any (`LogSegment.read_batches`, or `read_region`)."""
        data: bytes | memoryview | FileRegion = b""
        data_end = -1
        segments = self.segments
        i = self.segment_index(offset)
        while i < len(segments) and not data:
            segment = segments[i]
            read = segment.read_region if regions else segment.read_batches
            data, data_end = read(offset, max_bytes, min_one=min_one, max_offset=max_offset)
            i += 1
        return data, data_end

    def offset_for_timestamp(self, timestamp: int, start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start` with timestamp >=
        `timestamp`.

        A batch whose max timestamp matches may hold the matching records only below `start`
        (the log start offset); the search then goes on with the next batch, as Kafka's does.
        """
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start:
                continue
            while (found := segment.find_offset_by_timestamp(timestamp, start)) is not None:
                hit, start = _record_at_or_after(segment, found[0], timestamp)
                if hit is not None:
                    return hit
        return None

    def max_timestamp_and_offset(self, start: int) -> tuple[int, int]:
        """(max timestamp, offset of the first record holding it) at or after `start`, for
        ListOffsets v7+ -3.

        KIP-734 asks for the record's own offset, not its batch's last offset (Kafka fixed
        the same mistake in KAFKA-16310), so the one batch holding the maximum is decoded.
        """
        best: tuple[int, LogSegment, BatchHeader] | None = None
        for segment in self.segments:
            if segment.max_timestamp > (best[0] if best else -1):
                for _, header in segment.headers_from(segment.base_offset):
                    if (
                        header.max_timestamp > (best[0] if best else -1)
                        and header.last_offset >= start
                    ):
                        best = (header.max_timestamp, segment, header)
        if best is None:
            return -1, -1
        max_ts, segment, header = best
        if header.log_append_time:
            # Every record carries the batch's append time: the first one holds it.
            return max_ts, max(header.base_offset, start)
        batch = segment.read(header.base_offset, HEADER_SIZE)
        found = (-1, -1)
        for rec_offset, rec_ts in record_offsets_and_timestamps(
            batch_records(batch, 0, header),
            header.base_offset,
            header.base_timestamp,
            header.record_count,
        ):
            if rec_offset >= start and rec_ts > found[0]:
                found = (rec_ts, rec_offset)
        return found

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper) in the segments' `.txnindex` files,
        as read_committed fetches need (Kafka's collectAbortedTransactions)."""
        out: list[AbortedTxn] = []
        for segment in self.segments[self.segment_index(start) :]:
            for txn in segment.txn_index.entries:
                if txn.last_offset >= start and txn.first_offset < upper:
                    out.append(txn)
                if txn.last_stable_offset >= upper:
                    return out
        return out

    # -- what the cleaner asks of the segments -------------------------------------------------

    def uncleanable_from(self, first_dirty: int, last_stable: int, now: int) -> int:
        """The first uncleanable offset: never the active segment, never at or past the last
        stable offset, never a segment at or after `first_dirty` whose newest record is
        younger than min.compaction.lag.ms."""
        end = min(last_stable, self.segments[-1].base_offset)
        lag = self.config.min_compaction_lag_ms
        if lag > 0:
            for segment in self.segments[:-1]:
                if segment.next_offset > first_dirty and segment.max_timestamp > now - lag:
                    return min(end, segment.base_offset)
        return end

    def cleanable_bytes(self, first_dirty: int, end: int) -> tuple[int, int]:
        """(clean bytes, dirty bytes) of the segments below `end`."""
        clean = sum(s.size for s in self.segments if s.base_offset < first_dirty)
        dirty = 0
        if first_dirty < end:
            bases = [*self._bases[1:], self.log_end_offset + 1]
            dirty = sum(
                s.size
                for s, next_base in zip(self.segments, bases, strict=True)
                if s.base_offset < end and next_base > first_dirty
            )
        return clean, dirty

    def compaction_delay_ms(self, first_dirty: int, now: int) -> int:
        """How long past max.compaction.lag.ms the oldest dirty record is (0: not yet)."""
        lag = self.config.max_compaction_lag_ms
        stamps = [
            s.first_batch_timestamp
            for s in self.segments[:-1]
            if s.next_offset > first_dirty and s.first_batch_timestamp > 0
        ]
        if not stamps or lag >= now:
            return 0
        return max(0, now - lag - min(stamps))

    def segments_unchanged(self, refs: Iterable[SegmentShape], end: int) -> bool:
        """True if each closed segment of `refs` below `end` is still this log's, as big as
        it was (retention, DeleteRecords or a deletion may have changed them meanwhile)."""
        closed = {s.base_offset: s for s in self.segments[:-1]}
        for ref in refs:
            if ref.base_offset >= end:
                continue
            segment = closed.get(ref.base_offset)
            if segment is None or segment.size != ref.size:
                return False
        return True

    # -- truncation and deletion -------------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after `offset`, which lies in or above the first segment."""
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            segment = self.segments.pop()
            self._bases.pop()
            self.discard(segment.delete())
        self.segments[-1].truncate_to(offset)

    def start_at(self, offset: int) -> None:
        """After `delete_all_segments`: an empty log at `offset`, on disk and fsynced."""
        self.add_segment(self.new_segment(offset))
        fsync_dir(self.directory)
        self.recovery_point = offset
        self.unflushed_messages = 0

    def delete_all_segments(self) -> None:
        """Delete every segment (a full truncation adds a new one after)."""
        for segment in self.segments:
            self.discard(segment.delete())
        self.segments = []
        self._bases = []
        self.rolled_unflushed = []

    def delete_oldest(self) -> None:
        """Delete the first segment (retention, DeleteRecords)."""
        segment = self.segments.pop(0)
        self._bases.pop(0)
        self.forget_rolled(segment)
        self.discard(segment.delete())

    def delete_below(self, offset: int, pinned: Callable[[LogSegment], bool]) -> int:
        """Delete the segments wholly below `offset` (a new log start), but not one a
        cleaner swap in flight replaces (`pinned`) nor any after it; return how many."""
        deleted = 0
        segments = self.segments
        while len(segments) > 1 and segments[1].base_offset <= offset and not pinned(segments[0]):
            self.delete_oldest()
            deleted += 1
        return deleted

    def apply_retention(
        self, high_watermark: int, pinned: Callable[[LogSegment], bool], roll: Callable[[], object]
    ) -> int:
        """Delete the oldest segments beyond retention.ms / retention.bytes; return how many.

        Only segments wholly below `high_watermark` go (Kafka's rule; on a single broker the
        high watermark is the log end, so every segment qualifies), never one a cleaner swap
        in flight replaces (`pinned`: the next round takes it). An expired active segment
        with data is rolled (`roll`) first."""
        deleted = 0
        segments = self.segments
        now = self.clock.wall_ms()
        retention_ms = self.config.retention_ms
        if retention_ms >= 0:
            while (
                segments
                and segments[0].next_offset <= high_watermark
                and not pinned(segments[0])
                and self.expired(segments[0], now, retention_ms)
            ):
                if len(segments) == 1:
                    if segments[0].size == 0:
                        break
                    roll()
                self.delete_oldest()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            total = self.size_bytes
            while (
                len(segments) > 1
                and segments[0].next_offset <= high_watermark
                and not pinned(segments[0])
                and total - segments[0].size >= retention_bytes
            ):
                total -= segments[0].size
                self.delete_oldest()
                deleted += 1
        return deleted

    def expired(self, segment: LogSegment, now: int, retention_ms: int) -> bool:
        """Whether `segment`'s newest record is older than `retention_ms`."""
        if segment.size == 0:
            # a closed segment the cleaner emptied holds nothing to keep
            return segment is not self.segments[-1]
        largest = (
            segment.max_timestamp if segment.max_timestamp >= 0 else segment.last_modified_ms()
        )
        return now - largest > retention_ms

    def discard(self, paths: list[Path]) -> None:
        self.hooks.discard(paths, self.config.file_delete_delay_ms)

    def close(self, *, release: bool = True) -> None:
        for segment in self.segments:
            segment.close(release=release)

    def delete(self) -> None:
        """Close the segments and rename the directory to `<dir>.<uuid>-delete` for
        `hooks.discard` to remove (`retire_directory`)."""
        self.close(release=False)
        retired = retire_directory(self.directory)
        if retired is not None:
            self.discard([retired])


def _record_at_or_after(
    segment: LogSegment, offset: int, timestamp: int
) -> tuple[tuple[int, int] | None, int]:
    """(first record at or after `offset` with timestamp >= `timestamp` in the batch holding
    `offset`, or None; the offset after that batch)."""
    batch = segment.read(offset, HEADER_SIZE)
    if len(batch) < HEADER_SIZE:
        return None, segment.next_offset
    header = parse_header(batch, 0)
    if header.log_append_time:
        return (max(header.base_offset, offset), header.max_timestamp), header.next_offset
    for rec_offset, rec_ts in record_offsets_and_timestamps(
        batch_records(batch, 0, header),
        header.base_offset,
        header.base_timestamp,
        header.record_count,
    ):
        if rec_ts >= timestamp and rec_offset >= offset:
            return (rec_offset, rec_ts), header.next_offset
    return None, header.next_offset


def retire_directory(directory: Path) -> Path | None:
    """Rename a partition directory to `<dir>.<uuid>-delete` (Kafka's name), which no load
    takes for a partition; the new path, or None if there was no directory."""
    retired = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-delete")
    try:
        directory.rename(retired)
    except FileNotFoundError:
        return None
    return retired


def remove_paths(paths: Iterable[Path]) -> int:
    """Remove files and directory trees (missing ones are fine); how many paths went."""
    removed = 0
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        removed += 1
    return removed


def _remove_now(paths: list[Path], _delay_ms: int) -> int:
    return remove_paths(paths)


def _run(flush: Callable[[], None]) -> None:
    flush()


def _nothing() -> None:
    pass


@dataclass(frozen=True, slots=True)
class LogHooks:
    """What a partition log hands its owner (the log manager), given at construction."""

    flush: Callable[[Callable[[], None]], None] = _run
    """Runs each segment fsync given to it (the broker's metrics time them; storage reads
    no clock). May be called from a worker thread."""
    discard: Callable[[list[Path], int], object] = _remove_now
    """Takes the renamed files of deleted segments and the renamed directory of a deleted
    log to remove after the given delay, the log's `file.delete.delay.ms` (at once by
    default; the log manager's worker does it for the broker, as Kafka's scheduler does:
    the delay leaves in-flight reads of a deleted segment their files)."""
    roll: Callable[[], None] = _nothing
    """Called after each roll: the roll's snapshot and fsync wait for `flush_rolled`."""
