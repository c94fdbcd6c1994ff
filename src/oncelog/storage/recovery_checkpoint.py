"""The periodic checkpoint of a partition (log.flush.offset.checkpoint.interval.ms) and the
producer snapshots noted at rolls: what bounds an unclean restart's re-validation and replay.

A checkpoint is noted on the event loop (`begin`: the log end and the producer state there),
written in a worker thread (`write`: fsyncs, then the snapshot, published under the log's
lock only if the log was not truncated, closed, deleted or cleaned past it meanwhile) and
applied on the loop (`finish`: the recovery point moves). A roll notes one the same way and
`write_roll_snapshots` writes it after the rolled segment's fsync.

`SnapshotGuard` is what orders a worker's snapshot publish against the changes that make it
wrong: the lock, the log's generation (bumped by truncation, close and deletion), the newest
snapshot's offset and the floor below which the cleaner made snapshots unusable.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from oncelog.fileio import fsync_dir
from oncelog.producer_state import snapshot
from oncelog.producer_state.entry import ProducerStateEntry
from oncelog.producer_state.manager import SNAPSHOTS_KEPT, ProducerStateManager
from oncelog.storage.local_log import LocalLog
from oncelog.storage.segment import LogSegment

log = logging.getLogger(__name__)


class SnapshotGuard:
    __slots__ = ("floor", "generation", "lock", "offset")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        """Orders a worker's snapshot publish against changes that make it wrong."""
        self.generation = 0
        """Bumped (under the lock) by truncation, close and delete: a checkpoint noted
        before is stale."""
        self.offset = 0
        """Offset of the newest producer snapshot written or loaded (the log start when
        none was): a restart replays producer state from there."""
        self.floor = 0
        """Snapshots below it are unusable: the cleaner rewrote the log below it."""

    def bump(self) -> None:
        """A truncation, close or deletion: whatever was noted before is stale."""
        with self.lock:
            self.generation += 1


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


def note_roll(state: ProducerStateManager, guard: SnapshotGuard) -> RecoveryCheckpoint:
    """The producer snapshot at a roll, noted on the loop (the producer entries as of the
    roll offset) for `write_roll_snapshots` to write: written at the roll it cost the event
    loop two fsyncs per roll."""
    return RecoveryCheckpoint(state.map_end_offset, state.frozen_entries(), [], guard.generation)


def begin(
    local: LocalLog, state: ProducerStateManager, guard: SnapshotGuard
) -> RecoveryCheckpoint | None:
    """Note the log end and the producer state there (event loop, so the two agree); None
    if nothing was appended since the last checkpoint, roll or load."""
    end = local.log_end_offset
    if end <= min(local.recovery_point, guard.offset):
        return None
    entries = state.frozen_entries() if state.map_end_offset == end else None
    unflushed = [s for s in local.segments if s.next_offset > local.recovery_point]
    return RecoveryCheckpoint(end, entries, unflushed, guard.generation)


def write(local: LocalLog, guard: SnapshotGuard, cp: RecoveryCheckpoint) -> None:
    """fsync the noted segments, then write the snapshot at `cp.offset` (worker thread).

    Never raises for IO: the outcome is left in `cp` for `finish`. The snapshot is
    published only if the log was not truncated, closed or cleaned past it meanwhile, since
    the next start would trust a snapshot that no longer matches.
    """
    for segment in cp.segments:
        try:
            local.hooks.flush(segment.flush)
        except (OSError, ValueError) as exc:  # closed meanwhile (retention, cleaner)
            cp.failed.append(segment)
            cp.error = cp.error or f"fsync of segment {segment.base_offset}: {exc}"
    if cp.failed:
        return
    directory = local.directory
    pending = None
    try:
        fsync_dir(directory)  # new segment files' names
        if cp.entries is None:
            return
        pending = snapshot.write_pending(
            directory, cp.offset, snapshot.encode(cp.offset, cp.entries)
        )
        with guard.lock:
            if cp.generation != guard.generation or cp.offset < guard.floor:
                return
            snapshot.publish(pending, directory, cp.offset)
            pending = None
        fsync_dir(directory)
        cp.snapshot_written = True
        snapshot.delete_older(directory, SNAPSHOTS_KEPT)
    except OSError as exc:
        cp.error = f"writing producer snapshot {cp.offset}: {exc}"
    finally:
        if pending is not None:
            pending.unlink(missing_ok=True)


def finish(local: LocalLog, guard: SnapshotGuard, cp: RecoveryCheckpoint) -> bool:
    """Move the recovery point to the noted offset if everything below it is on disk
    (event loop); return whether it moved. A failure is logged and retried next time."""
    if cp.generation != guard.generation:
        return False  # truncated, closed or deleted meanwhile
    if cp.error:
        live = set(map(id, local.segments))
        if not cp.failed or any(id(s) in live for s in cp.failed):
            log.warning(
                "%s: checkpoint at offset %d failed, recovery point stays at %d: %s",
                local.tp,
                cp.offset,
                local.recovery_point,
                cp.error,
            )
        return False
    local.recovery_point = max(local.recovery_point, cp.offset)
    if cp.snapshot_written:
        guard.offset = max(guard.offset, cp.offset)
    return True


def write_roll_snapshots(
    local: LocalLog, guard: SnapshotGuard, noted: list[RecoveryCheckpoint]
) -> None:
    """Write the producer snapshots noted at rolls (after the rolled segments' fsync)."""
    for cp in noted:
        if cp.generation != guard.generation:
            continue  # truncated, closed or deleted since the roll
        write(local, guard, cp)
        if cp.error:
            log.warning("%s: producer snapshot at roll failed: %s", local.tp, cp.error)
            continue
        with guard.lock:
            if cp.snapshot_written and cp.generation == guard.generation:
                guard.offset = max(guard.offset, cp.offset)
