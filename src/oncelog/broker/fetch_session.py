"""Incremental fetch sessions (KIP-227): a fetcher names only what changed, sans-IO.

Without a session every Fetch lists all of the fetcher's partitions and every answer carries
all of them, so a follower of many mostly idle partitions (`__consumer_offsets` alone has 50)
pays for all of them on every round, on both sides. With a session the broker keeps the
fetcher's partitions and where it fetches from; a request lists only the partitions whose
fetch position changed (or that join) and forgets those that leave, and the answer carries
only the partitions with news: records, a high watermark or log start that moved, an error.

Which request is which (Kafka's FetchMetadata), by (session id, session epoch):

- (0, -1): a full fetch without a session (librdkafka and older clients);
- (0, 0): a full fetch that opens a session; the answer carries its id, or 0 when the cache
  has no slot for it (the fetcher goes on with full fetches);
- (S, 0): S is closed and a new session opened, as (0, 0);
- (S, -1): S is closed; a full fetch without a session;
- (S, N > 0): incremental on S, whose next epoch must be N (else INVALID_FETCH_SESSION_EPOCH);
  an S the broker does not know (evicted, or the broker restarted) is
  FETCH_SESSION_ID_NOT_FOUND, and the fetcher starts over with a full fetch.

A follower's session costs the leader only what moved, however many partitions it holds
(a cluster's followers hold every idle partition of `__consumer_offsets` and of every quiet
topic). The replica manager reports each partition whose log end, high watermark or log
start moved, or whose state (leadership, ISR) changed (`FetchSessionCache.touched`); a
caught-up partition found with nothing to tell is *quiet* and is looked at again only once
touched, or by the sweep every `SWEEP_MS`, which also keeps its follower noted as caught up
for the ISR and finds what no report covers (retention moving a log start). A parked
follower fetch waits on its session's one key (`FetchSession.key`), which a report on any of
its partitions wakes, instead of on each partition.

The cache holds `max.incremental.fetch.session.cache.slots` sessions. When it is full a new
session takes the slot of the least recently used one idle for `EVICTION_MS` (Kafka's
minimum eviction time), else a follower's new session (privileged, as in Kafka) takes a
consumer's; otherwise none is opened. The clock is the caller's (`now_ms`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.replication.leader import FollowerReplica, LeaderState

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: A session unused this long may give its slot to a new one (Kafka's
#: min.incremental.fetch.session.eviction.ms, fixed there too).
EVICTION_MS = 120_000
#: A follower session's quiet partitions are all looked at again at least this often (when
#: it fetches: an idle follower's fetch comes every replica.fetch.wait.max.ms, 500 by
#: default); far below replica.lag.time.max.ms, so a quiet follower stays in the ISR.
SWEEP_MS = 500


@dataclass(slots=True)
class CachedPartition:
    """One partition of a session: where the fetcher reads (the request's fields, under the
    request's names so the fetch handler reads either alike) and what it was last told."""

    tp: TopicPartition
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int
    #: The high watermark and log start of the last answer that carried this partition;
    #: -1 until one did, or after an error, so the next answer carries it again.
    sent_high_watermark: int = -1
    sent_log_start: int = -1
    #: For a follower: the leadership the last answer was made under, and the follower's
    #: place in it. While they hold, a caught-up partition with nothing new needs no read.
    sent_leader: LeaderState | None = None
    sent_follower: FollowerReplica | None = None

    def update(self, p: Any) -> None:
        """The request's newer fields for this partition; it is read on the next answer
        whatever they are (a changed leader epoch may need an error)."""
        self.sent_follower = None
        self.current_leader_epoch = p.current_leader_epoch
        self.fetch_offset = p.fetch_offset
        self.last_fetched_epoch = p.last_fetched_epoch
        self.log_start_offset = p.log_start_offset
        self.partition_max_bytes = p.partition_max_bytes

    def idle_for(self, by_tp: dict[TopicPartition, Partition], node_id: int, now_ms: int) -> bool:
        """A follower's partition that is caught up, in the ISR, with no high watermark or
        log start it has not been told, under the leadership of the last answer: there is
        nothing to read or tell, and its fetch is noted as a read would note it (it stays
        caught up for the ISR)."""
        follower = self.sent_follower
        if follower is None:
            return False
        replica = by_tp.get(self.tp)
        if replica is None or replica.leader is not self.sent_leader:
            return False
        plog = replica.log
        end = plog.log_end_offset
        if (
            self.fetch_offset != end
            or plog.high_watermark != self.sent_high_watermark
            or plog.log_start_offset != self.sent_log_start
            or node_id not in self.sent_leader.isr  # type: ignore[union-attr]
        ):
            return False
        follower.fetched_at_end(end, now_ms)
        return True

    def must_answer(self, error: int, high_watermark: int, log_start: int, size: int) -> bool:
        """Whether an incremental answer carries this partition (Kafka's
        CachedPartition.maybeUpdateResponseData, without updating)."""
        return (
            size > 0
            or error != 0
            or high_watermark != self.sent_high_watermark
            or log_start != self.sent_log_start
        )

    def answered(
        self,
        error: int,
        high_watermark: int,
        log_start: int,
        leader: LeaderState | None,
        node_id: int,
    ) -> None:
        """An answer that carried (or could have carried) this partition was sent; `leader`:
        the leadership it was made under, for a follower (`node_id`)."""
        if error:
            self.sent_high_watermark = self.sent_log_start = -1
            self.sent_leader = self.sent_follower = None
        else:
            self.sent_high_watermark = high_watermark
            self.sent_log_start = log_start
            self.sent_leader = leader
            self.sent_follower = leader.followers.get(node_id) if leader is not None else None


def _cached(tp: TopicPartition, p: Any) -> CachedPartition:
    cached = CachedPartition(tp, p.partition, -1, -1, -1, -1, 0)
    cached.update(p)
    return cached


@dataclass(slots=True, eq=False)
class FetchSession:
    id: int
    privileged: bool
    last_used_ms: int
    #: The epoch the next incremental request must carry.
    next_epoch: int = 1
    #: topic -> partition -> state, in the order partitions joined.
    topics: dict[str, dict[int, CachedPartition]] = field(default_factory=dict)
    #: `layout()`, kept until a partition joins or leaves.
    _layout: tuple[list[tuple[str, list[CachedPartition]]], tuple[TopicPartition, ...]] | None = (
        None
    )
    #: A follower's session: its partitions reported moved since a fetch last looked
    #: (`FetchSessionCache.touched`), and when all of them were last looked at.
    touched: set[TopicPartition] = field(default_factory=set)
    swept_ms: int = -SWEEP_MS
    #: The partitions not quiet: new, changed by a request, or found with something to
    #: read or tell when last judged (`judge`). Between sweeps a follower's fetch looks at
    #: these and the touched ones only.
    awake: dict[TopicPartition, CachedPartition] = field(default_factory=dict)
    #: partition -> the follower sessions holding it (the cache's index, shared).
    _index: dict[TopicPartition, set[FetchSession]] | None = None

    @property
    def key(self) -> tuple[str, int]:
        """The purgatory key a parked fetch on this session waits on."""
        return ("fetch-session", self.id)

    def to_look_at(self, now_ms: int) -> list[tuple[str, list[CachedPartition]]] | None:
        """For an incremental follower fetch about to look: the awake partitions and those
        reported moved since the last look, by topic; None when a sweep is due (every
        partition is looked at, `layout`)."""
        touched, self.touched = self.touched, set()
        if now_ms - self.swept_ms >= SWEEP_MS:
            self.swept_ms = now_ms
            return None
        by_topic: dict[str, list[CachedPartition]] = {}
        for cached in self.stirring(touched):
            by_topic.setdefault(cached.tp.topic, []).append(cached)
        return list(by_topic.items())

    def stirring(self, touched: set[TopicPartition] | None = None) -> list[CachedPartition]:
        """The awake partitions and those reported moved (`touched`, by default the ones
        not looked at yet), each once."""
        chosen = dict(self.awake)
        for tp in self.touched if touched is None else touched:
            cached = self.topics.get(tp.topic, {}).get(tp.partition)
            if cached is not None:
                chosen[tp] = cached
        return list(chosen.values())

    def judge(
        self,
        cached: CachedPartition,
        by_tp: dict[TopicPartition, Partition],
        node_id: int,
        now_ms: int,
    ) -> bool:
        """Whether a follower's partition is idle (`CachedPartition.idle_for`): idle, it
        sleeps until touched or swept; otherwise it stays awake."""
        if cached.idle_for(by_tp, node_id, now_ms):
            self.awake.pop(cached.tp, None)
            return True
        self.awake[cached.tp] = cached
        return False

    def layout(self) -> tuple[list[tuple[str, list[CachedPartition]]], tuple[TopicPartition, ...]]:
        """The partitions by topic, and all of them, in the order they joined: the same
        lists on every fetch until the session's partitions change."""
        if self._layout is None:
            topics = [(name, list(parts.values())) for name, parts in self.topics.items()]
            tps = tuple(p.tp for _, parts in topics for p in parts)
            self._layout = (topics, tps)
        return self._layout

    def add(self, topics: Iterable[Any]) -> None:
        """Partitions of a request (kio's FetchTopic shape): new ones join, known ones take
        the request's fields."""
        for topic in topics:
            mine = self.topics.setdefault(topic.topic, {})
            for p in topic.partitions:
                cached = mine.get(p.partition)
                if cached is None:
                    tp = TopicPartition(topic.topic, p.partition)
                    cached = mine[p.partition] = _cached(tp, p)
                    self._layout = None
                    if self._index is not None:
                        self._index.setdefault(tp, set()).add(self)
                else:
                    cached.update(p)
                self.awake[cached.tp] = cached

    def forget(self, forgotten: Iterable[Any]) -> None:
        """kio's ForgottenTopic shape: a topic and partition indexes."""
        for topic in forgotten:
            mine = self.topics.get(topic.topic)
            if mine is None:
                continue
            for index in topic.partitions:
                cached = mine.pop(index, None)
                if cached is not None:
                    self._layout = None
                    self.awake.pop(cached.tp, None)
                    self._unindex(cached.tp)
            if not mine:
                del self.topics[topic.topic]

    def close(self) -> None:
        """Out of the cache (removed, evicted): no longer reported to."""
        for parts in self.topics.values():
            for cached in parts.values():
                self._unindex(cached.tp)
        self._index = None

    def _unindex(self, tp: TopicPartition) -> None:
        if self._index is None:
            return
        holders = self._index.get(tp)
        if holders is not None:
            holders.discard(self)
            if not holders:
                del self._index[tp]


class FetchSessionCache:
    def __init__(self, max_slots: int = 1000, rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self._sessions: dict[int, FetchSession] = {}
        self._rng = rng or random.Random()
        #: Sessions that lost their slot to a new one (Kafka's
        #: IncrementalFetchSessionEvictionsPerSec).
        self.evictions = 0
        #: partition -> the follower sessions holding it, for `touched`.
        self._followed: dict[TopicPartition, set[FetchSession]] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def partitions_cached(self) -> int:
        return sum(len(s.layout()[1]) for s in list(self._sessions.values()))

    def get(self, session_id: int, now_ms: int) -> FetchSession | None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.last_used_ms = now_ms
        return session

    def remove(self, session_id: int) -> None:
        session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def touched(self, tps: Iterable[TopicPartition]) -> list[tuple[str, int]]:
        """Partitions whose log end, high watermark or log start moved: noted in the follower
        sessions holding them; returns those sessions' keys, for the purgatory to wake."""
        followed = self._followed
        if not followed:
            return []
        keys: dict[tuple[str, int], None] = {}
        for tp in tps:
            holders = followed.get(tp)
            if holders:
                for session in holders:
                    session.touched.add(tp)
                    keys[session.key] = None
        return list(keys)

    def open(self, privileged: bool, now_ms: int) -> FetchSession | None:
        """A new, empty session, or None when no slot can be had."""
        if len(self._sessions) >= self.max_slots and not self._evict(privileged, now_ms):
            return None
        while True:
            session_id = self._rng.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                break
        session = FetchSession(session_id, privileged, now_ms)
        if privileged:
            session._index = self._followed
        self._sessions[session_id] = session
        return session

    def _evict(self, privileged: bool, now_ms: int) -> bool:
        stale = [s for s in self._sessions.values() if now_ms - s.last_used_ms >= EVICTION_MS]
        if not stale and privileged:
            stale = [s for s in self._sessions.values() if not s.privileged]
        if not stale:
            return False
        victim = min(stale, key=lambda s: s.last_used_ms)
        del self._sessions[victim.id]
        victim.close()
        self.evictions += 1
        return True
