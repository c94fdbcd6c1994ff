"""A log's side of a cleaner swap: which segments the swap in flight replaces, the worker's
file work and its application to the segment list (`swap.py` holds the crash-safe renames).

A swap is noted on the event loop (`SwapState.begin`), its files renamed and fsynced in a
worker thread (`SwapState.run`), applied to the log's segment list on the loop
(`SwapState.apply`, then `outcome`). While it is in flight the replaced segments are pinned:
retention and DeleteRecords leave them alone, and a truncation, close or deletion first
settles the swap (`SwapState.settle`). `PartitionLog.swaps` is a log's; its `finish_swap`
applies a swap (and deletes what DeleteRecords left pinned).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.fileio import fsync_dir
from oncelog.producer_state import snapshot
from oncelog.producer_state.entry import ProducerStateEntry
from oncelog.producer_state.manager import SNAPSHOTS_KEPT, ProducerStateManager
from oncelog.storage import swap
from oncelog.storage.local_log import LocalLog
from oncelog.storage.recovery_checkpoint import SnapshotGuard
from oncelog.storage.segment import LogSegment

log = logging.getLogger(__name__)


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
    (`begin`), its files renamed and fsynced in a worker thread (`run`), applied to
    the log's segment list on the loop (`finish_swap`). While it is in flight the replaced
    segments are pinned: retention and DeleteRecords leave them alone, and a truncation,
    close or deletion first settles the swap (`SwapState.settle`)."""

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


class SwapState:
    """The cleaner's swap in flight on one log, if any."""

    __slots__ = ("_guard", "_local", "_state", "in_flight")

    def __init__(self, local: LocalLog, guard: SnapshotGuard, state: ProducerStateManager) -> None:
        self._local = local
        self._guard = guard
        self._state = state
        self.in_flight: SegmentSwap | None = None

    def pinned(self, segment: LogSegment) -> bool:
        """True if a swap in flight replaces `segment` (retention must leave it)."""
        return self.in_flight is not None and id(segment) in self.in_flight.pinned

    def begin(
        self,
        groups: list[tuple[int, tuple[int, ...]]],
        end: int,
        crash: swap.CrashHook | None = None,
    ) -> SegmentSwap:
        """Note a swap of cleaned segments (`<base>.log.cleaned`, ...) for the segments each
        group was made of (event loop; no IO). The segments must be the log's (the caller
        checked `segments_unchanged`); they stay pinned until `finish_swap`."""
        if self.in_flight is not None:
            raise RuntimeError(f"{self._local.tp}: a cleaner swap is already in flight")
        by_base = {s.base_offset: s for s in self._local.segments[:-1]}
        old = [[by_base[b] for b in old_bases] for _, old_bases in groups]
        state = self._state
        pending = SegmentSwap(
            groups=groups,
            end=end,
            old=old,
            pinned={id(s) for group in old for s in group},
            snapshot_offset=state.map_end_offset,
            entries=state.frozen_entries(),
            generation=self._guard.generation,
            crash=crash or _no_crash,
        )
        pending.idle.set()
        self.in_flight = pending
        return pending

    def run(self, pending: SegmentSwap) -> None:
        """The file work of a swap (a worker thread; never raises: the outcome is left in
        `pending` for `finish_swap`).

        1. A producer snapshot at or above `end` unless one exists, then the snapshots below
           `end` go: a replay from one of them would miss batches the cleaner removed (a
           transaction's data and marker).
        2. Group by group, `swap.commit` under the lock, if the log was not truncated, closed
           or deleted since `begin` (those stop the swap before the next commit), then
           `swap.complete` (renames, three directory fsyncs) and the new segment's load.

        The loop keeps reading the replaced segments through their open descriptors."""
        directory = self._local.directory
        guard = self._guard
        try:
            if not self._swap_snapshot(pending):
                return
            for (base, old_bases), old in zip(pending.groups, pending.old, strict=True):
                with guard.lock:
                    if pending.generation != guard.generation:
                        return
                    swap.commit(directory, base)
                    pending.committed += 1
                    pending.idle.clear()
                pending.crash("log-swap")
                group = self._complete_group(pending, base, old_bases, old)
                with guard.lock:
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
        local = self._local
        retired = swap.complete(local.directory, base, old_bases, pending.crash)
        new = LogSegment(local.directory, base, local.config.index_interval_bytes)
        new.load(recover=False)
        new.created_ms = old[0].created_ms
        return SwappedGroup(base, new, retired)

    def _swap_snapshot(self, pending: SegmentSwap) -> bool:
        """Step 1 of `run`; False if the log changed meanwhile (the swap stops)."""
        directory = self._local.directory
        guard = self._guard
        end = pending.end
        if pending.generation != guard.generation:  # (checked again under the lock)
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
                with guard.lock:
                    if pending.generation != guard.generation:
                        return False
                    assert tmp is not None
                    snapshot.publish(tmp, directory, offset)
                    tmp = None
            finally:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
            fsync_dir(directory)
            pending.snapshot_written = True
        with guard.lock:
            if pending.generation != guard.generation:
                return False
            guard.floor = max(guard.floor, end)
            snapshot.delete_before(directory, end)
            snapshot.delete_older(directory, SNAPSHOTS_KEPT)
        return True

    def apply(self, pending: SegmentSwap) -> bool:
        """Apply the groups the worker swapped to the segment list (event loop); True if
        `pending` was the swap in flight, now over (its segments are no longer pinned)."""
        self._apply_swapped(pending)
        if self.in_flight is pending:
            self.in_flight = None
            return True
        return False

    def outcome(self, pending: SegmentSwap) -> bool:
        """After `apply`: True if the whole swap went in and the log was not truncated,
        closed or deleted meanwhile (the groups swapped before such a change stay: each is
        whole). A failure before any commit is logged and forgotten (False); one after a
        commit is raised, the files being left for a load to finish (`swap.recover`)."""
        guard = self._guard
        if pending.snapshot_written and pending.generation == guard.generation:
            guard.offset = max(guard.offset, pending.snapshot_offset)
        if pending.error is not None:
            if pending.committed:
                raise pending.error
            log.warning(
                "%s: cleaner swap failed before its commit: %s", self._local.tp, pending.error
            )
            return False
        # A truncation meanwhile may have cut below the cleaned range: the cleaner's
        # checkpoint must not move past it, even if every group went in before.
        return len(pending.done) == len(pending.groups) and pending.generation == guard.generation

    def _apply_swapped(self, pending: SegmentSwap) -> None:
        """Put the groups the worker finished in place of the segments they replace."""
        local = self._local
        for group in pending.done[pending.applied :]:
            old = pending.old[pending.applied]
            first = next(i for i, s in enumerate(local.segments) if s is old[0])
            for segment in old:
                segment.close()
                local.forget_rolled(segment)
            local.discard(group.retired)
            local.replace(first, len(old), group.segment)
            pending.applied += 1

    def settle(self, *, truncating: bool = False) -> None:
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
        pending = self.in_flight
        if pending is None:
            return
        self._guard.bump()
        pending.idle.wait()
        failed: OSError | None = None
        if pending.error is not None and pending.committed > len(pending.done):
            try:
                self._complete_failed_group(pending)
            except OSError as exc:
                log.error("%s: completing a cleaner swap failed again: %s", self._local.tp, exc)
                failed = exc
        self._apply_swapped(pending)
        if failed is not None and truncating:
            raise failed
        self.in_flight = None

    def _complete_failed_group(self, pending: SegmentSwap) -> None:
        """Complete the group the worker committed before it failed; the swap is then whole
        (nothing is left for a load to finish) and the later groups' files go."""
        at = len(pending.done)
        base, old_bases = pending.groups[at]
        pending.done.append(self._complete_group(pending, base, old_bases, pending.old[at]))
        pending.error = None
        left = [b for b, _ in pending.groups[at + 1 :]]
        with contextlib.suppress(OSError):  # the worker kept them for the load
            swap.discard_cleaned(self._local.directory, left)


def _no_crash(step: str) -> None:
    return None
