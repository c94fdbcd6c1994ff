"""The cleaner's key -> latest offset map, in a fixed amount of memory (Kafka's SkimpyOffsetMap).

Each slot is 24 bytes: a 16-byte BLAKE2b digest of the key and the int64 offset, in two flat
arrays with linear probing; nothing is allocated per key, so `log.cleaner.dedupe.buffer.size`
bounds the memory whatever the keys. Two keys with the same 128-bit digest would be taken for
one (the older value of the other could then be removed); Kafka accepts the same risk with MD5.
The map is filled up to `load_factor` of its slots; the cleaner then cleans only the prefix
of the dirty log the map covers.
"""

from __future__ import annotations

from array import array
from hashlib import blake2b

HASH_BYTES = 16
ENTRY_BYTES = HASH_BYTES + 8
_EMPTY = -1


class OffsetMap:
    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        self.slots = max(2, memory_bytes // ENTRY_BYTES)
        self.max_entries = max(1, int(self.slots * load_factor))
        self._hashes = bytearray(self.slots * HASH_BYTES)
        self._offsets = array("q", [_EMPTY]) * self.slots
        self.size = 0
        self.latest_offset = -1
        """Highest offset the map has seen (records above it are past the cleaned range)."""

    @property
    def memory_bytes(self) -> int:
        return self.slots * ENTRY_BYTES

    @property
    def full(self) -> bool:
        return self.size >= self.max_entries

    def _slot(self, digest: bytes) -> int:
        """The slot holding `digest`, or the empty slot where it belongs."""
        slots = self.slots
        i = int.from_bytes(digest[:8], "little") % slots
        offsets = self._offsets
        hashes = self._hashes
        while True:
            if offsets[i] == _EMPTY:
                return i
            start = i * HASH_BYTES
            if hashes[start : start + HASH_BYTES] == digest:
                return i
            i += 1
            if i == slots:
                i = 0

    def put(self, key: bytes, offset: int) -> None:
        """Record `offset` as the latest for `key`; the caller checks `full` first."""
        digest = blake2b(key, digest_size=HASH_BYTES).digest()
        i = self._slot(digest)
        if self._offsets[i] == _EMPTY:
            if self.size >= self.slots - 1:
                raise OverflowError("offset map is full")
            self._hashes[i * HASH_BYTES : (i + 1) * HASH_BYTES] = digest
            self.size += 1
        self._offsets[i] = offset
        self.latest_offset = max(self.latest_offset, offset)

    def get(self, key: bytes) -> int:
        """The latest offset of `key`, -1 if the map has none."""
        i = self._slot(blake2b(key, digest_size=HASH_BYTES).digest())
        return self._offsets[i]
