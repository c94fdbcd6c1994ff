"""Opening a partition log from disk (Kafka's LogLoader).

`LogLoader.load_segments` removes a crash's leftovers (`.tmp`, `.deleted`), finishes or
forgets an interrupted cleaner swap (`swap.recover`), loads the segments and, after an
unclean stop, re-validates those that may hold data past the recovery point, truncating a
torn or garbled tail (and deleting any segment after it). `rebuild_producer_state` loads the
newest usable producer snapshot and replays the batches after it (also after a truncation);
`load_leader_epochs` reads `leader-epoch-checkpoint` or rebuilds it from the batches.
`PartitionLog.load` runs them in order.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator

from oncelog.producer_state.append import CompletedTxn
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.protocol.records.batch import HEADER_SIZE, BatchHeader, parse_header
from oncelog.protocol.records.control import ControlRecordError
from oncelog.storage import swap
from oncelog.storage.leader_epoch_cache import EpochEntry, LeaderEpochCache
from oncelog.storage.local_log import LocalLog
from oncelog.storage.segment import DELETED_SUFFIX, LogSegment

log = logging.getLogger(__name__)


class LogLoader:
    def __init__(
        self, local: LocalLog, clean: bool, recovery_point: int, log_start_offset: int
    ) -> None:
        self.local = local
        self.clean = clean
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset

    def load_segments(self) -> int:
        """Fill `local` with the directory's segments, recovering what follows the recovery
        point after an unclean stop; return the log start offset (within the segments)."""
        local = self.local
        directory, tp = local.directory, local.tp
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
            segment = LogSegment(directory, base, local.config.index_interval_bytes)
            if truncated or (local.segments and base < local.segments[-1].next_offset):
                log.warning("%s: deleting segment %d after a recovered tail", tp, base)
                local.discard(segment.delete())
                continue
            recover = not self.clean and _segment_may_hold(base, bases, self.recovery_point)
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
            local.add_segment(segment)
        if not local.segments:
            local.add_segment(local.new_segment(self.log_start_offset))
        start = max(local.segments[0].base_offset, self.log_start_offset)
        return min(start, local.log_end_offset)


def rebuild_producer_state(
    local: LocalLog,
    state: ProducerStateManager,
    log_start_offset: int,
    index_abort: Callable[[CompletedTxn], None],
) -> int:
    """Load the newest usable producer snapshot and replay the batches after it; return the
    offset replayed from (the snapshot's, or the log start).

    Without one, the state is rebuilt from every stored batch header (with a warning when
    the log holds data, since that is slow on a large log).
    """
    end = local.log_end_offset
    start = state.load_snapshot(local.directory, end)
    if start is None:
        if end > log_start_offset:
            log.warning("%s: no usable producer snapshot; rebuilding from the log", local.tp)
        elif log_start_offset > 0:
            # Data was written and deleted (retention, DeleteRecords): whatever producer
            # state it carried is gone, so those producers restart as unknown (KIP-360).
            log.warning(
                "%s: empty log at offset %d and no producer snapshot; starting with empty "
                "producer state",
                local.tp,
                log_start_offset,
            )
        start = log_start_offset
    replay_producer_state(local, state, start, index_abort)
    return start


def replay_producer_state(
    local: LocalLog,
    state: ProducerStateManager,
    start: int,
    index_abort: Callable[[CompletedTxn], None],
) -> None:
    """Replay stored batches from `start`; re-index the aborts their markers record (an
    ABORT whose index entry a crash lost is indexed again, present ones are kept)."""
    for segment in local.segments:
        if segment.next_offset <= start or segment.size == 0:
            continue
        reader = _SegmentReplay(segment, start)
        completed = state.replay(reader.headers(), reader.marker)
        for txn in completed:
            if txn.aborted:
                index_abort(txn)
    state.map_end_offset = local.log_end_offset


def load_leader_epochs(local: LocalLog, log_start_offset: int) -> LeaderEpochCache:
    """Read `leader-epoch-checkpoint`, or rebuild it from the batches when it is missing
    or malformed; entries beyond the log end or below its start go (a checkpoint written
    before a truncation whose own write was lost). A changed file is written in the
    background (`flush_soon`)."""
    cache = LeaderEpochCache.load(local.directory)
    if cache.needs_rebuild:
        existed = cache.path is not None and cache.path.exists()
        entries = epochs_from_batches(local.segments)
        cache.replace(entries, flush=False)
        cache.truncate_from_start(log_start_offset, flush=False)
        if entries or existed:
            if entries:
                log.info("%s: rebuilt the leader epoch cache from the log: %s", local.tp, cache)
            cache.flush_soon()
        cache.needs_rebuild = False
        return cache
    trimmed = cache.truncate_from_end(local.log_end_offset, flush=False)
    trimmed = cache.truncate_from_start(log_start_offset, flush=False) or trimmed
    if trimmed:
        cache.flush_soon()
    return cache


def epochs_from_batches(segments: list[LogSegment]) -> list[EpochEntry]:
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

    for segment in segments:
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
