"""The log of one partition: its segments plus its offsets, producers and leader epochs
(Kafka's UnifiedLog).

Offsets: `log_start_offset` (first readable, moved by retention and DeleteRecords),
`log_end_offset` (next offset to assign) and `high_watermark` (the offset below which records
are known replicated). On a single broker every append is fully replicated, so the high
watermark follows the end; a replicated log (`enable_replication`, or `load(replicated=True)`)
keeps it as state, moved by the replication layer (`update_high_watermark`,
`set_high_watermark`).

Every write is one `append(records, leader_epoch, origin)` (`AppendOrigin`): a client's or a
coordinator's validated batches get their base offsets rewritten and go out in one vectored
write (`os.writev`), a coordinator's `EndTxnMarker` becomes a control batch, and a follower's
batches (REPLICATION) are stored as the leader wrote them. Reads return whole stored batches
as bytes or a view of them. Each log keeps its leader epochs (`leader_epoch_cache`, file
`leader-epoch-checkpoint`).

The segments themselves (list, roll, reads, truncation, deletion, fsyncs) are `LocalLog`'s
(`local_log.py`); opening from disk is `log_loader.py`'s, the periodic checkpoint
`recovery_checkpoint.py`'s and the cleaner's swap `swap_state.py`'s.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal, overload

from oncelog.clock import Clock
from oncelog.config import LogConfig
from oncelog.errors import OffsetOutOfRange
from oncelog.fileio import FileRegion
from oncelog.producer_state import snapshot
from oncelog.producer_state.append import CompletedTxn, ProducerAppendInfo
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.protocol.records.batch import (
    HEADER_SIZE,
    BatchHeader,
    parse_header,
    rewrite_offsets,
    set_log_append_time,
    stamp_batch,
)
from oncelog.protocol.records.control import build_marker
from oncelog.storage import follower_append, log_loader, recovery_checkpoint
from oncelog.storage.leader_epoch_cache import LeaderEpochCache
from oncelog.storage.local_log import LocalLog, LogHooks
from oncelog.storage.log_info import (
    AppendInfo,
    AppendOrigin,
    EndTxnMarker,
    FollowerAppendInfo,
    ProducerSettings,
    ReadResult,
    UnexpectedAppendOffset,
)
from oncelog.storage.producer_appends import find_duplicate, index_abort
from oncelog.storage.recovery_checkpoint import RecoveryCheckpoint, SnapshotGuard
from oncelog.storage.segment import LogSegment
from oncelog.storage.swap_state import SegmentSwap, SwapState
from oncelog.storage.txn_index import AbortedTxn
from oncelog.storage.validator import ValidatedRecords
from oncelog.types import TopicPartition

__all__ = [
    "AppendInfo",
    "AppendOrigin",
    "EndTxnMarker",
    "PartitionLog",
    "ProducerSettings",
    "ReadResult",
    "RecoveryCheckpoint",
    "SegmentSwap",
    "UnexpectedAppendOffset",
]

log = logging.getLogger(__name__)

LONG_MAX = 2**63 - 1
#: `tuple.__new__(AppendInfo, values)`: the NamedTuple of every append without the
#: Python-level `__new__` a NamedTuple call runs (about 2.5x the cost on CPython 3.11).
_new_tuple = tuple.__new__


class PartitionLog:
    def __init__(
        self,
        directory: Path,
        tp: TopicPartition,
        config: LogConfig,
        clock: Clock,
        producers: ProducerSettings | None = None,
        hooks: LogHooks | None = None,
    ) -> None:
        self.directory = directory
        self.tp = tp
        self.clock = clock
        self.local = LocalLog(directory, tp, config, clock, hooks)
        self.log_start_offset = 0
        self._roll_snapshots: list[RecoveryCheckpoint] = []
        """Producer state noted at each roll, for `flush_rolled` to write as a snapshot."""
        self._snapshots = SnapshotGuard()
        """The lock, generation, newest snapshot and snapshot floor (`recovery_checkpoint`)."""
        settings = producers or ProducerSettings()
        self.producer_state = ProducerStateManager(
            tp, settings.expiration_ms, settings.tracker, self._replicated_high_watermark
        )
        self.swaps = SwapState(self.local, self._snapshots, self.producer_state)
        """The cleaner's swap in flight, if any (`swaps.begin`, `swaps.run`, `finish_swap`)."""
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

    # -- loading (log_loader.py) -------------------------------------------------------------

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
        hooks: LogHooks | None = None,
    ) -> PartitionLog:
        """Open a partition directory; after an unclean stop, recover what follows the
        recovery point (truncating torn or garbled tails and rebuilding indexes).

        `replicated`: keep the high watermark as state, starting at `high_watermark` (from
        `replication-offset-checkpoint`) clamped to [log start, log end]; the log start when
        None, as Kafka does for a partition missing from the checkpoint."""
        directory.mkdir(parents=True, exist_ok=True)
        plog = cls(directory, tp, config, clock, producers, hooks)
        loader = log_loader.LogLoader(plog.local, clean, recovery_point, log_start_offset)
        plog.log_start_offset = loader.load_segments()
        if replicated:  # first: the replay notes markers not yet below the high watermark
            plog.enable_replication(
                plog.log_start_offset if high_watermark is None else high_watermark
            )
        plog.rebuild_producer_state()
        end = plog.log_end_offset
        plog.local.recovery_point = end if clean else min(recovery_point, end)
        plog.leader_epoch_cache = log_loader.load_leader_epochs(plog.local, plog.log_start_offset)
        return plog

    def rebuild_producer_state(self) -> None:
        """Load the newest usable producer snapshot, replay the batches after it (`log_loader`)."""
        self._snapshots.offset = log_loader.rebuild_producer_state(
            self.local, self.producer_state, self.log_start_offset, self.index_abort
        )

    # -- the segments (local_log.py) ---------------------------------------------------------

    @property
    def segments(self) -> list[LogSegment]:
        return self.local.segments

    @property
    def active(self) -> LogSegment:
        return self.local.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.local.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return self.local.size_bytes

    @property
    def config(self) -> LogConfig:
        return self.local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self.local.config = config

    @property
    def recovery_point(self) -> int:
        """Below it everything is known fsynced; a load re-validates from there."""
        return self.local.recovery_point

    # -- the high watermark ------------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        """The stored value when replicated; otherwise the log end (a single broker)."""
        return self._high_watermark if self._replicated else self.local.segments[-1].next_offset

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

    def _replicated_high_watermark(self) -> int | None:
        return self._high_watermark if self._replicated else None

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

    # -- appends -----------------------------------------------------------------------------

    @overload
    def append(
        self,
        records: ValidatedRecords | EndTxnMarker,
        leader_epoch: int,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo: ...

    @overload
    def append(
        self,
        records: bytes | bytearray | memoryview,
        leader_epoch: int = -1,
        *,
        origin: Literal[AppendOrigin.REPLICATION],
    ) -> FollowerAppendInfo: ...

    def append(
        self,
        records: ValidatedRecords | EndTxnMarker | bytes | bytearray | memoryview,
        leader_epoch: int = -1,
        origin: AppendOrigin = AppendOrigin.CLIENT,
    ) -> AppendInfo | FollowerAppendInfo:
        """The one write to this log; `origin` (`AppendOrigin`) says what is checked: a
        client's validated batches, a coordinator's records or transaction marker (in
        `leader_epoch`), or the leader's stored batches on a follower."""
        if origin is AppendOrigin.CLIENT and type(records) is ValidatedRecords:
            if len(records.batches) == 1:  # the produce path's common case first
                appended = self._append_next(records, leader_epoch)
                if appended is not None:
                    return appended
            return self._append_validated(records, leader_epoch, True)
        if origin is AppendOrigin.REPLICATION and not isinstance(
            records, (ValidatedRecords, EndTxnMarker)
        ):
            return follower_append.append_replicated(self, records)
        if origin is AppendOrigin.COORDINATOR:
            if isinstance(records, EndTxnMarker):
                return self._append_marker(records, leader_epoch)
            if isinstance(records, ValidatedRecords):
                return self._append_validated(records, leader_epoch, False)
        raise TypeError(f"{self.tp}: a {type(records).__name__} cannot be appended as {origin}")

    def _append_validated(
        self, records: ValidatedRecords, leader_epoch: int, check_sequence: bool
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
        if check_sequence:
            duplicate = find_duplicate(records, self.producer_state, self.tp, self.log_start_offset)
            if duplicate is not None:
                return duplicate
        local = self.local
        config = local.config
        if config.message_timestamp_type == "LogAppendTime":
            max_ts = self.clock.wall_ms()
        else:
            max_ts = max(header.max_timestamp for _, header in records.batches)
        self._maybe_roll(len(records.data), max_ts, records)
        self.note_epoch(leader_epoch, self.log_end_offset)
        source = memoryview(records.data)
        pieces: list[bytes | bytearray | memoryview] = []
        next_offset = self.log_end_offset
        base_offset = next_offset
        append_time = -1
        if config.message_timestamp_type == "LogAppendTime":
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
        local.segments[-1].append(pieces, assigned)
        for info in staged.values():
            self.producer_state.update(info)
        self.producer_state.map_end_offset = next_offset
        local.unflushed_messages += records.record_count
        if local.unflushed_messages >= config.flush_messages:
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
        local = self.local
        config = local.config
        seg = local.segments[-1]
        base_offset = seg.next_offset
        next_offset = base_offset + header.last_offset_delta + 1
        if (
            leader_epoch > self.leader_epoch_cache.latest_epoch
            or config.message_timestamp_type == "LogAppendTime"
            or (
                seg.size
                and local.roll_due(
                    seg,
                    seg.size + header.size,
                    seg.first_batch_timestamp,
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
        local.unflushed_messages += header.record_count
        if local.unflushed_messages >= config.flush_messages:
            self.flush()
        info = (base_offset, next_offset - 1, -1, self.log_start_offset, False)
        return _new_tuple(AppendInfo, info)

    # -- transactions ------------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The LSO: below the first transaction not decided here (open, or its marker not
        yet below the high watermark), and never above the high watermark."""
        hw = self.high_watermark
        first_unstable = self.producer_state.first_unstable_offset(hw)
        return hw if first_unstable is None or first_unstable > hw else first_unstable

    def _append_marker(self, marker: EndTxnMarker, leader_epoch: int) -> AppendInfo:
        """Write a COMMIT/ABORT control batch ending the producer's transaction here.

        1. The marker is checked against the producer's state (older epochs are fenced).
        2. It is written at the log end; the producer's open transaction closes.
        3. An ABORT is recorded in the segment's `.txnindex` for read_committed fetches.
        """
        now = self.clock.wall_ms()
        producer_id, producer_epoch = marker.producer_id, marker.producer_epoch
        coordinator_epoch, commit = marker.coordinator_epoch, marker.commit
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
        self.note_epoch(leader_epoch, offset)
        rewrite_offsets(batch, 0, offset, leader_epoch)
        self.active.append([batch], [(0, parse_header(batch, 0))])
        if completed.aborted:
            try:
                self.index_abort(completed, closing=True)
            except OSError:
                # Kept without its index entry, the abort would be invisible to read_committed
                # fetches: the marker goes too and the caller retries it.
                self.active.truncate_to(offset)
                raise
        self.producer_state.update(info)
        self.producer_state.map_end_offset = offset + 1
        return AppendInfo(offset, offset, -1, self.log_start_offset)

    def index_abort(self, txn: CompletedTxn, *, closing: bool = False) -> None:
        """Record an aborted transaction in `.txnindex` (`producer_appends`)."""
        index = self.local.segment_for(txn.last_offset).txn_index
        index_abort(index, self.producer_state, txn, closing)

    def aborted_transactions(self, start: int, upper: int) -> list[AbortedTxn]:
        """Aborted transactions overlapping [start, upper), as read_committed fetches need."""
        return self.local.aborted_transactions(start, upper)

    def note_epoch(self, epoch: int, start_offset: int) -> None:
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
        return self.leader_epoch_cache.local_end_offset_for(epoch, self.log_end_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment, producer snapshot and epoch entry and start an empty log at
        `offset` (a follower whose log end is below the leader's log start)."""
        if offset < 0:
            raise ValueError(f"{self.tp}: cannot start the log at offset {offset}")
        self.swaps.settle(truncating=True)
        local = self.local
        guard = self._snapshots
        with guard.lock:
            guard.generation += 1
            local.delete_all_segments()
            self._roll_snapshots = []
            snapshot.delete_after(self.directory, -1)
            self.producer_state.clear()
            self.producer_state.map_end_offset = offset
            guard.floor = offset  # the cleaned range is gone
            local.start_at(offset)
        self.log_start_offset = offset
        guard.offset = offset
        self.cleaner_checkpoint = offset  # nothing above it was cleaned
        try:  # now, as Kafka's clearAndFlush: no entry of the old log may outlive it
            self.leader_epoch_cache.clear()
        except OSError as exc:
            log.warning("%s: writing leader-epoch-checkpoint failed: %s", self.tp, exc)
        if self._replicated:
            self._high_watermark = offset
        log.info("%s: truncated fully, the log starts again at offset %d", self.tp, offset)

    # -- rolls and flushes (the rules are LocalLog's) -----------------------------------------

    def _maybe_roll(self, size: int, max_timestamp: int, records: ValidatedRecords | None) -> None:
        local = self.local
        last_delta = sum(h.last_offset_delta + 1 for _, h in records.batches) if records else 0
        if local.should_roll(size, max_timestamp, local.log_end_offset + last_delta):
            self.roll()

    def roll(self, at: int | None = None) -> LogSegment:
        """Start a new active segment at the log end (or at `at` beyond it: the base offset
        of a follower's next batch after a gap); the old one is flushed in background."""
        old = self.local.roll(at)
        if old is None:
            return self.active
        # The producer snapshot at the roll is noted here and written by `flush_rolled` (a
        # worker thread, after the rolled segment's fsync).
        self._roll_snapshots.append(
            recovery_checkpoint.note_roll(self.producer_state, self._snapshots)
        )
        self.local.hooks.roll()
        return old

    def flush_rolled(self) -> None:
        """fsync segments rolled since the last call and move the recovery point past them,
        then write the producer snapshots noted at those rolls (a worker thread, or the loop
        when a flush or close asks for it)."""
        self.local.flush_rolled_segments()
        noted, self._roll_snapshots = self._roll_snapshots, []
        recovery_checkpoint.write_roll_snapshots(self.local, self._snapshots, noted)

    def flush(self) -> None:
        self.flush_rolled()
        self.local.flush_active()

    def maybe_flush_by_time(self) -> None:
        if self.local.flush_due():
            self.flush()

    # -- periodic checkpoint (recovery_checkpoint.py) ------------------------------------------

    def begin_checkpoint(self) -> RecoveryCheckpoint | None:
        """Note the log end and the producer state there (`recovery_checkpoint.begin`)."""
        return recovery_checkpoint.begin(self.local, self.producer_state, self._snapshots)

    def write_checkpoint(self, cp: RecoveryCheckpoint) -> None:
        """fsyncs and the snapshot at `cp.offset`, in a worker thread (`...write`)."""
        recovery_checkpoint.write(self.local, self._snapshots, cp)

    def finish_checkpoint(self, cp: RecoveryCheckpoint) -> bool:
        """Move the recovery point if everything below it is on disk (`...finish`)."""
        return recovery_checkpoint.finish(self.local, self._snapshots, cp)

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
        local = self.local
        end = local.segments[-1].next_offset  # the log end, read once
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
            data, data_end = local.read(offset, max_bytes, max_offset, min_one, regions)
        aborted = None
        if read_committed:
            aborted = self.aborted_transactions(offset, data_end) if data else []
        return _new_tuple(ReadResult, (data, hw, start, end, lso, aborted))

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= `timestamp` at or after
        the log start (`LocalLog.offset_for_timestamp`)."""
        return self.local.offset_for_timestamp(timestamp, self.log_start_offset)

    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(max timestamp, offset of the first record holding it), for ListOffsets v7+ -3
        (`LocalLog.max_timestamp_and_offset`)."""
        return self.local.max_timestamp_and_offset(self.log_start_offset)

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
        # Written in the background, as Kafka's truncateFrom*AsyncFlush: a file still holding
        # removed entries is harmless (a load trims them against the log).
        if self.leader_epoch_cache.truncate_from_start(self.log_start_offset, flush=False):
            self.leader_epoch_cache.flush_soon()

    def _epochs_to_end(self) -> None:
        if self.leader_epoch_cache.truncate_from_end(self.log_end_offset, flush=False):
            self.leader_epoch_cache.flush_soon()

    def _delete_segments_below_start(self) -> None:
        """Segments a cleaner swap in flight replaces stay until it is applied (`finish_swap`
        calls this again): the start offset hides them meanwhile."""
        if self.local.delete_below(self.log_start_offset, self.swaps.pinned):
            self._start_at_first_segment()

    def _start_at_first_segment(self) -> None:
        """After segments were deleted: the log starts no lower than the first one left."""
        self.log_start_offset = max(self.log_start_offset, self.local.segments[0].base_offset)
        self._epochs_from_start()

    def apply_retention(self) -> int:
        """Delete segments beyond retention.ms / retention.bytes (`LocalLog`); how many."""
        if "delete" not in self.config.cleanup_policy:
            return 0  # compact only: the cleaner removes records, retention never does
        deleted = self.local.apply_retention(self.high_watermark, self.swaps.pinned, self.roll)
        if deleted:
            self._start_at_first_segment()
        return deleted

    # -- cleaning (the cleaner decides; the log reports and swaps: swap_state.py) ---------------

    def cleanable_offsets(self, now: int) -> tuple[int, int]:
        """(first dirty offset, first uncleanable offset), as Kafka's cleaner manager: never
        the active segment, never at or past the last stable offset, never a segment whose
        newest record is younger than min.compaction.lag.ms."""
        first_dirty = self.cleaner_checkpoint
        if first_dirty < self.log_start_offset or first_dirty > self.log_end_offset:
            first_dirty = self.log_start_offset
        end = self.local.uncleanable_from(first_dirty, self.last_stable_offset, now)
        return first_dirty, max(first_dirty, end)

    def dirty_ratio(self) -> float:
        """Dirty bytes / cleanable bytes now (0 when nothing is cleanable)."""
        first_dirty, end = self.cleanable_offsets(self.clock.wall_ms())
        clean, dirty = self.local.cleanable_bytes(first_dirty, end)
        return dirty / (clean + dirty) if clean + dirty else 0.0

    def finish_swap(self, pending: SegmentSwap) -> bool:
        """Apply the groups the worker swapped (event loop); True if the whole swap went in
        and the log was not truncated, closed or deleted meanwhile (`SwapState.outcome`)."""
        if self.swaps.apply(pending):
            self._delete_segments_below_start()  # DeleteRecords left the pinned segments
        return self.swaps.outcome(pending)

    # -- truncation, close, deletion ---------------------------------------------------------

    def truncate_to(self, offset: int) -> None:
        """Drop everything at or after `offset` (a follower diverging from its leader;
        recovery tests). Epoch entries starting at or after it go, and the high watermark
        comes down to the new end. An offset at or beyond the end only drops epoch entries
        at the end (an epoch begun without data, as Kafka's); one below the first segment
        empties the log and starts it there (`truncate_fully_and_start_at`)."""
        if offset < 0:
            raise ValueError(f"{self.tp}: cannot truncate to offset {offset}")
        if offset >= self.log_end_offset:
            self._epochs_to_end()
            return
        self.swaps.settle(truncating=True)
        local = self.local
        if offset < local.segments[0].base_offset:
            self.truncate_fully_and_start_at(offset)
            return
        guard = self._snapshots
        with guard.lock:
            guard.generation += 1
            local.truncate_to(offset)
            self.log_start_offset = min(self.log_start_offset, self.log_end_offset)
            self.rebuild_producer_state()  # deletes the snapshots beyond the new end
        local.recovery_point = min(local.recovery_point, self.log_end_offset)
        self.cleaner_checkpoint = min(self.cleaner_checkpoint, self.log_end_offset)
        self._epochs_to_end()
        if self._replicated:
            self._high_watermark = self._clamp_hw(self._high_watermark)

    def close(self, *, flush: bool = True) -> None:
        self.swaps.settle()
        self._snapshots.bump()
        if flush:
            self.flush()
            self.producer_state.take_snapshot(self.directory)
        # The broker-wide tracker's slots go back (a log reopened after a failed cleaner swap
        # would otherwise hold its producers twice, and keep this object alive).
        self.producer_state.clear()
        self.leader_epoch_cache.close(flush=flush)
        self.local.close()

    def delete(self) -> None:
        """Close the log and rename its directory to `<dir>.<uuid>-delete` (Kafka's name) for
        `hooks.discard` to remove: unlinking gigabytes of segments takes the kernel a while,
        too long for the event loop, and a crash half way leaves a name no load takes for a
        partition (a topic created again under the same name starts empty)."""
        self.swaps.settle()  # no swap renames files in the directory once it is renamed
        self.leader_epoch_cache.close()
        self._snapshots.bump()
        self.producer_state.clear()
        self.local.delete()
