"""The log cleaner: Kafka's compaction for `cleanup.policy=compact` (and `compact,delete`).

A cleaning round of one partition (Kafka's LogCleaner, transaction-aware):

1. `LogCleaner.grab_filthiest` (on the caller's thread, cheap) picks the partition whose
   cleanable range has the highest dirty ratio above `min.cleanable.dirty.ratio` (or whose
   `max.compaction.lag.ms` passed, or whose earliest delete horizon passed) and snapshots what
   the round needs into a picklable `CleanJob`: the closed segments below the first
   uncleanable offset (never the active segment, never at or above the last stable offset,
   never segments younger than `min.compaction.lag.ms`), the aborted transactions of the
   range, the last batch of every producer.
2. `clean_segments(job)` does the expensive part and touches only closed, immutable segment
   files, so it can run in a worker process: it maps each key of the dirty range to its
   latest offset (`OffsetMap`, bounded by `log.cleaner.dedupe.buffer.size`; a full map
   shortens the round), then rewrites groups of segments into `<base>.log.cleaned` files.
3. The swap (`swap.py`, crash-safe), in three parts: `LogCleaner.begin_swap` (the owner's
   thread) checks that the segments are still the log's and pins them; `CleanSwap.run` (a
   worker thread: the producer snapshot, the renames and directory fsyncs) swaps the files;
   `LogCleaner.end_swap` (the owner's thread) puts the new segments in the log's list and
   moves the checkpoint.

What a round keeps, per batch (offsets never change; emptied batches disappear unless kept):
- a record whose key has a later offset in the map is removed; a record without a key too;
- a tombstone stays until its batch's delete horizon (KIP-534: the cleaner that first keeps
  it stamps now + `delete.retention.ms` into the batch's base timestamp with the
  delete-horizon attribute) has passed;
- batches of aborted transactions are removed; an ABORT marker stays (with its `.txnindex`
  entry) while the round saw data of its transaction, a COMMIT marker while the round saw
  any batch of it; a marker that may go first gets a delete horizon and goes once it passed;
- the last batch of every producer stays, emptied to its header if need be, so its epoch
  and sequence survive (Kafka keeps it for the same reason); so does the round's last batch,
  so the log keeps its offsets.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.clock import Clock
from oncelog.config import BrokerConfig, LogConfig
from oncelog.fileio import fsync_dir
from oncelog.protocol.records.batch import (
    HEADER_SIZE,
    MIN_BATCH_LENGTH,
    BatchHeader,
    iter_batches,
    parse_header,
)
from oncelog.protocol.records.compression import batch_records
from oncelog.storage import swap
from oncelog.storage.cleaned_batches import (
    CleanedTransactions,
    CleanerError,
    Record,
    empty_batch,
    horizon_of,
    key_of,
    marker_kind,
    rebuild,
    records_of,
)
from oncelog.storage.offset_map import OffsetMap
from oncelog.storage.partition_log import PartitionLog, SegmentSwap
from oncelog.storage.segment import LogSegment
from oncelog.storage.txn_index import AbortedTxn
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1


# -- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanerSettings:
    """Broker-wide cleaner settings (Kafka's `log.cleaner.*`)."""

    enable: bool = True
    threads: int = 1
    backoff_ms: int = 15_000
    dedupe_buffer_size: int = 128 * 1024 * 1024
    io_buffer_size: int = 512 * 1024
    load_factor: float = 0.9

    @classmethod
    def from_config(cls, config: BrokerConfig) -> CleanerSettings:
        return cls(
            enable=bool(config.get("log.cleaner.enable")),
            threads=config.get_int("log.cleaner.threads"),
            backoff_ms=config.get_int("log.cleaner.backoff.ms"),
            dedupe_buffer_size=config.get_int("log.cleaner.dedupe.buffer.size"),
            io_buffer_size=config.get_int("log.cleaner.io.buffer.size"),
            load_factor=_as_float(config.get("log.cleaner.io.buffer.load.factor"), 0.9),
        )


def _as_float(value: object, default: float) -> float:
    return float(value) if isinstance(value, int | float) else default


@dataclass(frozen=True, slots=True)
class CleanParams:
    """The topic configs a cleaning uses, read from a LogConfig (Kafka's defaults if absent)."""

    compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    delete_retention_ms: int = 86_400_000
    segment_bytes: int = 1 << 30
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096

    @classmethod
    def of(cls, config: LogConfig) -> CleanParams:
        return cls(
            compact=config.compact,
            min_cleanable_dirty_ratio=config.min_cleanable_dirty_ratio,
            min_compaction_lag_ms=config.min_compaction_lag_ms,
            max_compaction_lag_ms=config.max_compaction_lag_ms,
            delete_retention_ms=config.delete_retention_ms,
            segment_bytes=config.segment_bytes,
            segment_index_bytes=config.segment_index_bytes,
            index_interval_bytes=config.index_interval_bytes,
        )


# -- the job and its result (picklable: they cross to the worker process) ---------------------


@dataclass(frozen=True, slots=True)
class SegmentRef:
    base_offset: int
    size: int
    next_offset: int
    index_entries: int


@dataclass(frozen=True, slots=True)
class CleanJob:
    tp: TopicPartition
    directory: str
    segments: tuple[SegmentRef, ...]
    """Closed segments from the log's first up to the last one below `end`."""
    first_dirty: int
    end: int
    """First uncleanable offset: nothing at or above it is mapped or removed."""
    aborted: tuple[AbortedTxn, ...]
    """Aborted transactions starting below `end`, by first offset."""
    txn_entries: dict[int, tuple[AbortedTxn, ...]]
    """`.txnindex` entries of each segment of the job, by base offset."""
    last_batches: dict[int, tuple[int, int]]
    """producer id -> (offset of its last data batch or -1, epoch)."""
    now_ms: int
    params: CleanParams
    dedupe_buffer_size: int
    io_buffer_size: int
    load_factor: float


@dataclass(frozen=True, slots=True)
class CleanedGroup:
    base_offset: int
    old_bases: tuple[int, ...]
    size: int


@dataclass(slots=True)
class CleanResult:
    groups: list[CleanedGroup] = field(default_factory=list)
    end_offset: int = 0
    """The new first dirty offset (the round's end: all below it is clean)."""
    bytes_before: int = 0
    bytes_after: int = 0
    records_read: int = 0
    records_kept: int = 0
    delete_horizon_ms: int = LONG_MAX
    """Earliest delete horizon of a tombstone or marker the round kept."""
    duration_ms: float = 0.0


# -- the worker ---------------------------------------------------------------------------------


def _read_batches(
    path: Path, io_buffer: int
) -> Iterator[tuple[bytes, list[tuple[int, BatchHeader]]]]:
    """Chunks of whole batches of a segment file, each with its (position, header)s."""
    with open(path, "rb", buffering=0) as handle:
        fd = handle.fileno()
        size = os.fstat(fd).st_size
        pos = 0
        want = max(io_buffer, HEADER_SIZE)
        while pos < size:
            chunk = os.pread(fd, want, pos)
            batches = list(iter_batches(chunk))
            if not batches:
                if len(chunk) < HEADER_SIZE:
                    return
                first = parse_header(chunk, 0)
                if first.batch_length < MIN_BATCH_LENGTH or pos + first.size > size:
                    return  # a torn tail: recovery truncates it, the round ignores it
                want = first.size
                continue
            yield chunk, batches
            last_pos, last = batches[-1]
            pos += last_pos + last.size
            want = max(io_buffer, HEADER_SIZE)


class _Round:
    def __init__(self, job: CleanJob) -> None:
        self.job = job
        self.directory = Path(job.directory)
        self.now = job.now_ms
        self.result = CleanResult()
        self.map = OffsetMap(self._map_memory(), job.load_factor)

    def _map_memory(self) -> int:
        """As much as the dirty range can need, within the dedupe buffer: a record takes at
        least 7 bytes in a batch, so a segment of n bytes holds at most n / 7 keys."""
        job = self.job
        dirty = sum(s.size for s in job.segments if s.next_offset > job.first_dirty)
        needed = int(dirty / 7 / job.load_factor) + 16
        return min(job.dedupe_buffer_size, needed * 24)

    def _path(self, base: int) -> Path:
        return self.directory / f"{base:020d}.log"

    # -- 1. the offset map --------------------------------------------------------------------

    def build_map(self) -> int:
        """Map the dirty range; return where the round ends (earlier if the map filled)."""
        job = self.job
        # Only transactions that end in the dirty range or later: the walk starts there, so
        # it would never see the marker of one that ended before, and would count that
        # producer's later (committed) batches as aborted (Kafka collects the dirty range's).
        txns = CleanedTransactions(t for t in job.aborted if t.last_offset >= job.first_dirty)
        for ref in job.segments:
            if ref.next_offset <= job.first_dirty:
                continue
            for chunk, batches in _read_batches(self._path(ref.base_offset), job.io_buffer_size):
                for pos, header in batches:
                    if header.base_offset < job.first_dirty:
                        continue
                    if header.base_offset >= job.end:
                        return job.end
                    if header.is_control:
                        txns.on_marker(header, marker_kind(chunk, pos, header))
                        continue
                    if txns.on_batch(header) or header.record_count == 0:
                        continue
                    if self.map.size + header.record_count > self.map.max_entries:
                        if header.base_offset == job.first_dirty:
                            raise CleanerError(
                                f"{job.tp}: log.cleaner.dedupe.buffer.size holds "
                                f"{self.map.max_entries} keys, fewer than the "
                                f"{header.record_count} records of one batch"
                            )
                        return header.base_offset
                    body = batch_records(chunk, pos, header)
                    base = header.base_offset
                    put = self.map.put
                    for rec in records_of(body, header.record_count):
                        if rec.key_length >= 0:
                            put(
                                body[rec.key_start : rec.key_start + rec.key_length],
                                base + rec.offset_delta,
                            )
        return job.end

    # -- 2. the groups ------------------------------------------------------------------------

    def groups(self, end: int) -> list[list[SegmentRef]]:
        """Consecutive segments below `end` merged while the result fits a segment (bytes,
        index size, 32-bit relative offsets), as Kafka's groupSegmentsBySize."""
        params = self.job.params
        segments = [s for s in self.job.segments if s.base_offset < end]
        out: list[list[SegmentRef]] = []
        for seg in segments:
            if out:
                group = out[-1]
                size = sum(s.size for s in group) + seg.size
                index = (sum(s.index_entries for s in group) + seg.index_entries) * 8
                span = min(seg.next_offset, end) - 1 - group[0].base_offset
                if (
                    size <= params.segment_bytes
                    and index <= params.segment_index_bytes
                    and span <= INT32_MAX
                ):
                    group.append(seg)
                    continue
            out.append([seg])
        return out

    # -- 3. cleaning --------------------------------------------------------------------------

    def clean(self) -> CleanResult:
        started = time.monotonic()
        end = self.build_map()
        self.map.latest_offset = end - 1
        self.result.end_offset = end
        txns = CleanedTransactions(self.job.aborted)
        for group in self.groups(end):
            self.result.groups.append(self._clean_group(group, txns, end))
        with contextlib.suppress(OSError):
            fsync_dir(self.directory)
        self.result.duration_ms = (time.monotonic() - started) * 1000
        return self.result

    def _clean_group(
        self, group: list[SegmentRef], txns: CleanedTransactions, end: int
    ) -> CleanedGroup:
        job = self.job
        base = group[0].base_offset
        swap.discard_cleaned(self.directory, [base])
        out = LogSegment(self.directory, base, job.params.index_interval_bytes, suffix=swap.CLEANED)
        out.open()
        try:
            for ref in group:
                self.result.bytes_before += ref.size
                self._clean_segment(ref, txns, end, out)
            # Aborts whose marker this group kept for their data, and those of markers past
            # the round's end (copied as they were).
            kept_entries = txns.kept_aborts + [
                t
                for ref in group
                for t in job.txn_entries.get(ref.base_offset, ())
                if t.last_offset >= end
            ]
            txns.kept_aborts = []
            for txn in sorted(set(kept_entries), key=lambda t: t.last_offset):
                out.txn_index.append(txn)
            out.release_reserve()
            out.flush()
            self.result.bytes_after += out.size
            return CleanedGroup(base, tuple(s.base_offset for s in group), out.size)
        finally:
            out.close()

    def _clean_segment(
        self, ref: SegmentRef, txns: CleanedTransactions, end: int, out: LogSegment
    ) -> None:
        for chunk, batches in _read_batches(self._path(ref.base_offset), self.job.io_buffer_size):
            pieces: list[bytes | memoryview] = []
            headers: list[tuple[int, BatchHeader]] = []
            written = 0
            view = memoryview(chunk)
            for pos, header in batches:
                if header.base_offset >= end:
                    batch: bytes | memoryview | None = view[pos : pos + header.size]
                else:
                    batch = self._filter(chunk, pos, header, txns, end)
                if batch is None:
                    continue
                pieces.append(batch)
                headers.append((written, parse_header(batch, 0)))
                written += len(batch)
            if pieces:
                out.append(pieces, headers)

    def _is_last_of_producer(self, header: BatchHeader) -> bool:
        last = self.job.last_batches.get(header.producer_id)
        if last is None:
            return False
        last_data, epoch = last
        if last_data >= 0:
            return header.last_offset == last_data and not header.is_control
        return header.is_control and header.producer_epoch == epoch

    def _filter(
        self, chunk: bytes, pos: int, header: BatchHeader, txns: CleanedTransactions, end: int
    ) -> bytes | memoryview | None:
        """What the round keeps of one batch below its end: the batch, a rewritten batch,
        its empty header, or nothing."""
        horizon = horizon_of(header)
        self.result.records_read += header.record_count
        if header.is_control:
            can_discard = txns.on_marker(header, marker_kind(chunk, pos, header))
            if not (can_discard and horizon is not None and horizon <= self.now):
                return self._keep_marker(chunk, pos, header, can_discard)
            kept: list[Record] = []
            body = b""
        elif txns.on_batch(header):
            kept, body = [], b""
        else:
            kept, body = self._kept_records(chunk, pos, header)
        self.result.records_kept += len(kept)
        if kept:
            new_horizon = horizon
            if any(rec.value_length < 0 for rec in kept):
                if new_horizon is None:
                    new_horizon = self.now + self.job.params.delete_retention_ms
                self.result.delete_horizon_ms = min(self.result.delete_horizon_ms, new_horizon)
            if len(kept) == header.record_count and new_horizon == horizon:
                return memoryview(chunk)[pos : pos + header.size]
            return rebuild(header, body, kept, new_horizon)
        if (header.has_producer_id and self._is_last_of_producer(header)) or (
            header.next_offset == end
        ):
            return empty_batch(header)
        return None

    def _keep_marker(
        self, chunk: bytes, pos: int, header: BatchHeader, can_discard: bool
    ) -> bytes | memoryview:
        """A marker that stays this round; one that may go later gets its delete horizon."""
        self.result.records_kept += header.record_count
        original = memoryview(chunk)[pos : pos + header.size]
        if not (can_discard and header.record_count):
            return original
        horizon = horizon_of(header)
        if horizon is None:
            horizon = self.now + self.job.params.delete_retention_ms
            body = batch_records(chunk, pos, header)
            original = memoryview(
                rebuild(header, body, list(records_of(body, header.record_count)), horizon)
            )
        self.result.delete_horizon_ms = min(self.result.delete_horizon_ms, horizon)
        return original

    def _kept_records(
        self, chunk: bytes, pos: int, header: BatchHeader
    ) -> tuple[list[Record], bytes]:
        """The records of a data batch that are the latest of their key; tombstones only
        until the batch's delete horizon."""
        if not header.record_count:
            return [], b""
        body = batch_records(chunk, pos, header)
        horizon = horizon_of(header)
        expired = horizon is not None and horizon <= self.now
        latest_mapped = self.map.latest_offset
        kept: list[Record] = []
        get = self.map.get
        for rec in records_of(body, header.record_count):
            offset = header.base_offset + rec.offset_delta
            if offset > latest_mapped:
                kept.append(rec)
            elif rec.key_length < 0 or offset < get(key_of(body, rec) or b""):
                continue
            elif rec.value_length >= 0 or not expired:
                kept.append(rec)
        return kept, body


def clean_segments(job: CleanJob) -> CleanResult:
    """Write the cleaned segments of `job` as `.cleaned` files (runs in a worker process)."""
    try:
        return _Round(job).clean()
    except BaseException:
        swap.discard_cleaned(Path(job.directory), [s.base_offset for s in job.segments])
        raise


# -- scheduling and the swap (the log owner's thread) -------------------------------------------


@dataclass(slots=True)
class _Candidate:
    plog: PartitionLog
    first_dirty: int
    end: int
    ratio: float


@dataclass(slots=True)
class CleanSwap:
    """A round's swap between `LogCleaner.begin_swap` and `end_swap`."""

    plog: PartitionLog
    job: CleanJob
    result: CleanResult
    pending: SegmentSwap

    def run(self) -> None:
        """The swap's renames, fsyncs and snapshot write (a worker thread)."""
        self.plog.swaps.run(self.pending)


class LogCleaner:
    """Chooses the partition to clean (Kafka's LogCleanerManager) and swaps results in.

    Not thread-safe: it runs where the logs are owned (the event loop); only
    `clean_segments` (a worker process) and `CleanSwap.run` (a worker thread) run elsewhere.
    """

    def __init__(self, settings: CleanerSettings, clock: Clock) -> None:
        self.settings = settings
        self.clock = clock
        self.in_progress: dict[TopicPartition, CleanJob] = {}
        self.cleanings = 0

    def grab_filthiest(self, logs: Iterable[PartitionLog]) -> tuple[PartitionLog, CleanJob] | None:
        """The job for the partition most in need of cleaning, if any needs it."""
        now = self.clock.wall_ms()
        best: _Candidate | None = None
        for plog in logs:
            if plog.tp in self.in_progress:
                continue
            params = CleanParams.of(plog.config)
            if not params.compact:
                continue
            first_dirty, end = plog.cleanable_offsets(now)
            clean_bytes, dirty_bytes = plog.local.cleanable_bytes(first_dirty, end)
            total = clean_bytes + dirty_bytes
            if total == 0:
                continue
            ratio = dirty_bytes / total
            forced = dirty_bytes > 0 and plog.local.compaction_delay_ms(first_dirty, now) > 0
            horizon_due = plog.delete_horizon_ms <= now
            if not (forced or horizon_due or ratio > params.min_cleanable_dirty_ratio):
                continue
            if best is None or ratio > best.ratio:
                best = _Candidate(plog, first_dirty, end, ratio)
        if best is None:
            return None
        job = self.prepare(best.plog, best.first_dirty, best.end, now)
        if job is None:
            return None
        self.in_progress[best.plog.tp] = job
        return best.plog, job

    def prepare(self, plog: PartitionLog, first_dirty: int, end: int, now: int) -> CleanJob | None:
        """Snapshot what a round of `plog` over [log start, end) needs."""
        closed = plog.segments[:-1]
        refs = tuple(
            SegmentRef(s.base_offset, s.size, s.next_offset, s.index.entries)
            for s in closed
            if s.base_offset < end
        )
        if not refs:
            return None
        aborted = sorted(
            (t for s in plog.segments for t in s.txn_index.entries if t.first_offset < end),
            key=lambda t: t.first_offset,
        )
        last_batches = {
            pid: (entry.last_offset, entry.producer_epoch)
            for pid, entry in plog.producer_state.producers.items()
        }
        return CleanJob(
            tp=plog.tp,
            directory=str(plog.directory),
            segments=refs,
            first_dirty=first_dirty,
            end=end,
            aborted=tuple(aborted),
            txn_entries={
                s.base_offset: tuple(s.txn_index.entries) for s in closed if s.base_offset < end
            },
            last_batches=last_batches,
            now_ms=now,
            params=CleanParams.of(plog.config),
            dedupe_buffer_size=self.settings.dedupe_buffer_size // max(1, self.settings.threads),
            io_buffer_size=self.settings.io_buffer_size,
            load_factor=self.settings.load_factor,
        )

    def begin_swap(
        self,
        plog: PartitionLog | None,
        job: CleanJob,
        result: CleanResult,
        crash: swap.CrashHook | None = None,
    ) -> CleanSwap | None:
        """Note the swap of a finished round into `plog` (the owner's thread; None: the
        partition is gone). None when its segments changed meanwhile: the round is dropped
        and its files are `discard`'s to delete, in a worker thread (unlinking a segment's
        worth of files is disk work). Otherwise `CleanSwap.run` goes to a worker thread and
        `end_swap` back here."""
        if plog is None or not plog.local.segments_unchanged(job.segments, result.end_offset):
            self.in_progress.pop(job.tp, None)
            log.info("%s: segments changed while cleaning; result discarded", job.tp)
            return None
        pending = plog.swaps.begin(
            [(g.base_offset, g.old_bases) for g in result.groups], result.end_offset, crash
        )
        return CleanSwap(plog, job, result, pending)

    @staticmethod
    def discard(job: CleanJob, result: CleanResult) -> None:
        """Delete the files of a round `begin_swap` dropped (any thread)."""
        swap.discard_cleaned(Path(job.directory), [g.base_offset for g in result.groups])

    def end_swap(self, cleaned: CleanSwap) -> bool:
        """Apply a swap whose files `CleanSwap.run` renamed (the owner's thread); False if it
        was stopped (the log was truncated, closed or deleted meanwhile) or failed before its
        commit. A failure after a commit is raised (OSError: reload the partition, whose load
        finishes the swap)."""
        job, result = cleaned.job, cleaned.result
        try:
            swapped = cleaned.plog.finish_swap(cleaned.pending)
        finally:
            self.in_progress.pop(job.tp, None)
        if not swapped:
            log.info(
                "%s: cleaner swap stopped after %d of %d groups (the log changed meanwhile)",
                job.tp,
                len(cleaned.pending.done),
                len(result.groups),
            )
            return False
        plog = cleaned.plog
        plog.cleaner_checkpoint = result.end_offset
        plog.last_clean_ms = self.clock.wall_ms()
        plog.delete_horizon_ms = result.delete_horizon_ms
        self.cleanings += 1
        removed = result.records_read - result.records_kept
        log.info(
            "Cleaned %s: %d segments -> %d, %d -> %d bytes, removed %d of %d records "
            "(offsets below %d) in %.0f ms",
            job.tp,
            sum(len(g.old_bases) for g in result.groups),
            len(result.groups),
            result.bytes_before,
            result.bytes_after,
            removed,
            result.records_read,
            result.end_offset,
            result.duration_ms,
        )
        return True

    def finish(
        self,
        plog: PartitionLog | None,
        job: CleanJob,
        result: CleanResult,
        crash: swap.CrashHook | None = None,
    ) -> bool:
        """`begin_swap`, `CleanSwap.run` and `end_swap` in this thread (tests, tools)."""
        cleaned = self.begin_swap(plog, job, result, crash)
        if cleaned is None:
            self.discard(job, result)
            return False
        cleaned.run()
        return self.end_swap(cleaned)

    def failed(self, job: CleanJob, exc: BaseException) -> None:
        """A round that raised: forget it; the files it wrote are deleted by the worker."""
        self.in_progress.pop(job.tp, None)
        log.warning("%s: cleaning failed: %s", job.tp, exc)

    def clean_now(
        self, plog: PartitionLog, crash: swap.CrashHook | None = None
    ) -> CleanResult | None:
        """One whole round of `plog` in this thread if it needs one (tests, tools)."""
        if plog.tp in self.in_progress:
            return None
        picked = self.grab_filthiest([plog])
        if picked is None:
            return None
        _, job = picked
        try:
            result = clean_segments(job)
        except BaseException as exc:
            self.failed(job, exc)
            raise
        self.finish(plog, job, result, crash)
        return result
