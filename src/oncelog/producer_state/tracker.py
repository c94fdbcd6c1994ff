"""A broker-wide bound on the producer entries kept across all partitions.

Producer state costs memory per (partition, producer id) and a broker cannot let clients grow
it without limit (a client that re-initialises constantly makes a new producer id each time).
Above `producer.state.max.entries` the least recently used entry is evicted; the evicted
producer is then unknown to that partition, which KIP-360 clients survive (the partition
accepts an unknown producer at any sequence), at the price of duplicate detection for
that producer's in-flight retries. Evictions are counted and logged.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Protocol

from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

DEFAULT_MAX_ENTRIES = 500_000


class _Evictable(Protocol):
    tp: TopicPartition

    def evict(self, producer_id: int) -> bool: ...


class ProducerTracker:
    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self.evicted = 0
        self._lru: OrderedDict[tuple[TopicPartition, int], _Evictable] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def touch(self, owner: _Evictable, producer_id: int) -> None:
        key = (owner.tp, producer_id)
        if key in self._lru:
            self._lru.move_to_end(key)
            return
        self._lru[key] = owner
        attempts = len(self._lru)
        while len(self._lru) > self.max_entries and attempts > 0:
            attempts -= 1
            (tp, pid), victim = self._lru.popitem(last=False)
            if not victim.evict(pid):  # in a transaction: keep it, try the next oldest
                self._lru[(tp, pid)] = victim
                continue
            self.evicted += 1
            log.info(
                "evicted producer %d on %s: producer.state.max.entries=%d reached",
                pid,
                tp,
                self.max_entries,
            )

    def forget(self, tp: TopicPartition, producer_id: int) -> None:
        self._lru.pop((tp, producer_id), None)
