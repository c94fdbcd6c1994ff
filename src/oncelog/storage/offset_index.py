"""Sparse offset index (`.index`): relative offset -> byte position, 8 bytes per entry.

Kafka's on-disk format (big-endian int32 relative offset, int32 position). The entries are
kept in memory as two arrays for bisection; the file is append-only and rebuilt from the log
on recovery, so it carries no checksum of its own.
"""

from __future__ import annotations

import bisect
import struct
from array import array

from oncelog.storage.index_file import SparseIndex

ENTRY = struct.Struct(">ii")


class OffsetIndex(SparseIndex):
    ENTRY = ENTRY

    def _clear(self) -> None:
        self._offsets = array("q")
        self._positions = array("q")

    def load(self, log_size: int) -> bool:
        """Read the file; return False (and keep nothing) if it is inconsistent."""
        data = self._read_entries()
        if data is None:
            return False
        last_offset, last_pos = -1, -1
        for rel, pos in ENTRY.iter_unpack(data):
            offset = self.base_offset + rel
            if offset <= last_offset or pos <= last_pos or pos >= log_size:
                self._clear()
                return False
            self._offsets.append(offset)
            self._positions.append(pos)
            last_offset, last_pos = offset, pos
        return True

    @property
    def last_offset(self) -> int:
        return self._offsets[-1] if self._offsets else self.base_offset - 1

    def append(self, offset: int, position: int) -> None:
        if self._offsets and offset <= self._offsets[-1]:
            return
        self._file.append(ENTRY.pack(offset - self.base_offset, position))
        self._offsets.append(offset)
        self._positions.append(position)

    def lookup(self, offset: int) -> int:
        """Position of the last indexed batch starting at or before `offset` (0 if none)."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        return self._positions[i] if i >= 0 else 0

    def floor_by_position(self, position: int) -> tuple[int, int] | None:
        """(offset, position) of the last indexed batch starting at or before `position`."""
        i = bisect.bisect_right(self._positions, position) - 1
        return (self._offsets[i], self._positions[i]) if i >= 0 else None

    def truncate_to_position(self, position: int) -> None:
        """Drop entries at or beyond `position` (the log was truncated there)."""
        keep = bisect.bisect_left(self._positions, position)
        del self._offsets[keep:]
        del self._positions[keep:]
        self._truncate_file(keep)
