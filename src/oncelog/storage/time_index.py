"""Sparse time index (`.timeindex`): max timestamp so far -> relative offset, 12 bytes each.

Kafka's format (big-endian int64 timestamp, int32 relative offset). Timestamps in the index
only grow, so a lookup by time bisects and then scans the log forward from that offset.
"""

from __future__ import annotations

import bisect
import struct
from array import array

from oncelog.storage.index_file import SparseIndex

ENTRY = struct.Struct(">qi")


class TimeIndex(SparseIndex):
    ENTRY = ENTRY

    def _clear(self) -> None:
        self._timestamps = array("q")
        self._offsets = array("q")

    def load(self, next_offset: int) -> bool:
        data = self._read_entries()
        if data is None:
            return False
        for ts, rel in ENTRY.iter_unpack(data):
            offset = self.base_offset + rel
            if (self._timestamps and ts <= self._timestamps[-1]) or offset >= next_offset:
                self._clear()
                return False
            self._timestamps.append(ts)
            self._offsets.append(offset)
        return True

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry if `timestamp` is above every indexed one."""
        if self._timestamps and timestamp <= self._timestamps[-1]:
            return
        self._file.append(ENTRY.pack(timestamp, offset - self.base_offset))
        self._timestamps.append(timestamp)
        self._offsets.append(offset)

    def lookup(self, timestamp: int) -> int:
        """An offset at or before the first record with a timestamp >= `timestamp`."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self._offsets[i] if i >= 0 else self.base_offset

    def truncate_to_offset(self, next_offset: int) -> None:
        keep = bisect.bisect_left(self._offsets, next_offset)
        del self._timestamps[keep:]
        del self._offsets[keep:]
        self._truncate_file(keep)
