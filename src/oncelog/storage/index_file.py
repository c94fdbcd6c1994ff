"""The file under a sparse index (`.index`, `.timeindex`): entries are gathered in memory and
written in blocks, not one small write per entry; and `SparseIndex`, what both indexes share.

An index is only a shortcut into its segment: on load a segment checks that the last entry
points at a batch and indexes the batches after it again, so entries a crash kept from the
file cost a longer scan, never a wrong answer. The block is written before an fsync, a
truncation or a close; those may come from a worker thread (checkpoints fsync the active
segment), hence the lock, which also keeps blocks in order in the file.
"""

from __future__ import annotations

import os
import struct
import threading
from array import array
from pathlib import Path
from typing import ClassVar

#: Bytes gathered before they are written (about 340-512 entries, 1.3-2 MiB of log).
BLOCK = 4096


class IndexFile:
    __slots__ = ("_fd", "_lock", "_pending", "path")

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._pending = bytearray()
        self._lock = threading.Lock()

    def open(self) -> None:
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def append(self, entry: bytes) -> None:
        # Under the lock too: a worker's write exports the buffer, which may then not grow.
        with self._lock:
            self._pending += entry
            if len(self._pending) >= BLOCK:
                self._write_locked()

    def write_pending(self) -> None:
        with self._lock:
            self._write_locked()

    def _write_locked(self) -> None:
        if self._pending and self._fd >= 0:
            os.write(self._fd, self._pending)
            self._pending.clear()

    def truncate(self, size: int) -> None:
        """Keep the first `size` bytes of the index (pending ones included)."""
        self.write_pending()
        with self._lock:
            os.ftruncate(self._fd, size)

    def flush(self) -> None:
        self.write_pending()
        os.fsync(self._fd)

    def close(self) -> None:
        self.write_pending()
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class SparseIndex:
    """What the offset and time indexes share (Kafka's AbstractIndex): a fixed-size entry
    format, entries kept in memory as arrays for bisection, ending with `_offsets`, and the
    `IndexFile` under them. Subclasses define `ENTRY` and `_clear` (empty arrays)."""

    ENTRY: ClassVar[struct.Struct]
    _offsets: array[int]

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._clear()
        self._file = IndexFile(path)

    def _clear(self) -> None:
        raise NotImplementedError

    def open(self) -> None:
        self._file.open()

    def _read_entries(self) -> bytes | None:
        """The file's bytes, with the in-memory entries dropped; None if its size is not a
        whole number of entries."""
        data = self.path.read_bytes() if self.path.exists() else b""
        self._clear()
        return None if len(data) % self.ENTRY.size else data

    def reset(self) -> None:
        """Drop every entry (before a rebuild)."""
        self._clear()
        self._file.truncate(0)

    @property
    def entries(self) -> int:
        return len(self._offsets)

    def _truncate_file(self, keep: int) -> None:
        """Keep the first `keep` entries of the file."""
        self._file.truncate(keep * self.ENTRY.size)

    def write_pending(self) -> None:
        self._file.write_pending()

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()
