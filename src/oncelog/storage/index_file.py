"""The file under a sparse index (`.index`, `.timeindex`): entries are gathered in memory and
written in blocks, not one small write per entry.

An index is only a shortcut into its segment: on load a segment checks that the last entry
points at a batch and indexes the batches after it again, so entries a crash kept from the
file cost a longer scan, never a wrong answer. The block is written before an fsync, a
truncation or a close; those may come from a worker thread (checkpoints fsync the active
segment), hence the lock, which also keeps blocks in order in the file.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

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
