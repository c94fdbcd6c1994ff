"""The broker-wide table of producer records, and the bound on how many it keeps.

Producer state costs memory per (partition, producer id) and a broker cannot let clients grow
it without limit (a client that re-initialises constantly makes a new producer id each time).
Above `producer.state.max.entries` the least recently used entry is evicted; the evicted
producer is then unknown to that partition, which KIP-360 clients survive (the partition
accepts an unknown producer at any sequence), at the price of duplicate detection for
that producer's in-flight retries. Evictions are counted and logged.

So that an entry costs about its record and no Python objects (see `entry`), every
partition's entries live in one `bytearray` here, `RECORD_SIZE` bytes per slot, and the
recency order is a doubly linked list through slot numbers kept in `array`s (slot 0 is its
head); `ProducerStateManager` maps producer ids to slots. Freed slots are reused.
"""

from __future__ import annotations

import logging
from array import array
from typing import Protocol

from oncelog.producer_state.entry import RECORD_SIZE, producer_id_at
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = 500_000
_UNLINKED = -1
_EMPTY_RECORD = bytes(RECORD_SIZE)


class _Evictable(Protocol):
    tp: TopicPartition

    def evict(self, producer_id: int) -> bool: ...


class ProducerTracker:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.evicted = 0
        self.records = bytearray(_EMPTY_RECORD)
        """`RECORD_SIZE` bytes per slot; slot 0 is unused (the head of the recency list)."""
        self._prev = array("i", [0])
        """Slot used just before this one; `_UNLINKED` while allocated but not yet touched."""
        self._next = array("i", [0])
        """Slot used just after this one (0: it is the newest); for a free slot, the next
        free one (0: none)."""
        self._owner = array("i", [-1])
        """Index in `_owners` of the partition that holds the slot, -1 if free."""
        self._free = 0
        self._size = 0
        self._owners: list[_Evictable | None] = []
        self._owner_slots: list[int] = []
        """How many slots each owner holds: a partition is referenced only while it has some."""
        self._owner_ids: dict[int, int] = {}
        """id(owner) -> its index in `_owners` (an owner listed cannot be freed, so its id
        is not reused meanwhile)."""
        self._free_owner_ids: list[int] = []

    def __len__(self) -> int:
        return self._size

    def allocate(self, owner: _Evictable) -> int:
        """A slot for a new entry of `owner`, not yet counted: `touch` it once its record is
        written and the owner can find it by producer id."""
        oid = self._owner_ids.get(id(owner))
        if oid is None:
            if self._free_owner_ids:
                oid = self._free_owner_ids.pop()
                self._owners[oid] = owner
            else:
                oid = len(self._owners)
                self._owners.append(owner)
                self._owner_slots.append(0)
            self._owner_ids[id(owner)] = oid
        self._owner_slots[oid] += 1
        slot = self._free
        if slot:
            self._free = self._next[slot]
            self._prev[slot] = _UNLINKED
            self._owner[slot] = oid
        else:
            slot = len(self._prev)
            self._prev.append(_UNLINKED)
            self._next.append(0)
            self._owner.append(oid)
            self.records += _EMPTY_RECORD
        return slot

    def touch(self, slot: int) -> None:
        """Mark an entry just used; a new one is counted, and may push the count over the
        cap, which evicts the least recently used entry that may go."""
        prev, nxt = self._prev, self._next
        before = prev[slot]
        if before != _UNLINKED:
            after = nxt[slot]
            if after:  # not the newest yet: unlink, relink at the end
                nxt[before] = after
                prev[after] = before
                newest = prev[0]
                prev[slot] = newest
                nxt[slot] = 0
                nxt[newest] = slot
                prev[0] = slot
            return
        self._link_newest(slot)
        self._size += 1
        attempts = self._size
        while self._size > self.max_entries and attempts > 0:
            attempts -= 1
            victim = nxt[0]
            owner = self._owners[self._owner[victim]]
            assert owner is not None
            pid = producer_id_at(self.records, victim * RECORD_SIZE)
            if not owner.evict(pid):  # in a transaction: keep it, try the next oldest
                self._unlink(victim)
                self._link_newest(victim)
                continue
            self.evicted += 1
            log.info(
                "evicted producer %d on %s: producer.state.max.entries=%d reached",
                pid,
                owner.tp,
                self.max_entries,
            )

    def release(self, slot: int) -> None:
        """Forget an entry its owner dropped (expired, evicted, cleared); the slot is reused."""
        if self._prev[slot] != _UNLINKED:
            self._unlink(slot)
            self._size -= 1
        oid = self._owner[slot]
        self._owner[slot] = -1
        self._prev[slot] = _UNLINKED
        self._next[slot] = self._free
        self._free = slot
        self._owner_slots[oid] -= 1
        if not self._owner_slots[oid]:
            owner = self._owners[oid]
            self._owners[oid] = None
            del self._owner_ids[id(owner)]
            self._free_owner_ids.append(oid)

    def _link_newest(self, slot: int) -> None:
        prev, nxt = self._prev, self._next
        newest = prev[0]
        prev[slot] = newest
        nxt[slot] = 0
        nxt[newest] = slot
        prev[0] = slot

    def _unlink(self, slot: int) -> None:
        prev, nxt = self._prev, self._next
        before, after = prev[slot], nxt[slot]
        nxt[before] = after
        prev[after] = before
