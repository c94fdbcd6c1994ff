"""A partition's leader epochs and the offset each began at (KIP-101, KIP-279).

Kept in `leader-epoch-checkpoint` in the partition directory, in Kafka's text format:

    0
    <count>
    <epoch> <start offset>
    ...

The file is rewritten atomically (tmp + fsync + rename + directory fsync) whenever the
entries change; it is tiny and changes only when the leadership does, when the log is
truncated or its start moves. A missing or malformed file loads as an empty cache with
`needs_rebuild` set: the owner rebuilds it from the partition leader epochs of its batches.

When it is written, as Kafka's `LeaderEpochFileCache` (KAFKA-15046): a new entry (`assign`)
before the data of its epoch, on the caller's thread (data without its entry is not
harmless: a stale file lacking it would answer OffsetForLeaderEpoch wrongly after a crash);
a truncation (`flush_soon`) by a background thread, off the event loop, since a file that
still holds entries a truncation removed is harmless: a load drops entries beyond the log end
or below its start. Writers take turns under a lock and each writes the entries of its
moment, so the file never goes back to older entries; a closed cache (its partition deleted
or reloaded) writes nothing more.

Semantics follow Kafka's `LeaderEpochFileCache`:

- `assign(epoch, start)` ignores an epoch older than the latest one and the latest epoch
  again at the same or a later offset; the latest epoch at a lower offset replaces it; a newer
  epoch whose start lies at or below the start of entries before it removes those (a conflicting
  tail left by an earlier leader whose data was truncated).
- `end_offset_for(requested, log_end_offset)` answers OffsetForLeaderEpoch: see the method.
- `truncate_from_end(offset)` drops entries starting at or after `offset` (log truncation);
  `truncate_from_start(offset)` drops entries wholly below the new log start and moves the
  start of the one covering it up to it.
"""

from __future__ import annotations

import bisect
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from oncelog.fileio import write_atomically
from oncelog.storage.checkpoint_text import entry_lines, format_entries

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


_writer: ThreadPoolExecutor | None = None
_writer_lock = threading.Lock()


def _background() -> ThreadPoolExecutor:
    """The one thread that writes truncated caches' files (started on first use)."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = ThreadPoolExecutor(1, thread_name_prefix="leader-epoch-checkpoint")
        return _writer


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    def __init__(self, directory: Path | None = None, entries: list[EpochEntry] | None = None):
        """`directory`: where `leader-epoch-checkpoint` lives (None: kept in memory only)."""
        self.directory = directory
        self._entries: list[EpochEntry] = list(entries or [])
        self.needs_rebuild = False
        """Set by `load` when the file was missing or malformed."""
        self._file_lock = threading.Lock()
        """Writers of the file (the owner's thread, the background one) take turns."""
        self._write_queued = False
        self._closed = False

    # -- persistence -------------------------------------------------------------------------

    @property
    def path(self) -> Path | None:
        return None if self.directory is None else self.directory / CHECKPOINT_FILE

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """Read the checkpoint; a missing or malformed file gives an empty cache with
        `needs_rebuild` set (a malformed one with a warning)."""
        cache = cls(directory)
        path = directory / CHECKPOINT_FILE
        try:
            text = path.read_text(encoding="ascii")
        except FileNotFoundError:
            cache.needs_rebuild = True
            return cache
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("%s: unreadable, rebuilding from the log: %s", path, exc)
            cache.needs_rebuild = True
            return cache
        try:
            entries = parse_checkpoint(text)
        except ValueError as exc:
            log.warning("%s: malformed, rebuilding from the log: %s", path, exc)
            cache.needs_rebuild = True
            return cache
        for entry in entries:
            cache._assign(entry.epoch, entry.start_offset)
        return cache

    def flush(self) -> None:
        """Write the entries to the checkpoint file (atomically), now."""
        with self._file_lock:
            if self.path is not None:
                write_atomically(self.path, format_checkpoint(self._entries).encode("ascii"))

    def flush_soon(self) -> None:
        """Write the file in the background (after a truncation, not after `assign`: see
        the module's docstring). One queued write covers every change made before it runs."""
        if self.path is None or self._closed or self._write_queued:
            return
        self._write_queued = True
        _background().submit(self._write_queued_entries)

    def _write_queued_entries(self) -> None:
        with self._file_lock:
            # Cleared before the entries are read: a change made after this queues another.
            self._write_queued = False
            path = self.path
            if path is None or self._closed or not path.parent.is_dir():
                return  # deleted meanwhile (Kafka's writeIfDirExists)
            entries = list(self._entries)
            try:
                write_atomically(path, format_checkpoint(entries).encode("ascii"))
            except OSError as exc:
                log.warning("%s: writing leader-epoch-checkpoint failed: %s", path, exc)

    def close(self, *, flush: bool = False) -> None:
        """No more background writes (a queued one is dropped: the partition is deleted, or
        reloaded by a new cache on the same file); with `flush`, the queued one is made now
        (a clean shutdown)."""
        with self._file_lock:
            if flush and self._write_queued and self.path is not None and not self._closed:
                write_atomically(self.path, format_checkpoint(self._entries).encode("ascii"))
            self._closed = True
            self._write_queued = False

    def wait_for_writes(self) -> None:
        """Return once the background writes queued so far are done (tests)."""
        _background().submit(_nothing).result()

    # -- reads -------------------------------------------------------------------------------

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, UNDEFINED_EPOCH (-1) when there is none."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        return self._entries[-1] if self._entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the entry covering `offset` (the last one starting at or before it);
        UNDEFINED_EPOCH when `offset` lies before every entry."""
        i = bisect.bisect_right(self._entries, offset, key=lambda e: e.start_offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def local_end_offset_for(self, epoch: int, log_end_offset: int) -> int:
        """The end of `epoch` in a log ending at `log_end_offset`: the start of the next
        higher epoch, the log end for the latest epoch; -1 when no epoch at or below `epoch`
        is known."""
        first = self.earliest_entry
        if first is None or epoch < first.epoch:
            return -1
        if epoch >= self.latest_epoch:
            return log_end_offset
        return self.end_offset_for(epoch, log_end_offset)[1]

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka's `endOffsetFor`:

        - requested == the latest epoch: (latest, `log_end_offset`);
        - UNDEFINED_EPOCH requested, an empty cache or one above the latest epoch:
          (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        - requested below the first cached epoch: (requested, start offset of the first
          entry): the older epochs' data is gone, and the follower truncates to where the
          leader's epochs now begin (current Kafka; versions before it answered UNDEFINED);
        - otherwise: (largest cached epoch <= requested, start offset of the next higher
          cached epoch).
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1].epoch:
            return requested_epoch, log_end_offset
        # index of the first entry with epoch > requested
        higher = bisect.bisect_right(self._entries, requested_epoch, key=lambda e: e.epoch)
        if higher >= len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return requested_epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    # -- changes (each writes the file if it changed anything) -------------------------------

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that `epoch` began at `start_offset`; return whether anything changed.
        If the file cannot be written the entries stay as they were and OSError is raised."""
        before = list(self._entries)
        changed = self._assign(epoch, start_offset)
        if changed and flush:
            try:
                self.flush()
            except OSError:
                self._entries = before  # not recorded: the caller writes no data either
                raise
        return changed

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        latest = self.latest_entry
        if latest is not None:
            if epoch < latest.epoch:
                return False
            if epoch == latest.epoch and start_offset >= latest.start_offset:
                return False
        removed: list[EpochEntry] = []
        while self._entries and (
            self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset
        ):
            removed.append(self._entries.pop())
        if len(removed) > 1 or (removed and removed[0].start_offset != start_offset):
            log.warning(
                "%s: new epoch entry (%d, %d) removed conflicting entries %s",
                self.directory,
                epoch,
                start_offset,
                removed[::-1],
            )
        self._entries.append(EpochEntry(epoch, start_offset))
        return True

    def truncate_from_end(self, end_offset: int, *, flush: bool = True) -> bool:
        """Drop every entry starting at or after `end_offset`."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return False
        while self._entries and self._entries[-1].start_offset >= end_offset:
            self._entries.pop()
        if flush:
            self.flush()
        return True

    def truncate_from_start(self, start_offset: int, *, flush: bool = True) -> bool:
        """The log now starts at `start_offset`: drop the entries wholly below it and move the
        start of the one covering it up to it (an entry starting at it is kept)."""
        i = bisect.bisect_right(self._entries, start_offset, key=lambda e: e.start_offset) - 1
        if i < 0 or (i == 0 and self._entries[0].start_offset == start_offset):
            return False
        covering = self._entries[i]
        self._entries[: i + 1] = [EpochEntry(covering.epoch, start_offset)]
        if flush:
            self.flush()
        return True

    def clear(self, *, flush: bool = True) -> None:
        self._entries.clear()
        if flush:
            self.flush()

    def replace(self, entries: list[EpochEntry], *, flush: bool = True) -> None:
        """Take `entries` (assigned in order, so the rules still hold)."""
        self._entries.clear()
        for entry in entries:
            self._assign(entry.epoch, entry.start_offset)
        if flush:
            self.flush()

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self._entries!r})"


def _nothing() -> None:
    return None


def format_checkpoint(entries: list[EpochEntry]) -> str:
    return format_entries([f"{e.epoch} {e.start_offset}" for e in entries])


def parse_checkpoint(text: str) -> list[EpochEntry]:
    """Entries of a checkpoint's text; ValueError names what is wrong."""
    entries: list[EpochEntry] = []
    for line in entry_lines(text):
        parts = line.split()
        if len(parts) != 2:
            raise ValueError(f"malformed line {line!r}")
        epoch, start = int(parts[0]), int(parts[1])
        if epoch < 0 or start < 0:
            raise ValueError(f"negative value in line {line!r}")
        if entries and (epoch <= entries[-1].epoch or start <= entries[-1].start_offset):
            raise ValueError(f"entries out of order at line {line!r}")
        entries.append(EpochEntry(epoch, start))
    return entries
