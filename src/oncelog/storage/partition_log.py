"""The log of one partition: an ordered list of segments plus its offsets.

Offsets: `log_start_offset` (first readable, moved by retention and DeleteRecords),
`log_end_offset` (next offset to assign) and `high_watermark` (the offset below which records
are known replicated). On a single broker every append is fully replicated, so the high
watermark follows the end; a replicated log (`enable_replication`, or `load(replicated=True)`)
keeps it as state, moved by the replication layer (`update_high_watermark`,
`set_high_watermark`).

Appends take validated batches, rewrite their base offsets and write them in one vectored
write (`os.writev`); a follower's appends (`append_as_follower`) store the leader's batches as
they are. Reads return whole stored batches as bytes or a view of them. Each log keeps its
leader epochs (`leader_epoch_cache`, file `leader-epoch-checkpoint`).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, Protocol

from crc32c import crc32c

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.errors import CorruptMessage, InvalidRecord, OffsetOutOfRange
from oncelog.fileio import FileRegion, fsync_dir
from oncelog.producer_state import snapshot
from oncelog.producer_state.append import CompletedTxn, ProducerAppendInfo
from oncelog.producer_state.entry import BatchMetadata, ProducerStateEntry
from oncelog.producer_state.manager import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    SNAPSHOTS_KEPT,
    ProducerStateManager,
)
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import (
    CONTROL_FLAG,
    CRC_START,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    BatchHeader,
    iter_batches,
    parse_header,
    peek_prefix,
    rewrite_offsets,
    set_log_append_time,
    stamp_batch,
)
from oncelog.protocol.records.compression import batch_records
from oncelog.protocol.records.control import ControlRecordError, build_marker, parse_marker_at
from oncelog.protocol.records.record import record_offsets_and_timestamps
from oncelog.storage import swap
from oncelog.storage.leader_epoch_cache import EpochEntry, LeaderEpochCache
from oncelog.storage.segment import DELETED_SUFFIX, LogSegment
from oncelog.storage.txn_index import AbortedTxn
from oncelog.storage.validator import ValidatedRecords
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1
#: `tuple.__new__(AppendInfo, values)`: the NamedTuple of every append without the
#: Python-level `__new__` a NamedTuple call runs (about 2.5x the cost on CPython 3.11).
_new_tuple = tuple.__new__


class _SegmentShape(Protocol):
    """What `segments_unchanged` compares (the cleaner's SegmentRef)."""

    @property
    def base_offset(self) -> int: ...

    @property
    def size(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ProducerSettings:
    """Broker-level producer-state settings every partition shares."""

    expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    tracker: ProducerTracker = field(default_factory=ProducerTracker)


class AppendInfo(NamedTuple):
    """What an append stored (a NamedTuple: one is made for every partition of every
    Produce)."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    duplicate: bool = False


class FollowerAppendInfo(NamedTuple):
    """What `append_as_follower` stored: offsets -1 and no batches when `data` held no
    complete batch. A named tuple: one is made per partition of every replica fetch."""

    first_offset: int
    last_offset: int
    batches: int
    valid_bytes: int
    """Bytes of `data` stored (a partial trailing batch is not)."""
    records: int = 0


class UnexpectedAppendOffset(OffsetOutOfRange):
    """A follower append whose first batch starts below the log end (Kafka's
    UnexpectedAppendOffsetException); nothing was written."""

    def __init__(self, message: str, first_offset: int, last_offset: int) -> None:
        super().__init__(message)
        self.first_offset = first_offset
        self.last_offset = last_offset


@dataclass(slots=True)
class RecoveryCheckpoint:
    """One periodic checkpoint of a partition (log.flush.offset.checkpoint.interval.ms):
    noted on the event loop (`begin_checkpoint`), written in a worker thread
    (`write_checkpoint`), applied on the loop (`finish_checkpoint`)."""

    offset: int
    """The log end when noted: the recovery point and snapshot offset it may give."""
    entries: Sequence[ProducerStateEntry] | None
    """The producer state as of `offset`; None if it was not at the log end then."""
    segments: list[LogSegment]
    """Segments that may hold data not yet fsynced."""
    generation: int
    failed: list[LogSegment] = field(default_factory=list)
    error: str = ""
    snapshot_written: bool = False


@dataclass(slots=True)
class SwappedGroup:
    """One group of a swap done on disk by the worker, for the loop to apply."""

    base_offset: int
    segment: LogSegment
    """The cleaned segment, loaded (by the worker, before the loop sees it)."""
    retired: list[Path]
    """The replaced segments' files, renamed to `.deleted`."""


@dataclass(eq=False, slots=True)
class SegmentSwap:
    """A cleaner's swap of cleaned segments into one log: noted on the event loop
    (`begin_swap`), its files renamed and fsynced in a worker thread (`run_swap`), applied to
    the log's segment list on the loop (`finish_swap`). While it is in flight the replaced
    segments are pinned: retention and DeleteRecords leave them alone, and a truncation,
    close or deletion first settles the swap (`PartitionLog._settle_swap`)."""

    groups: list[tuple[int, tuple[int, ...]]]
    end: int
    old: list[list[LogSegment]]
    """The segments each group replaces (the log's objects, by group)."""
    pinned: set[int]
    """`id()`s of every segment of `old`."""
    snapshot_offset: int
    entries: Sequence[ProducerStateEntry]
    """The producer state as of `snapshot_offset`, written if no snapshot at or above `end`
    exists (a restart after the swap must not replay from below it)."""
    generation: int
    crash: swap.CrashHook
    committed: int = 0
    """Groups whose `.log.cleaned` the worker renamed to `.log.swap` (the commit point)."""
    done: list[SwappedGroup] = field(default_factory=list)
    applied: int = 0
    """Groups of `done` applied to the log's segment list (on the loop)."""
    idle: threading.Event = field(default_factory=threading.Event)
    """Clear while the worker is between a group's commit and its end."""
    snapshot_written: bool = False
    error: Exception | None = None


class ReadResult(NamedTuple):
    """One read's batches and the log's offsets at that moment (a NamedTuple: built per
    read, where a frozen dataclass's field-by-field `__init__` costs about 5x)."""

    records: bytes | memoryview | FileRegion
    high_watermark: int
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int = -1
    aborted: list[AbortedTxn] | None = None
    """Aborted transactions overlapping the records (read_committed reads only)."""


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        producers: ProducerSettings | None = None,
    ) -> None:
        self.directory = directory
        self.tp = tp
        self.config = config
        self.clock = clock
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self._unflushed_messages = 0
        self._last_flush_ms = clock.monotonic_ms()
        self._rolled_unflushed: list[LogSegment] = []
        self._roll_snapshots: list[RecoveryCheckpoint] = []
        """Producer state noted at each roll, for `flush_rolled` to write as a snapshot."""
        self._snapshot_offset = 0
        """Offset of the newest producer snapshot written or loaded (the log start when
        none was): a restart replays producer state from there."""
        self._snapshot_lock = threading.Lock()
        """Orders a worker's snapshot publish against changes that make it wrong."""
        self._generation = 0
        """Bumped (under the lock) by truncation, close and delete: a checkpoint noted
        before is stale."""
        self._snapshot_floor = 0
        """Snapshots below it are unusable: the cleaner rewrote the log below it."""
        self._swap: SegmentSwap | None = None
        """The cleaner's swap in flight, if any (`begin_swap`)."""
        settings = producers or ProducerSettings()
        self.producer_state = ProducerStateManager(tp, settings.expiration_ms, settings.tracker)
        self.cleaner_checkpoint = 0
        """First dirty offset: below it the cleaner has cleaned (`cleaner-offset-checkpoint`)."""
        self.last_clean_ms = -1
        """Wall time of the last cleaning swapped in, -1 if none since start."""
        self.delete_horizon_ms = LONG_MAX
        """Earliest delete horizon of the tombstones and markers the last cleaning kept: once
        it passed, another cleaning can remove them even without new dirty data."""
        self.leader_epoch_cache = LeaderEpochCache(directory)
        """(epoch, start offset) of each leader epoch in this log (`leader-epoch-checkpoint`)."""
        self._replicated = False
        self._high_watermark = 0
        """The stored high watermark; used only when `_replicated`."""
        self.flush_hook: Callable[[Callable[[], None]], None] = _run
        """Runs each segment fsync given to it (the broker's metrics time them; storage
        reads no clock). May be called from a worker thread."""
        self.roll_hook: Callable[[], None] = _no_roll_hook
        """Called after each roll: the roll's snapshot and fsync wait for `flush_rolled`."""
        self.discard_hook: Callable[[list[Path], int], object] = _remove_now
        """Takes the renamed files of deleted segments and the renamed directory of a deleted
        log to remove after the given delay, the log's `file.delete.delay.ms` (at once by
        default; the log manager's worker does it for the broker, as Kafka's scheduler does:
        the delay leaves in-flight reads of a deleted segment their files)."""

    # -- loading -----------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        *,
        clean: bool,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        producers: ProducerSettings | None = None,
        replicated: bool = False,
        high_watermark: int | None = None,
    ) -> PartitionLog:
        """Open a partition directory; after an unclean stop, recover what follows the
        recovery point (truncating torn or garbled tails and rebuilding indexes).

        `replicated`: keep the high watermark as state, starting at `high_watermark` (from
        `replication-offset-checkpoint`) clamped to [log start, log end]; the log start when
        None, as Kafka does for a partition missing from the checkpoint."""
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, tp, config, clock, producers)
        # Leftovers of a crash; one that is gone by the time it is reached is fine.
        for stale in directory.glob("*.tmp"):
            stale.unlink(missing_ok=True)
        for deleted in directory.glob("*" + DELETED_SUFFIX):  # a crash came before removal
            deleted.unlink(missing_ok=True)
        completed = swap.recover(directory)
        if completed:
            log.warning("%s: completed interrupted cleaner swaps at %s", tp, completed)
        bases = sorted(int(p.name[:-4]) for p in directory.glob("*.log") if p.name[:-4].isdigit())
        truncated = False
        for base in bases:
            segment = LogSegment(directory, base, config.index_interval_bytes)
            if truncated or (plog.segments and base < plog.segments[-1].next_offset):
                log.warning("%s: deleting segment %d after a recovered tail", tp, base)
                plog._discard(segment.delete())
                continue
            recover = not clean and _segment_may_hold(base, bases, recovery_point)
            result = segment.load(recover=recover)
            if result.truncated_bytes:
                log.warning(
                    "%s: truncated %d invalid bytes at the tail of segment %d (next offset %d)",
                    tp,
                    result.truncated_bytes,
                    base,
                    result.next_offset,
                )
                truncated = True
            plog._add_segment(segment)
        if not plog.segments:
            plog._add_segment(plog._new_segment(log_start_offset))
        plog.log_start_offset = max(plog.segments[0].base_offset, log_start_offset)
        plog.log_start_offset = min(plog.log_start_offset, plog.log_end_offset)
        if replicated:  # first: the replay notes markers not yet below the high watermark
            plog.enable_replication(
                plog.log_start_offset if high_watermark is None else high_watermark
            )
        plog.rebuild_producer_state()
        plog.recovery_point = (
            plog.log_end_offset if clean else min(recovery_point, plog.log_end_offset)
        )
        plog._load_leader_epochs()
        return plog

    def _load_leader_epochs(self) -> None:
        """Read `leader-epoch-checkpoint`, or rebuild it from the batches when it is missing
        or malformed; entries beyond the log end or below its start go (a checkpoint written
        before a truncation whose own write was lost)."""
        cache = LeaderEpochCache.load(self.directory)
        self.leader_epoch_cache = cache
        if cache.needs_rebuild:
            existed = cache.path is not None and cache.path.exists()
            entries = self._epochs_from_batches()
            cache.replace(entries, flush=False)
            cache.truncate_from_start(self.log_start_offset, flush=False)
            if entries or existed:
                if entries:
                    log.info("%s: rebuilt the leader epoch cache from the log: %s", self.tp, cache)
                self._flush_epochs()
            cache.needs_rebuild = False
            return
        trimmed = cache.truncate_from_end(self.log_end_offset, flush=False)
        trimmed = cache.truncate_from_start(self.log_start_offset, flush=False) or trimmed
        if trimmed:
            self._flush_epochs()

    def _epochs_from_batches(self) -> list[EpochEntry]:
        """The epoch entries the stored batches' partition leader epochs give.

        Epochs never decrease along a log, so a segment whose first and last batch carry the
        same epoch carries only that one: only segments where the epoch changes are walked
        (batch headers, in chunks), the others cost two header reads."""
        entries: list[EpochEntry] = []
        latest = -1

        def note(header: BatchHeader) -> None:
            nonlocal latest
            epoch = header.partition_leader_epoch
            if epoch > latest:
                entries.append(EpochEntry(epoch, header.base_offset))
                latest = epoch

        for segment in self.segments:
            if segment.size < HEADER_SIZE:
                continue
            with open(segment.log_path, "rb") as handle:
                head = handle.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                continue
            first = parse_header(head, 0)
            tail = segment.headers_from(max(segment.index.last_offset, segment.base_offset))
            last = tail[-1][1] if tail else first
            if first.partition_leader_epoch == last.partition_leader_epoch:
                note(first)
                continue
            for _, header, _ in segment.batches_from(segment.base_offset):
                note(header)
        return entries

    def _flush_epochs(self) -> None:
        """Write the epoch file after a truncation or a load's trim, in the background (off
        the event loop, as Kafka's truncateFrom*AsyncFlush): a file still holding removed
        entries is harmless, a load trims them against the log; a failure is logged."""
        self.leader_epoch_cache.flush_soon()

    def _new_segment(self, base_offset: int) -> LogSegment:
        segment = LogSegment(self.directory, base_offset, self.config.index_interval_bytes)
        segment.open()
        segment.next_offset = base_offset
        return segment

    def _add_segment(self, segment: LogSegment) -> None:
        segment.created_ms = self.clock.wall_ms()
        self.segments.append(segment)
        self._bases.append(segment.base_offset)

    def _segment_index(self, offset: int) -> int:
        """Index of the segment that holds `offset` (the first one if it lies below)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return i if i > 0 else 0

    # -- offsets -----------------------------------------------------------------------------

    @property
    def active(self) -> LogSegment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset  # not `active`: one property call, not two

    @property
    def high_watermark(self) -> int:
        """The stored value when replicated; otherwise the log end (a single broker)."""
        return self._high_watermark if self._replicated else self.segments[-1].next_offset

    @property
    def replicated(self) -> bool:
        return self._replicated

    def enable_replication(self, initial_hw: int | None = None) -> None:
        """Keep the high watermark as state from now on, starting at `initial_hw` (clamped to
        [log start, log end]); None keeps the current value (the log end of a single-node
        log, so nothing visible changes at the switch)."""
        hw = self.high_watermark if initial_hw is None else initial_hw
        self._replicated = True
        self._high_watermark = self._clamp_hw(hw)
        self.producer_state.high_watermark = lambda: self._high_watermark

    def _clamp_hw(self, hw: int) -> int:
        return min(max(hw, self.log_start_offset), self.log_end_offset)

    def update_high_watermark(self, hw: int) -> bool:
        """Move the high watermark forward to `hw` clamped to [log start, log end] (a leader
        after its followers' fetches, a follower from the leader's answer); never back.
        Return whether it moved. A log that is not replicated ignores it."""
        if not self._replicated:
            return False
        new = self._clamp_hw(hw)
        if new <= self._high_watermark:
            return False
        self._high_watermark = new
        return True

    def set_high_watermark(self, hw: int) -> int:
        """Set the high watermark in either direction (truncation, becoming a follower),
        clamped to [log start, log end]; return the value set. Ignored (the log end is
        returned) when the log is not replicated."""
        if not self._replicated:
            return self.log_end_offset
        new = self._clamp_hw(hw)
        if new < self._high_watermark:
            log.info("%s: high watermark back from %d to %d", self.tp, self._high_watermark, new)
        self._high_watermark = new
        return new

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # -- appends -----------------------------------------------------------------------------

    def append(
        self, records: ValidatedRecords, leader_epoch: int, *, check_sequence: bool = True
    ) -> AppendInfo:
        """Assign offsets to validated batches and append them as one write.

        Without `check_sequence` (a coordinator writing for a producer) there is no duplicate
        detection and no sequence rule; epochs are still fenced.

        1. A retry whose batches all match cached batches of their producers, stored one
           after another, is a duplicate: answer with the original offsets, write nothing.
           Duplicates mixed with other batches are refused whole (INVALID_RECORD).
        2. Offsets are assigned on a copy of the bytes and each producer's batches are
           checked against a staged copy of its state (epoch, sequence).
        3. The bytes are written; only then is the staged producer state applied.
        """
        if check_sequence and len(records.batches) == 1:
            appended = self._append_next(records, leader_epoch)
            if appended is not None:
                return appended
        duplicate = self._find_duplicate(records) if check_sequence else None
        if duplicate is not None:
            return duplicate
        if self.config.message_timestamp_type == "LogAppendTime":
            max_ts = self.clock.wall_ms()
        else:
            max_ts = max(header.max_timestamp for _, header in records.batches)
        self._maybe_roll(len(records.data), max_ts, records)
        self._assign_epoch(leader_epoch, self.log_end_offset)
        source = memoryview(records.data)
        pieces: list[bytes | bytearray | memoryview] = []
        next_offset = self.log_end_offset
        base_offset = next_offset
        append_time = -1
        if self.config.message_timestamp_type == "LogAppendTime":
            append_time = self.clock.wall_ms()
        assigned: list[tuple[int, BatchHeader]] = []
        staged: dict[int, ProducerAppendInfo] = {}
        written = 0
        for pos, header in records.batches:
            # Only the header changes: it is copied and patched, the records go out as views.
            head = bytearray(source[pos : pos + HEADER_SIZE])
            rewrite_offsets(head, 0, next_offset, leader_epoch)
            body = source[pos + HEADER_SIZE : pos + header.size]
            if append_time >= 0:
                head += body
                set_log_append_time(head, 0, header.size, append_time)
                pieces.append(head)
            else:
                pieces += (head, body)
            stored = parse_header(head, 0)
            if stored.has_producer_id:
                info = staged.get(stored.producer_id)
                if info is None:
                    info = staged[stored.producer_id] = self.producer_state.prepare(
                        stored.producer_id
                    )
                info.append(stored, check_sequence=check_sequence)
            assigned.append((written, stored))
            written += header.size
            next_offset += header.last_offset_delta + 1
        self.active.append(pieces, assigned)
        for info in staged.values():
            self.producer_state.update(info)
        self.producer_state.map_end_offset = next_offset
        self._unflushed_messages += records.record_count
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return AppendInfo(base_offset, next_offset - 1, append_time, self.log_start_offset)

    def _append_next(self, records: ValidatedRecords, leader_epoch: int) -> AppendInfo | None:
        """`append` of a client's one batch in the common case, with fewer steps: no
        producer, or the producer's next batch (`ProducerStateManager.next_in_line`), no
        roll, no new leader epoch, no LogAppendTime. None: `append` takes it the long way."""
        header = records.batches[0][1]
        state = self.producer_state
        slot = 0
        if header.producer_id >= 0:
            slot = state.next_in_line(header)
            if not slot:
                return None
        seg = self.segments[-1]
        base_offset = seg.next_offset
        next_offset = base_offset + header.last_offset_delta + 1
        if (
            leader_epoch > self.leader_epoch_cache.latest_epoch
            or self.config.message_timestamp_type == "LogAppendTime"
            or (
                seg.size
                and self._roll_due(
                    seg,
                    seg.size + header.size,
                    seg.first_batch_timestamp,  # `_rolling_timestamp`, without the call
                    header.max_timestamp,
                    next_offset,
                    seg.index.entries,
                )
            )
        ):
            return None
        data = records.data
        head, stored = stamp_batch(data, base_offset, leader_epoch, header)
        seg.append_batch(head, memoryview(data)[HEADER_SIZE:], stored)
        if slot:
            state.append_next(slot, header, base_offset)
        state.map_end_offset = next_offset
        self._unflushed_messages += header.record_count
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        info = (base_offset, next_offset - 1, -1, self.log_start_offset, False)
        return _new_tuple(AppendInfo, info)

    def _find_duplicate(self, records: ValidatedRecords) -> AppendInfo | None:
        """The answer to a retry, from the cached batches: every batch must be one.

        An answer is one offset range for the whole request, so a request that is only
        partly duplicates (or whose duplicates are not stored one after another) cannot be
        answered truthfully: it is refused whole rather than acknowledged with batches left
        unwritten. Client data is one batch (validator); this guards every other caller.
        """
        cached: list[BatchMetadata] = []
        for _, header in records.batches:
            found = self.producer_state.find_duplicate(header) if header.has_producer_id else None
            if found is not None:
                cached.append(found)
        if not cached:
            return None
        first = records.batches[0][1]
        if len(cached) < len(records.batches) or any(
            b.first_offset != a.last_offset + 1 for a, b in itertools.pairwise(cached)
        ):
            raise InvalidRecord(
                f"{self.tp}: {len(cached)} of {len(records.batches)} batches are duplicates of "
                "batches not stored as one range; one answer cannot acknowledge them"
            )
        log.debug(
            "%s: duplicate batch of producer %d epoch %d seq %d (offset %d, %d batches)",
            self.tp,
            first.producer_id,
            first.producer_epoch,
            first.base_sequence,
            cached[0].first_offset,
            len(cached),
        )
        return AppendInfo(
            cached[0].first_offset,
            cached[-1].last_offset,
            -1,
            self.log_start_offset,
            duplicate=True,
        )

    def rebuild_producer_state(self) -> None:
        """Load the newest usable producer snapshot and replay the batches after it.

        Without one, the state is rebuilt from every stored batch header (with a warning
        when the log holds data, since that is slow on a large log).
        """
        start = self.producer_state.load_snapshot(self.directory, self.log_end_offset)
        if start is None:
            if self.log_end_offset > self.log_start_offset:
                log.warning("%s: no usable producer snapshot; rebuilding from the log", self.tp)
            elif self.log_start_offset > 0:
                # Data was written and deleted (retention, DeleteRecords): whatever producer
                # state it carried is gone, so those producers restart as unknown (KIP-360).
                log.warning(
                    "%s: empty log at offset %d and no producer snapshot; starting with empty "
                    "producer state",
                    self.tp,
                    self.log_start_offset,
                )
            start = self.log_start_offset
        self._snapshot_offset = start
        self.replay_producer_state(start)

    def replay_producer_state(self, start: int) -> None:
        """Replay stored batches from `start`; re-index the aborts their markers record (an
        ABORT whose index entry a crash lost is indexed again, present ones are kept)."""
        for segment in self.segments:
            if segment.next_offset <= start or segment.size == 0:
                continue
            reader = _SegmentReplay(segment, start)
            completed = self.producer_state.replay(reader.headers(), reader.marker)
            for txn in completed:
                if txn.aborted:
                    self._index_abort(txn)
        self.producer_state.map_end_offset = self.log_end_offset

    # -- transactions ------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The LSO: below the first transaction not decided here (open, or its marker not
        yet below the high watermark), and never above the high watermark."""
        hw = self.high_watermark
        first_unstable = self.producer_state.first_unstable_offset(hw)
        return hw if first_unstable is None or first_unstable > hw else first_unstable

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        leader_epoch: int,
    ) -> AppendInfo:
        """Write a COMMIT/ABORT control batch ending `producer_id`'s transaction here.

        1. The marker is checked against the producer's state (older epochs are fenced).
        2. It is written at the log end; the producer's open transaction closes.
        3. An ABORT is recorded in the segment's `.txnindex` for read_committed fetches.
        """
        now = self.clock.wall_ms()
        batch = bytearray(
            build_marker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                timestamp=now,
            )
        )
        self._maybe_roll(len(batch), now, None)
        offset = self.log_end_offset
        info = self.producer_state.prepare(producer_id)
        completed = info.end_transaction(
            producer_epoch, coordinator_epoch, commit, offset, check=True
        )
        self._assign_epoch(leader_epoch, offset)
        rewrite_offsets(batch, 0, offset, leader_epoch)
        self.active.append([batch], [(0, parse_header(batch, 0))])
        if completed.aborted:
            try:
                self._index_abort(completed, closing=True)
            except OSError:
                # Kept without its index entry, the abort would be invisible to read_committed
                # fetches: the marker goes too and the caller retries it.
                self.active.truncate_to(offset)
                raise
        self.producer_state.update(info)
        self.producer_state.map_end_offset = offset + 1
        return AppendInfo(offset, offset, -1, self.log_start_offset)

    def _index_abort(self, txn: CompletedTxn, *, closing: bool = False) -> None:
        """Record an aborted transaction in `.txnindex`; `closing`: its marker was just
        written and the producer state does not show the transaction closed yet."""
        index = self.segments[self._segment_index(txn.last_offset)].txn_index
        if any(
            t.producer_id == txn.producer_id and t.last_offset == txn.last_offset
            for t in index.entries
        ):
            return
        if closing:
            ongoing = self.producer_state.ongoing_transactions()
            ongoing.pop(txn.producer_id, None)
            first_unstable = min(ongoing.values(), default=None)
        else:
            first_unstable = self.producer_state.first_unstable_offset()
        lso = txn.last_offset + 1 if first_unstable is None else first_unstable
        index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper), as read_committed fetches need."""
        out: list[AbortedTxn] = []
        for segment in self.segments[self._segment_index(start) :]:
            for txn in segment.txn_index.entries:
                if txn.last_offset >= start and txn.first_offset < upper:
                    out.append(txn)
                if txn.last_stable_offset >= upper:
                    return out
        return out

    def append_as_stored(self, data: bytes) -> None:
        """Append batches that already carry their offsets, unchecked, without producer state
        (tests); `append_as_follower` is the checked path replication takes."""
        batches = list(iter_batches(data))
        if batches:
            self._maybe_roll(len(data), batches[0][1].max_timestamp, None)
            for _, header in batches:
                self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            self.active.append([data], batches)

    def _assign_epoch(self, epoch: int, start_offset: int) -> None:
        """Note a batch of leader epoch `epoch` at `start_offset` (before it is written, as
        Kafka does: an entry without data is harmless, data without its entry is not).
        Negative epochs (batches stored without one) are not recorded."""
        if epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(epoch, start_offset)

    # -- replication: leader epochs, a follower's appends and truncation ------------------------

    @property
    def latest_leader_epoch(self) -> int:
        """The newest leader epoch of this log, -1 when it has none."""
        return self.leader_epoch_cache.latest_epoch

    def assign_leader_epoch(self, epoch: int, start_offset: int) -> None:
        """Note that leader epoch `epoch` begins at `start_offset` (a new leader: at its log
        end, before it appends anything; Kafka's maybeAssignEpochStartOffset)."""
        self.leader_epoch_cache.assign(epoch, start_offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch, as
        `LeaderEpochCache.end_offset_for` with this log's end; (-1, -1) when undefined."""
        return self.leader_epoch_cache.end_offset_for(epoch, self.log_end_offset)

    def local_end_offset_for_epoch(self, epoch: int) -> int:
        """The end of `epoch` in this log: the start of the next higher epoch, the log end
        for the latest epoch; -1 when no epoch at or below `epoch` is known."""
        first = self.leader_epoch_cache.earliest_entry
        if first is None or epoch < first.epoch:
            return -1
        if epoch >= self.leader_epoch_cache.latest_epoch:
            return self.log_end_offset
        return self.end_offset_for_epoch(epoch)[1]

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> FollowerAppendInfo:
        """Store batches fetched from the leader byte for byte, with their offsets and
        partition leader epochs.

        Every complete batch is checked first (framing, magic, CRC32C, offsets increasing,
        the first not below the log end: `UnexpectedAppendOffset` otherwise), so an error
        writes nothing. A partial batch at the end (a fetch cuts batches at its size limit)
        is ignored. Offsets may leave gaps, as a cleaned (compacted) leader log does. The
        batches roll segments as the leader's appends did, update producer state through the
        same replay recovery uses (aborts are indexed in `.txnindex` as the markers arrive),
        and the leader epoch cache from their partition leader epochs.
        """
        view = memoryview(data)
        batches, markers, valid, records, max_timestamp = self._check_follower_batches(view)
        if not batches:
            return FollowerAppendInfo(-1, -1, 0, 0)
        n = len(batches)
        first = batches[0][1]
        last = batches[-1][1]
        if not self._one_follower_write(first, last, n, valid, max_timestamp):
            self._follower_runs(view, batches, markers)
        else:
            # The common case: everything goes into the active segment in one write.
            latest = self.leader_epoch_cache.latest_epoch
            for _, header in batches:
                if header.partition_leader_epoch > latest:
                    self._assign_epoch(header.partition_leader_epoch, header.base_offset)
                    latest = self.leader_epoch_cache.latest_epoch
            self.active.append([view[:valid]], batches)
            headers = [h for _, h in batches]
            if markers:
                self._replay_appended(headers, markers)
            else:
                self.producer_state.replay_data(headers)
        self.producer_state.map_end_offset = self.log_end_offset
        self._unflushed_messages += records
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return FollowerAppendInfo(
            first.base_offset, last.base_offset + last.last_offset_delta, n, valid, records
        )

    def _one_follower_write(
        self, first: BatchHeader, last: BatchHeader, n: int, size: int, max_timestamp: int
    ) -> bool:
        """Whether all of a follower append goes into the active segment without a roll: the
        roll rule is monotonic in size, timestamp, end offset and index entries, so if the
        whole append does not make the segment roll, no batch of it alone would (checked
        batch by batch otherwise, `_follower_run`)."""
        seg = self.active
        if seg.size > 0:
            rolling_ts = self._rolling_timestamp(seg)
        elif first.base_offset + first.last_offset_delta - seg.base_offset > INT32_MAX:
            return False  # an empty segment far below the batch: replaced first
        elif n == 1:
            return True  # the first batch of an empty segment never rolls it
        else:
            rolling_ts = first.max_timestamp
        return not self._roll_due(
            seg,
            seg.size + size,
            rolling_ts,
            max_timestamp,
            last.base_offset + last.last_offset_delta + 1,
            seg.index.entries + n - 1,
        )

    def _follower_runs(
        self,
        view: memoryview,
        batches: list[tuple[int, BatchHeader]],
        markers: dict[int, tuple[bool, int]],
    ) -> None:
        """Write a follower append run by run, rolling between them as the leader did."""
        i, n = 0, len(batches)
        while i < n:
            j = self._follower_run(batches, i)
            run = batches[i:j]
            start = run[0][0]
            size = run[-1][0] + run[-1][1].size - start
            for _, header in run:
                self._assign_epoch(header.partition_leader_epoch, header.base_offset)
            self.active.append([view[start : start + size]], [(p - start, h) for p, h in run])
            self._replay_appended([h for _, h in run], markers)
            i = j

    def _check_follower_batches(
        self, view: memoryview
    ) -> tuple[list[tuple[int, BatchHeader]], dict[int, tuple[bool, int]], int, int, int]:
        """(position, header) of each complete batch, the markers of the control batches by
        offset, the bytes they span, their records and their largest max timestamp; raise for
        the first invalid one. One pass without per-batch helper calls: it runs on every
        batch a follower stores."""
        batches = list(iter_batches(view))
        valid = batches[-1][0] + batches[-1][1].size if batches else 0
        rest = len(view) - valid
        if rest >= LOG_OVERHEAD and peek_prefix(view, valid)[1] < MIN_BATCH_LENGTH:
            raise CorruptMessage(
                f"{self.tp}: batch at byte {valid} of a follower append has length "
                f"{peek_prefix(view, valid)[1]}"
            )
        markers: dict[int, tuple[bool, int]] = {}
        next_offset = self.log_end_offset
        records = 0
        max_timestamp = -1
        for k, (pos, header) in enumerate(batches):
            base = header.base_offset
            if header.magic != CURRENT_MAGIC:
                raise CorruptMessage(f"{self.tp}: batch at offset {base} has magic v{header.magic}")
            end = pos + header.batch_length + LOG_OVERHEAD
            if crc32c(view[pos + CRC_START : end]) != header.crc:
                raise CorruptMessage(
                    f"{self.tp}: CRC32C mismatch in the batch at offset {base} "
                    f"(byte {pos}) of a follower append"
                )
            delta = header.last_offset_delta
            if delta < 0 or header.record_count < 0:
                raise InvalidRecord(
                    f"{self.tp}: batch at offset {base} has lastOffsetDelta "
                    f"{delta}, {header.record_count} records"
                )
            if base < next_offset:
                if k == 0:
                    raise UnexpectedAppendOffset(
                        f"{self.tp}: follower append starts at offset {base}, "
                        f"below the log end {next_offset} (log start {self.log_start_offset})",
                        base,
                        batches[-1][1].last_offset,
                    )
                raise InvalidRecord(
                    f"{self.tp}: offsets out of order in a follower append: batch at "
                    f"{base} follows one ending at {next_offset - 1}"
                )
            if header.attributes & CONTROL_FLAG and header.producer_id >= 0 and header.record_count:
                # (a control batch without records is a marker the leader's cleaner emptied)
                marker = parse_marker_at(view, pos)
                if marker is None:
                    raise InvalidRecord(
                        f"{self.tp}: control batch at offset {base} is not a transaction marker"
                    )
                markers[base] = marker
            next_offset = base + delta + 1
            records += header.record_count
            max_timestamp = max(max_timestamp, header.max_timestamp)
        return batches, markers, valid, records, max_timestamp

    def _follower_run(self, batches: list[tuple[int, BatchHeader]], i: int) -> int:
        """Roll if the batch at `i` does not fit the active segment, then return the end of
        the run of batches from `i` that go into it in one write: each batch rolls exactly
        when the leader's append of it alone would have."""
        _, first = batches[i]
        seg = self.active
        if seg.size > 0 and self._roll_due(
            seg,
            seg.size + first.size,
            self._rolling_timestamp(seg),
            first.max_timestamp,
            first.next_offset,
            seg.index.entries,
        ):
            self.roll(first.base_offset)
            seg = self.active
        elif seg.size == 0 and first.last_offset - seg.base_offset > INT32_MAX:
            # An empty segment far below a batch after a gap: its index could not hold it.
            self.segments.pop()
            self._bases.pop()
            self._discard(seg.delete())
            self._add_segment(self._new_segment(first.base_offset))
            seg = self.active
        base_size = seg.size
        rolling_ts = self._rolling_timestamp(seg) if seg.size > 0 else first.max_timestamp
        size = first.size
        j = i + 1
        while j < len(batches):
            header = batches[j][1]
            if self._roll_due(
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

    def _replay_appended(
        self, headers: list[BatchHeader], markers: dict[int, tuple[bool, int]]
    ) -> None:
        """Producer state for stored batches, as recovery replays it; each ABORT is indexed
        as its marker is replayed, so its last stable offset is the one the leader noted."""
        state = self.producer_state

        def read_marker(header: BatchHeader) -> tuple[bool, int]:
            return markers[header.base_offset]

        start = 0
        for k, header in enumerate(headers):
            if header.is_control and header.has_producer_id:
                for txn in state.replay(headers[start : k + 1], read_marker):
                    if txn.aborted:
                        self._index_abort(txn)
                start = k + 1
        if start < len(headers):
            state.replay(headers[start:], read_marker)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment, producer snapshot and epoch entry and start an empty log at
        `offset` (a follower whose log end is below the leader's log start)."""
        if offset < 0:
            raise ValueError(f"{self.tp}: cannot start the log at offset {offset}")
        self._settle_swap(truncating=True)
        with self._snapshot_lock:
            self._generation += 1
            for segment in self.segments:
                self._discard(segment.delete())
            self.segments = []
            self._bases = []
            self._rolled_unflushed = []
            self._roll_snapshots = []
            snapshot.delete_after(self.directory, -1)
            self.producer_state.clear()
            self.producer_state.map_end_offset = offset
            self._snapshot_floor = offset  # the cleaned range is gone
            self._add_segment(self._new_segment(offset))
            fsync_dir(self.directory)
        self.log_start_offset = offset
        self.recovery_point = offset
        self._snapshot_offset = offset
        self._unflushed_messages = 0
        self.cleaner_checkpoint = offset  # nothing above it was cleaned
        self.leader_epoch_cache.clear(flush=False)
        try:  # now, as Kafka's clearAndFlush: no entry of the old log may outlive it
            self.leader_epoch_cache.flush()
        except OSError as exc:
            log.warning("%s: writing leader-epoch-checkpoint failed: %s", self.tp, exc)
        if self._replicated:
            self._high_watermark = offset
        log.info("%s: truncated fully, the log starts again at offset %d", self.tp, offset)

    def _maybe_roll(self, size: int, max_timestamp: int, records: ValidatedRecords | None) -> None:
        seg = self.active
        if seg.size == 0:
            return
        last_delta = sum(h.last_offset_delta + 1 for _, h in records.batches) if records else 0
        if self._roll_due(
            seg,
            seg.size + size,
            self._rolling_timestamp(seg),
            max_timestamp,
            self.log_end_offset + last_delta,
            seg.index.entries,
        ):
            self.roll()

    @staticmethod
    def _rolling_timestamp(seg: LogSegment) -> int:
        """The first batch's (max) timestamp, -1 when it has none (`_roll_due`)."""
        return seg.first_batch_timestamp

    def _roll_due(
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
        a timestamp (`rolling_ts`), the new batches' timestamp minus it; otherwise the wall
        clock since the segment was created. Not the wall clock against an old first
        timestamp: records with old timestamps (a replay of history) would then roll a
        segment per append."""
        too_big = size_after > self.config.segment_bytes
        if rolling_ts >= 0:
            waited = max_timestamp - rolling_ts
        else:
            waited = self.clock.wall_ms() - seg.created_ms
        too_old = waited > self._max_segment_ms()
        index_full = (index_entries + 1) * 8 > self.config.segment_index_bytes
        offset_overflow = end_offset - seg.base_offset > INT32_MAX
        return too_big or too_old or index_full or offset_overflow

    def _max_segment_ms(self) -> int:
        """segment.ms, or max.compaction.lag.ms when lower on a compacted topic: the active
        segment is never cleaned, so it must roll for its records to be (KIP-354)."""
        if not self.config.compact:
            return self.config.segment_ms
        return min(self.config.segment_ms, self.config.max_compaction_lag_ms)

    def roll(self, at: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or at `at` beyond it: the base offset
        of a follower's next batch after a gap); the old one is flushed in background."""
        if self.active.size == 0:
            return self.active
        old = self.active
        old.write_indexes()
        old.release_reserve()
        self._rolled_unflushed.append(old)
        self._add_segment(self._new_segment(max(self.log_end_offset, at or 0)))
        # The producer snapshot at the roll is noted here and written by `flush_rolled` (a
        # worker thread, after the rolled segment's fsync): written here it cost the event
        # loop two fsyncs per roll.
        state = self.producer_state
        self._roll_snapshots.append(
            RecoveryCheckpoint(state.map_end_offset, state.frozen_entries(), [], self._generation)
        )
        log.debug("%s: rolled new segment at offset %d", self.tp, self.log_end_offset)
        self.roll_hook()
        return old

    def flush_rolled(self) -> None:
        """fsync segments rolled since the last call and move the recovery point past them,
        then write the producer snapshots noted at those rolls (a worker thread, or the loop
        when a flush or close asks for it)."""
        pending, self._rolled_unflushed = self._rolled_unflushed, []
        for segment in pending:
            with contextlib.suppress(OSError, ValueError):
                self.flush_hook(segment.flush)
                self.recovery_point = max(self.recovery_point, segment.next_offset)
        noted, self._roll_snapshots = self._roll_snapshots, []
        for cp in noted:
            if cp.generation != self._generation:
                continue  # truncated, closed or deleted since the roll
            self.write_checkpoint(cp)
            if cp.error:
                log.warning("%s: producer snapshot at roll failed: %s", self.tp, cp.error)
                continue
            with self._snapshot_lock:
                if cp.snapshot_written and cp.generation == self._generation:
                    self._snapshot_offset = max(self._snapshot_offset, cp.offset)

    def flush(self) -> None:
        self.flush_rolled()
        self.flush_hook(self.active.flush)
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self.clock.monotonic_ms()

    def maybe_flush_by_time(self) -> None:
        if self._unflushed_messages and (
            self.clock.monotonic_ms() - self._last_flush_ms >= self.config.flush_ms
        ):
            self.flush()

    # -- periodic checkpoint: bounds what an unclean restart re-validates and replays ----------

    def begin_checkpoint(self) -> RecoveryCheckpoint | None:
        """Note the log end and the producer state there (event loop, so the two agree);
        None if nothing was appended since the last checkpoint, roll or load."""
        end = self.log_end_offset
        if end <= min(self.recovery_point, self._snapshot_offset):
            return None
        state = self.producer_state
        entries = state.frozen_entries() if state.map_end_offset == end else None
        unflushed = [s for s in self.segments if s.next_offset > self.recovery_point]
        return RecoveryCheckpoint(end, entries, unflushed, self._generation)

    def write_checkpoint(self, cp: RecoveryCheckpoint) -> None:
        """fsync the noted segments, then write the snapshot at `cp.offset` (worker thread).

        Never raises for IO: the outcome is left in `cp` for `finish_checkpoint`. The
        snapshot is published only if the log was not truncated, closed or cleaned past
        it meanwhile, since the next start would trust a snapshot that no longer matches.
        """
        for segment in cp.segments:
            try:
                self.flush_hook(segment.flush)
            except (OSError, ValueError) as exc:  # closed meanwhile (retention, cleaner)
                cp.failed.append(segment)
                cp.error = cp.error or f"fsync of segment {segment.base_offset}: {exc}"
        if cp.failed:
            return
        pending = None
        try:
            fsync_dir(self.directory)  # new segment files' names
            if cp.entries is None:
                return
            pending = snapshot.write_pending(
                self.directory, cp.offset, snapshot.encode(cp.offset, cp.entries)
            )
            with self._snapshot_lock:
                if cp.generation != self._generation or cp.offset < self._snapshot_floor:
                    return
                snapshot.publish(pending, self.directory, cp.offset)
                pending = None
            fsync_dir(self.directory)
            cp.snapshot_written = True
            snapshot.delete_older(self.directory, SNAPSHOTS_KEPT)
        except OSError as exc:
            cp.error = f"writing producer snapshot {cp.offset}: {exc}"
        finally:
            if pending is not None:
                pending.unlink(missing_ok=True)

    def finish_checkpoint(self, cp: RecoveryCheckpoint) -> bool:
        """Move the recovery point to the noted offset if everything below it is on disk
        (event loop); return whether it moved. A failure is logged and retried next time."""
        if cp.generation != self._generation:
            return False  # truncated, closed or deleted meanwhile
        if cp.error:
            live = set(map(id, self.segments))
            if not cp.failed or any(id(s) in live for s in cp.failed):
                log.warning(
                    "%s: checkpoint at offset %d failed, recovery point stays at %d: %s",
                    self.tp,
                    cp.offset,
                    self.recovery_point,
                    cp.error,
                )
            return False
        self.recovery_point = max(self.recovery_point, cp.offset)
        if cp.snapshot_written:
            self._snapshot_offset = max(self._snapshot_offset, cp.offset)
        return True

    # -- reads -------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        upper_bound: int | None = None,
        *,
        min_one: bool = True,
        read_committed: bool = False,
        for_follower: bool = False,
        regions: bool = False,
    ) -> ReadResult:
        """Stored batches from `offset` below `upper_bound` (default: the high watermark).

        With `min_one` the first batch is returned even if it is larger than `max_bytes`.
        `for_follower`: a follower's fetch, bounded by the log end, not the high watermark.
        `regions`: a large read may come back as a FileRegion of the segment (for the wire
        only: Fetch answers; see LogSegment.read_region).
        """
        end = self.segments[-1].next_offset  # the log end, read once
        hw = self._high_watermark if self._replicated else end
        lso = self.last_stable_offset
        start = self.log_start_offset
        limit = end if for_follower else hw
        bound = limit if upper_bound is None else min(upper_bound, limit)
        if read_committed:
            bound = min(bound, lso)
        if offset < start or offset > end:
            raise OffsetOutOfRange(f"{self.tp}: offset {offset} outside [{start}, {end}]")
        data: bytes | memoryview | FileRegion = b""
        data_end = -1
        if offset < bound:
            max_offset = bound if bound < end else None
            i = self._segment_index(offset)
            while i < len(self.segments) and not data:
                segment = self.segments[i]
                read = segment.read_region if regions else segment.read_batches
                data, data_end = read(offset, max_bytes, min_one=min_one, max_offset=max_offset)
                i += 1
        aborted = None
        if read_committed:
            aborted = self.aborted_transactions(offset, data_end) if data else []
        return _new_tuple(ReadResult, (data, hw, start, end, lso, aborted))

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp`.

        A batch whose max timestamp matches may hold the matching records only below the log
        start offset; the search then goes on with the next batch, as Kafka's does.
        """
        start = self.log_start_offset
        for segment in self.segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start:
                continue
            while (found := segment.find_offset_by_timestamp(timestamp, start)) is not None:
                hit, start = self._record_at_or_after(segment, found[0], timestamp)
                if hit is not None:
                    return hit
        return None

    def _record_at_or_after(
        self, segment: LogSegment, offset: int, timestamp: int
    ) -> tuple[tuple[int, int] | None, int]:
        """(first record at or after `offset` with timestamp >= `timestamp` in the batch
        holding `offset`, or None; the offset after that batch)."""
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

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record holding it), for ListOffsets v7+ -3.

        KIP-734 asks for the record's own offset, not its batch's last offset (Kafka fixed
        the same mistake in KAFKA-16310), so the one batch holding the maximum is decoded.
        """
        best: tuple[int, LogSegment, BatchHeader] | None = None
        for segment in self.segments:
            if segment.max_timestamp > (best[0] if best else -1):
                for _, header in segment.headers_from(segment.base_offset):
                    if (
                        header.max_timestamp > (best[0] if best else -1)
                        and header.last_offset >= self.log_start_offset
                    ):
                        best = (header.max_timestamp, segment, header)
        if best is None:
            return -1, -1
        max_ts, segment, header = best
        if header.log_append_time:
            # Every record carries the batch's append time: the first one holds it.
            return max_ts, max(header.base_offset, self.log_start_offset)
        batch = segment.read(header.base_offset, HEADER_SIZE)
        found = (-1, -1)
        for rec_offset, rec_ts in record_offsets_and_timestamps(
            batch_records(batch, 0, header),
            header.base_offset,
            header.base_timestamp,
            header.record_count,
        ):
            if rec_offset >= self.log_start_offset and rec_ts > found[0]:
                found = (rec_ts, rec_offset)
        return found

    # -- deletion ----------------------------------------------------------------------------

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset to `offset` (DeleteRecords); whole segments below go."""
        if offset > self.high_watermark or offset < 0:
            raise OffsetOutOfRange(
                f"{self.tp}: cannot delete before {offset}; high watermark is {self.high_watermark}"
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self._delete_segments_below_start()
            self._epochs_from_start()
        return self.log_start_offset

    def _epochs_from_start(self) -> None:
        if self.leader_epoch_cache.truncate_from_start(self.log_start_offset, flush=False):
            self._flush_epochs()

    def _delete_segments_below_start(self) -> None:
        """Segments a cleaner swap in flight replaces stay until it is applied (`finish_swap`
        calls this again): the start offset hides them meanwhile."""
        while (
            len(self.segments) > 1
            and self.segments[1].base_offset <= self.log_start_offset
            and not self._pinned(self.segments[0])
        ):
            self._delete_oldest()

    def _delete_oldest(self) -> None:
        segment = self.segments.pop(0)
        self._bases.pop(0)
        if segment in self._rolled_unflushed:
            self._rolled_unflushed.remove(segment)
        self._discard(segment.delete())
        self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
        self._epochs_from_start()

    def apply_retention(self) -> int:
        """Delete whole segments beyond retention.ms / retention.bytes; return how many."""
        deleted = 0
        if "delete" not in self.config.cleanup_policy:
            return 0  # compact only: the cleaner removes records, retention never does
        now = self.clock.wall_ms()
        retention_ms = self.config.retention_ms
        # Only segments wholly below the high watermark go (Kafka's rule; on a single broker
        # the high watermark is the log end, so every segment qualifies).
        if retention_ms >= 0:
            while (
                self.segments
                and self.segments[0].next_offset <= self.high_watermark
                and not self._pinned(self.segments[0])  # swapped by the cleaner: next round
                and self._expired(self.segments[0], now, retention_ms)
            ):
                if len(self.segments) == 1:
                    if self.active.size == 0:
                        break
                    self.roll()
                self._delete_oldest()
                deleted += 1
        retention_bytes = self.config.retention_bytes
        if retention_bytes >= 0:
            total = self.size_bytes
            while (
                len(self.segments) > 1
                and self.segments[0].next_offset <= self.high_watermark
                and not self._pinned(self.segments[0])
                and total - self.segments[0].size >= retention_bytes
            ):
                total -= self.segments[0].size
                self._delete_oldest()
                deleted += 1
        return deleted

    def _expired(self, segment: LogSegment, now: int, retention_ms: int) -> bool:
        if segment.size == 0:
            # a closed segment the cleaner emptied holds nothing to keep
            return segment is not self.active
        largest = (
            segment.max_timestamp if segment.max_timestamp >= 0 else segment.last_modified_ms()
        )
        return now - largest > retention_ms

    # -- cleaning (the cleaner decides; the log reports and swaps) ------------------------------

    def cleanable_offsets(self, now: int) -> tuple[int, int]:
        """(first dirty offset, first uncleanable offset), as Kafka's cleaner manager: never
        the active segment, never at or past the last stable offset, never a segment whose
        newest record is younger than min.compaction.lag.ms."""
        first_dirty = self.cleaner_checkpoint
        if first_dirty < self.log_start_offset or first_dirty > self.log_end_offset:
            first_dirty = self.log_start_offset
        end = min(self.last_stable_offset, self.active.base_offset)
        lag = self.config.min_compaction_lag_ms
        if lag > 0:
            for segment in self.segments[:-1]:
                if segment.next_offset > first_dirty and segment.max_timestamp > now - lag:
                    end = min(end, segment.base_offset)
                    break
        return first_dirty, max(first_dirty, end)

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

    def dirty_ratio(self) -> float:
        """Dirty bytes / cleanable bytes now (0 when nothing is cleanable)."""
        first_dirty, end = self.cleanable_offsets(self.clock.wall_ms())
        clean, dirty = self.cleanable_bytes(first_dirty, end)
        return dirty / (clean + dirty) if clean + dirty else 0.0

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

    def segments_unchanged(self, refs: Iterable[_SegmentShape], end: int) -> bool:
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

    def replace_segments(
        self,
        groups: list[tuple[int, tuple[int, ...]]],
        end: int,
        crash: swap.CrashHook | None = None,
    ) -> bool:
        """`begin_swap`, `run_swap` and `finish_swap` in this thread (tests, tools)."""
        pending = self.begin_swap(groups, end, crash)
        self.run_swap(pending)
        return self.finish_swap(pending)

    def begin_swap(
        self,
        groups: list[tuple[int, tuple[int, ...]]],
        end: int,
        crash: swap.CrashHook | None = None,
    ) -> SegmentSwap:
        """Note a swap of cleaned segments (`<base>.log.cleaned`, ...) for the segments each
        group was made of (event loop; no IO). The segments must be the log's (the caller
        checked `segments_unchanged`); they stay pinned until `finish_swap`."""
        if self._swap is not None:
            raise RuntimeError(f"{self.tp}: a cleaner swap is already in flight")
        by_base = {s.base_offset: s for s in self.segments[:-1]}
        old = [[by_base[b] for b in old_bases] for _, old_bases in groups]
        state = self.producer_state
        pending = SegmentSwap(
            groups=groups,
            end=end,
            old=old,
            pinned={id(s) for group in old for s in group},
            snapshot_offset=state.map_end_offset,
            entries=state.frozen_entries(),
            generation=self._generation,
            crash=crash or _no_crash,
        )
        pending.idle.set()
        self._swap = pending
        return pending

    def run_swap(self, pending: SegmentSwap) -> None:
        """The file work of a swap (a worker thread; never raises: the outcome is left in
        `pending` for `finish_swap`).

        1. A producer snapshot at or above `end` unless one exists, then the snapshots below
           `end` go: a replay from one of them would miss batches the cleaner removed (a
           transaction's data and marker).
        2. Group by group, `swap.commit` under the lock, if the log was not truncated, closed
           or deleted since `begin_swap` (those stop the swap before the next commit), then
           `swap.complete` (renames, three directory fsyncs) and the new segment's load.

        The loop keeps reading the replaced segments through their open descriptors."""
        directory = self.directory
        try:
            if not self._swap_snapshot(pending):
                return
            for (base, old_bases), old in zip(pending.groups, pending.old, strict=True):
                with self._snapshot_lock:
                    if pending.generation != self._generation:
                        return
                    swap.commit(directory, base)
                    pending.committed += 1
                    pending.idle.clear()
                pending.crash("log-swap")
                group = self._complete_group(pending, base, old_bases, old)
                with self._snapshot_lock:
                    pending.done.append(group)
                    pending.idle.set()
        except Exception as exc:  # reported by finish_swap, on the loop
            pending.error = exc
        finally:
            pending.idle.set()
            if pending.error is None or not pending.committed:
                # Stopped, or failed before its commit: the groups never committed are
                # forgotten. After a commit the files stay as they are for a load to finish.
                left = [b for b, _ in pending.groups[pending.committed :]]
                with contextlib.suppress(OSError):
                    swap.discard_cleaned(directory, left)

    def _complete_group(
        self,
        pending: SegmentSwap,
        base: int,
        old_bases: tuple[int, ...],
        old: list[LogSegment],
    ) -> SwappedGroup:
        """Steps 2 and 3 of a committed group (`swap.complete`) and the cleaned segment's
        load; safe to run again after a failure part-way."""
        retired = swap.complete(self.directory, base, old_bases, pending.crash)
        new = LogSegment(self.directory, base, self.config.index_interval_bytes)
        new.load(recover=False)
        new.created_ms = old[0].created_ms
        return SwappedGroup(base, new, retired)

    def _swap_snapshot(self, pending: SegmentSwap) -> bool:
        """Step 1 of `run_swap`; False if the log changed meanwhile (the swap stops)."""
        directory = self.directory
        end = pending.end
        if pending.generation != self._generation:  # (checked again under the lock)
            return False
        if pending.snapshot_offset >= end and not any(
            offset >= end for offset in snapshot.list_snapshots(directory)
        ):
            # The roll's snapshot at or above `end` may not be written yet (flush_rolled
            # writes it in a worker): a restart after this swap must find one.
            offset = pending.snapshot_offset
            tmp: Path | None = snapshot.write_pending(
                directory, offset, snapshot.encode(offset, pending.entries)
            )
            try:
                with self._snapshot_lock:
                    if pending.generation != self._generation:
                        return False
                    assert tmp is not None
                    snapshot.publish(tmp, directory, offset)
                    tmp = None
            finally:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
            fsync_dir(directory)
            pending.snapshot_written = True
        with self._snapshot_lock:
            if pending.generation != self._generation:
                return False
            self._snapshot_floor = max(self._snapshot_floor, end)
            snapshot.delete_before(directory, end)
            snapshot.delete_older(directory, SNAPSHOTS_KEPT)
        return True

    def finish_swap(self, pending: SegmentSwap) -> bool:
        """Apply the groups the worker swapped to the segment list (event loop); True if the
        whole swap went in and the log was not truncated, closed or deleted meanwhile (the
        groups swapped before such a change stay: each is whole). A failure before any
        commit is logged and forgotten (False); one after a commit is raised, the files
        being left for a load to finish (`swap.recover`)."""
        self._apply_swapped(pending)
        if self._swap is pending:
            self._swap = None
            self._delete_segments_below_start()  # DeleteRecords left the pinned segments
        if pending.snapshot_written and pending.generation == self._generation:
            self._snapshot_offset = max(self._snapshot_offset, pending.snapshot_offset)
        if pending.error is not None:
            if pending.committed:
                raise pending.error
            log.warning("%s: cleaner swap failed before its commit: %s", self.tp, pending.error)
            return False
        # A truncation meanwhile may have cut below the cleaned range: the cleaner's
        # checkpoint must not move past it, even if every group went in before.
        return len(pending.done) == len(pending.groups) and pending.generation == self._generation

    def _apply_swapped(self, pending: SegmentSwap) -> None:
        """Put the groups the worker finished in place of the segments they replace."""
        for group in pending.done[pending.applied :]:
            old = pending.old[pending.applied]
            first = next(i for i, s in enumerate(self.segments) if s is old[0])
            for segment in old:
                segment.close()
                if segment in self._rolled_unflushed:
                    self._rolled_unflushed.remove(segment)
            self._discard(group.retired)
            self.segments[first : first + len(old)] = [group.segment]
            self._bases[first : first + len(old)] = [group.base_offset]
            pending.applied += 1

    def _settle_swap(self, *, truncating: bool = False) -> None:
        """Before a truncation, close or deletion: stop the swap in flight before its next
        commit, wait for a committed group to be complete (its renames and fsyncs: the only
        wait on the loop, and only when such a change meets a swap half-way) and apply what
        was swapped. Afterwards the worker touches none of the log's files (only its own
        `.cleaned` and `.tmp` ones).

        A group the worker committed but failed to complete (a disk error) is completed here.
        If that fails again, a truncation must not go ahead: the next load would finish the
        swap over the truncated log, putting back records cut away and dropping any appended
        since. It raises instead, the swap stays noted, and `finish_swap` has the partition
        reloaded, which completes the swap first. A close or deletion goes ahead (the load
        after a close completes the swap on the log as it was)."""
        pending = self._swap
        if pending is None:
            return
        with self._snapshot_lock:
            self._generation += 1
        pending.idle.wait()
        failed: OSError | None = None
        if pending.error is not None and pending.committed > len(pending.done):
            try:
                self._complete_failed_group(pending)
            except OSError as exc:
                log.error("%s: completing a cleaner swap failed again: %s", self.tp, exc)
                failed = exc
        self._apply_swapped(pending)
        if failed is not None and truncating:
            raise failed
        self._swap = None

    def _complete_failed_group(self, pending: SegmentSwap) -> None:
        """Complete the group the worker committed before it failed; the swap is then whole
        (nothing is left for a load to finish) and the later groups' files go."""
        at = len(pending.done)
        base, old_bases = pending.groups[at]
        pending.done.append(self._complete_group(pending, base, old_bases, pending.old[at]))
        pending.error = None
        left = [b for b, _ in pending.groups[at + 1 :]]
        with contextlib.suppress(OSError):  # the worker kept them for the load
            swap.discard_cleaned(self.directory, left)

    def _pinned(self, segment: LogSegment) -> bool:
        """True if a swap in flight replaces `segment` (retention must leave it)."""
        return self._swap is not None and id(segment) in self._swap.pinned

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after `offset` (a follower diverging from its leader;
        recovery tests). Epoch entries starting at or after it go, and the high watermark
        comes down to the new end. An offset at or beyond the end only drops epoch entries
        at the end (an epoch begun without data, as Kafka's); one below the first segment
        empties the log and starts it there (`truncate_fully_and_start_at`)."""
        if offset < 0:
            raise ValueError(f"{self.tp}: cannot truncate to offset {offset}")
        if offset >= self.log_end_offset:
            if self.leader_epoch_cache.truncate_from_end(self.log_end_offset, flush=False):
                self._flush_epochs()
            return
        self._settle_swap(truncating=True)
        if offset < self.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        with self._snapshot_lock:
            self._generation += 1
            while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
                segment = self.segments.pop()
                self._bases.pop()
                self._discard(segment.delete())
            self.active.truncate_to(offset)
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self.rebuild_producer_state()  # deletes the snapshots beyond the new end
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.cleaner_checkpoint = min(self.cleaner_checkpoint, self.log_end_offset)
        if self.leader_epoch_cache.truncate_from_end(self.log_end_offset, flush=False):
            self._flush_epochs()
        if self._replicated:
            self._high_watermark = self._clamp_hw(self._high_watermark)

    def close(self, *, flush: bool = True) -> None:
        self._settle_swap()
        with self._snapshot_lock:
            self._generation += 1
        if flush:
            self.flush()
            self.producer_state.take_snapshot(self.directory)
        # The broker-wide tracker's slots go back (a log reopened after a failed cleaner swap
        # would otherwise hold its producers twice, and keep this object alive).
        self.producer_state.clear()
        self.leader_epoch_cache.close(flush=flush)
        for segment in self.segments:
            segment.close()

    def _discard(self, paths: list[Path]) -> None:
        self.discard_hook(paths, self.config.file_delete_delay_ms)

    def delete(self) -> None:
        """Close the log and rename its directory to `<dir>.<uuid>-delete` (Kafka's name) for
        `discard_hook` to remove: unlinking gigabytes of segments takes the kernel a while,
        too long for the event loop, and a crash half way leaves a name no load takes for a
        partition (a topic created again under the same name starts empty)."""
        self._settle_swap()  # no swap renames files in the directory once it is renamed
        self.leader_epoch_cache.close()
        with self._snapshot_lock:
            self._generation += 1
        self.producer_state.clear()
        for segment in self.segments:
            segment.close(release=False)
        retired = retire_directory(self.directory)
        if retired is not None:
            self._discard([retired])


def retire_directory(directory: Path) -> Path | None:
    """Rename a partition directory to `<dir>.<uuid>-delete` (Kafka's name), which no load
    takes for a partition; the new path, or None if there was no directory."""
    retired = directory.with_name(f"{directory.name}.{uuid.uuid4().hex}-delete")
    try:
        directory.rename(retired)
    except FileNotFoundError:
        return None
    return retired


def _no_crash(step: str) -> None:
    return None


def _no_roll_hook() -> None:
    return None


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


class _SegmentReplay:
    """A segment's batches from `start` for a producer-state replay, read in chunks, with each
    marker read as its chunk is walked (not one read per marker)."""

    def __init__(self, segment: LogSegment, start: int) -> None:
        self.segment = segment
        self.start = start
        self._markers: dict[int, tuple[bool, int] | None] = {}

    def headers(self) -> Iterator[BatchHeader]:
        for _, header, marker in self.segment.batches_from(
            max(self.start, self.segment.base_offset), markers=True
        ):
            if header.base_offset >= self.start:
                if header.is_control and header.record_count:
                    self._markers[header.base_offset] = marker
                yield header

    def marker(self, header: BatchHeader) -> tuple[bool, int]:
        marker = self._markers.pop(header.base_offset, None)
        if marker is None:
            raise ControlRecordError(f"control batch at {header.base_offset} is not a marker")
        return marker


def _segment_may_hold(base: int, bases: list[int], recovery_point: int) -> bool:
    """True if the segment starting at `base` may hold data past the recovery point."""
    i = bases.index(base)
    next_base = bases[i + 1] if i + 1 < len(bases) else None
    return next_base is None or next_base > recovery_point
