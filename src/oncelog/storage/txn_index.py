"""Aborted-transaction index (`.txnindex`) of one segment, in Kafka's on-disk format.

One 34-byte entry per transaction aborted in the segment (version int16 = 0, producer id
int64, first offset int64, last offset int64, last stable offset int64), appended when the
ABORT marker is written. read_committed fetches return the entries that overlap the fetched
range so consumers can drop the aborted records. The file is append-only and rebuilt from
the log on recovery, like the other indexes.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries: list[AbortedTxn] = []
        self._fd = -1

    def open(self) -> None:
        """Open the file (created on the first append) and read its entries."""
        self.entries = []
        if self.path.exists():
            data = self.path.read_bytes()
            usable = len(data) - len(data) % ENTRY.size
            for version, pid, first, last, lso in ENTRY.iter_unpack(data[:usable]):
                if version != VERSION:
                    break
                self.entries.append(AbortedTxn(pid, first, last, lso))

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; a failed or short write is cut off, so later entries stay aligned."""
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        size = os.fstat(self._fd).st_size
        entry = ENTRY.pack(
            VERSION, txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset
        )
        try:
            if os.write(self._fd, entry) != len(entry):
                raise OSError(f"short write to {self.path}")
        except OSError:
            os.ftruncate(self._fd, size)
            raise
        self.entries.append(txn)

    def overlapping(self, fetch_offset: int, upper_offset: int) -> list[AbortedTxn]:
        """Entries whose range [first, last] meets [fetch_offset, upper_offset)."""
        return [
            t
            for t in self.entries
            if t.last_offset >= fetch_offset and t.first_offset < upper_offset
        ]

    def truncate_from(self, offset: int) -> None:
        """Drop entries whose ABORT marker is at or after `offset` (the log was cut there)."""
        keep = [t for t in self.entries if t.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        self.close()
        data = b"".join(
            ENTRY.pack(VERSION, t.producer_id, t.first_offset, t.last_offset, t.last_stable_offset)
            for t in keep
        )
        self.path.write_bytes(data)

    def flush(self) -> None:
        if self._fd >= 0:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
