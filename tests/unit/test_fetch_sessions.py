"""Incremental fetch sessions (KIP-227): the leader's session cache and Fetch handler against
the follower's session handler, through the wire format both sides use.

The follower here is the replica fetcher's own request writer and answer reader
(`encode_follower_fetch`, `decode_fetch_response`) driven by `FetchSessionHandler`; the
leader is the real dispatcher on a temporary directory. The central check: whatever happens
(appends, log start moves, lost answers, evicted sessions), a follower that fetches on a
session knows exactly what a follower fetching in full would know.
"""

from __future__ import annotations

import random
import struct
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.dispatcher import Pending, Reply
from oncelog.broker.fetch_session import (
    EVICTION_MS,
    SWEEP_MS,
    CachedPartition,
    FetchSessionCache,
)
from oncelog.broker.partition import ReplicaView
from oncelog.broker.purgatory import Delayed, Purgatory
from oncelog.errors import ErrorCode
from oncelog.protocol.fast_fetch import (
    FOLLOWER_FETCH_VERSION,
    FollowerFetchPartition,
    decode_fetch_response,
    encode_follower_fetch,
)
from oncelog.protocol.registry import ApiKey
from oncelog.replication.fetch_session_handler import FetchSessionHandler
from oncelog.storage.log_info import AppendOrigin
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import Broker, batch

PARTITIONS = 4
TPS = [TopicPartition("data", p) for p in range(PARTITIONS)]
_HEADER = struct.Struct(">hhih")


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = leader(tmp_path)
    try:
        yield broker
    finally:
        broker.close()


def leader(root: Path) -> Broker:
    """Broker 1, leading `TPS` with brokers 2 and 3 as followers in the ISR."""
    broker = Broker(
        root,
        **{
            "etcd.connect": "http://127.0.0.1:2379",
            "node.id": "1",
            "replica.lag.time.max.ms": "30000",
        },
    )
    broker.replicas.apply_topic("data", uuid.uuid4(), ((1, 2, 3),) * PARTITIONS, {}, False)
    for tp in TPS:
        broker.replicas.apply_partition_state(tp, ReplicaView(1, 0, (1, 2, 3), 0, (1, 2, 3), 1))
    return broker


def append(broker: Broker, tp: TopicPartition, n: int = 1) -> None:
    """`n` batches at the log end, reported as the produce handler reports its appends."""
    plog = broker.replicas.partition(tp)
    for _ in range(n):
        data = bytearray(batch([b"v"]))
        data[0:8] = plog.log_end_offset.to_bytes(8, "big")
        plog.append(bytes(data), origin=AppendOrigin.REPLICATION)
    broker.replicas.notify_appended([tp])


def end_of(records: memoryview | bytes) -> int:
    """The offset after the last batch of `records`."""
    data = bytes(records)
    pos = 0
    end = -1
    while pos < len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (last_delta,) = struct.unpack_from(">i", data, pos + 23)
        end = base + last_delta + 1
        pos += 12 + length
    return end


class Follower:
    """A replica's view of the leader's partitions, kept by fetching, on a session or not."""

    def __init__(self, broker: Broker, node_id: int, session: bool) -> None:
        self.broker = broker
        self.node_id = node_id
        self.handler = FetchSessionHandler(1 << 20) if session else None
        self.end = dict.fromkeys(TPS, 0)
        self.hw = dict.fromkeys(TPS, -1)
        self.start = dict.fromkeys(TPS, -1)
        self.answered: list[TopicPartition] = []
        self._correlation = 0

    def fetch(
        self,
        *,
        lose_answer: bool = False,
        max_wait_ms: int = 0,
        waited: Callable[[Delayed], Any] | None = None,
        errors: bool = False,
    ) -> Any:
        """One fetch round. A fetch that waits is answered by `waited(its Delayed)` when
        given (what it returns, if not None), else forced at once (its deadline). A
        partition's error fails the round unless `errors`."""
        wanted = {tp: (0, self.end[tp], 0) for tp in TPS}
        if self.handler is not None:
            plan = self.handler.build(wanted, TPS)
            body = encode_follower_fetch(
                self.node_id,
                max_wait_ms,
                1,
                1 << 24,
                plan.topics,
                plan.session_id,
                plan.session_epoch,
                plan.forgotten,
            )
        else:
            parts = [FollowerFetchPartition(t.partition, 0, self.end[t], 0, 1 << 20) for t in TPS]
            body = encode_follower_fetch(self.node_id, max_wait_ms, 1, 1 << 24, [("data", parts)])
        self._correlation += 1
        client = b"follower"
        header = _HEADER.pack(ApiKey.FETCH, FOLLOWER_FETCH_VERSION, self._correlation, 8)
        frame = header + client + b"\x00" + body
        outcome = self.broker.dispatcher.dispatch(frame, f"conn-{self.node_id}")
        if isinstance(outcome, Pending):
            answer = waited(outcome.delayed) if waited is not None else None
            if answer is None:
                answer = outcome.delayed.try_complete(True)
            outcome = Reply(outcome.finish(answer))
        assert isinstance(outcome, Reply)
        if lose_answer:
            if self.handler is not None:
                self.handler.failed()
            return None
        raw = b"".join(bytes(p) for p in outcome.data)[4:]
        response = decode_fetch_response(FOLLOWER_FETCH_VERSION, raw, 5)
        assert response is not None
        if self.handler is not None:
            self.handler.answered(response.error_code, response.session_id)
        self.answered = []
        for topic in response.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                self.answered.append(tp)
                if errors and p.error_code:
                    continue
                assert p.error_code == ErrorCode.none, p
                if p.records:
                    self.end[tp] = end_of(p.records)
                self.hw[tp] = p.high_watermark
                self.start[tp] = p.log_start_offset
        return response


# -- the cache ----------------------------------------------------------------------------------


def test_a_full_cache_gives_a_stale_sessions_slot_to_a_new_one() -> None:
    cache = FetchSessionCache(2, random.Random(1))
    old = cache.open(False, now_ms=0)
    assert old is not None and cache.open(False, now_ms=1000) is not None
    assert cache.open(False, now_ms=EVICTION_MS - 1) is None  # nobody idle long enough
    new = cache.open(False, now_ms=EVICTION_MS)
    assert new is not None and cache.get(old.id, EVICTION_MS) is None and len(cache) == 2
    assert cache.evictions == 1


def test_a_followers_session_takes_a_consumers_slot_but_not_the_reverse() -> None:
    cache = FetchSessionCache(1, random.Random(2))
    consumer = cache.open(False, now_ms=0)
    assert consumer is not None
    follower = cache.open(True, now_ms=1)
    assert follower is not None and cache.get(consumer.id, 1) is None
    assert cache.open(False, now_ms=2) is None
    assert cache.get(follower.id, 2) is follower


def test_no_slots_no_sessions(broker: Broker) -> None:
    broker.context.fetch_sessions.max_slots = 0
    follower = Follower(broker, 2, session=True)
    assert follower.fetch().session_id == 0
    assert follower.handler is not None and follower.handler.epoch == 0  # full again next time


# -- the handler ----------------------------------------------------------------------------------


def test_an_incremental_answer_carries_only_the_partitions_with_news(broker: Broker) -> None:
    follower = Follower(broker, 2, session=True)
    first = follower.fetch()
    assert first.session_id != 0 and sorted(follower.answered) == TPS  # full: every partition
    assert follower.fetch().responses == ()  # nothing new anywhere
    append(broker, TPS[2], 3)
    follower.fetch()
    assert follower.answered == [TPS[2]] and follower.end[TPS[2]] == 3
    follower.fetch()  # its new position; the HW cannot move without broker 3
    assert follower.answered == []
    other = Follower(broker, 3, session=False)
    other.fetch()
    other.fetch()  # broker 3 reaches 3: the HW moves
    follower.fetch()
    assert follower.answered == [TPS[2]] and follower.hw[TPS[2]] == 3


def test_a_parked_session_fetch_tells_what_changed_while_it_waited(broker: Broker) -> None:
    """What a wake-up found but did not answer (a new high watermark alone does not satisfy
    min_bytes) is not taken as told: the answer that comes later carries it."""
    follower = Follower(broker, 2, session=True)
    other = Follower(broker, 3, session=False)
    follower.fetch()
    append(broker, TPS[0], 2)
    follower.fetch()
    assert follower.end[TPS[0]] == 2 and follower.hw[TPS[0]] == 0

    def waited(delayed: Delayed) -> Any:
        other.fetch()
        other.fetch()  # broker 3 reaches 2 as well: the high watermark moves to 2
        assert delayed.try_complete(False) is None
        append(broker, TPS[3])
        return delayed.try_complete(False)

    follower.fetch(max_wait_ms=500, waited=waited)
    assert sorted(follower.answered) == [TPS[0], TPS[3]]
    assert follower.hw[TPS[0]] == 2 and follower.end[TPS[3]] == 1


def test_session_errors(broker: Broker) -> None:
    follower = Follower(broker, 2, session=True)
    session_id = follower.fetch().session_id
    handler = follower.handler
    assert handler is not None
    handler.epoch += 5  # a request out of step
    assert follower.fetch().error_code == ErrorCode.invalid_fetch_session_epoch
    assert follower.fetch().session_id not in (0, session_id)  # closed and opened anew
    broker.context.fetch_sessions.remove(handler.session_id)  # evicted, or a restart
    assert follower.fetch().error_code == ErrorCode.fetch_session_id_not_found
    assert follower.fetch().error_code == ErrorCode.none and sorted(follower.answered) == TPS


def test_a_forgotten_partition_is_not_answered(broker: Broker) -> None:
    cache = broker.context.fetch_sessions
    follower = Follower(broker, 2, session=True)
    follower.fetch()
    handler = follower.handler
    assert handler is not None
    wanted = {tp: (0, 0, 0) for tp in TPS[:2]}
    plan = handler.build(wanted, TPS)
    assert plan.topics == [] and plan.forgotten == [("data", [2, 3])]
    handler.failed()  # not sent: the next request is full
    full = [FollowerFetchPartition(p, 0, 0, 0, 1 << 20) for p in (0, 1)]
    assert handler.build(wanted, ()).topics == [("data", full)]
    session = cache.get(handler.session_id, 0)
    assert session is not None and len(session.layout()[1]) == PARTITIONS


def test_an_idle_caught_up_partition_is_not_read_but_keeps_the_follower_in_sync(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower = Follower(broker, 2, session=True)
    other = Follower(broker, 3, session=True)
    follower.fetch()
    other.fetch()
    follower.fetch()  # answered under the current leadership, caught up everywhere
    reads: list[TopicPartition] = []
    real = broker.replicas.follower_fetch

    def counted(replica_id: int, tp: TopicPartition, *args: Any, **kwargs: Any) -> Any:
        reads.append(tp)
        return real(replica_id, tp, *args, **kwargs)

    monkeypatch.setattr(broker.replicas, "follower_fetch", counted)
    for _ in range(5):
        broker.clock.advance(20_000)  # replica.lag.time.max.ms is 30 s
        follower.fetch()
        other.fetch()
    assert reads == []
    append(broker, TPS[1])  # the first news after 100 s of idling
    broker.replicas.maybe_shrink_isr()
    leader = broker.replicas.replicas_by_tp[TPS[1]].leader
    assert leader is not None and leader.pending_isr is None and leader.isr == {1, 2, 3}


def test_a_lost_leadership_is_answered_on_an_idle_partition(broker: Broker) -> None:
    follower = Follower(broker, 2, session=True)
    follower.fetch()
    follower.fetch()
    broker.replicas.apply_partition_state(TPS[3], ReplicaView(2, 1, (1, 2, 3), 1, (1, 2, 3), 2))
    # Read by hand: the follower's helper asserts no partition errors.
    handler = follower.handler
    assert handler is not None
    outcome = _raw_fetch(broker, handler, follower)
    parts = [p for t in outcome.responses for p in t.partitions]
    assert [(p.partition_index, p.error_code) for p in parts] == [
        (3, ErrorCode.fenced_leader_epoch)
    ]


def _raw_fetch(broker: Broker, handler: FetchSessionHandler, follower: Follower) -> Any:
    plan = handler.build({tp: (0, follower.end[tp], 0) for tp in TPS}, TPS)
    body = encode_follower_fetch(
        2, 0, 1, 1 << 24, plan.topics, plan.session_id, plan.session_epoch, plan.forgotten
    )
    frame = _HEADER.pack(ApiKey.FETCH, FOLLOWER_FETCH_VERSION, 99, 1) + b"f\x00" + body
    outcome = broker.dispatcher.dispatch(frame, "conn-raw")
    assert isinstance(outcome, Reply)
    response = decode_fetch_response(
        FOLLOWER_FETCH_VERSION, b"".join(bytes(p) for p in outcome.data)[4:], 5
    )
    assert response is not None
    handler.answered(response.error_code, response.session_id)
    return response


@pytest.mark.parametrize("seed", range(8))
def test_a_session_follower_knows_what_a_full_fetcher_knows(tmp_path: Path, seed: int) -> None:
    """Two leaders take the same random appends, log start moves and other-follower fetches;
    broker 2 fetches from one on a session (whose answers are sometimes lost, whose session
    is sometimes evicted) and from the other in full. After every round both views of every
    partition (log end, high watermark, log start) are the same."""
    rng = random.Random(seed)
    leaders = [leader(tmp_path / "session"), leader(tmp_path / "full")]
    try:
        mine = Follower(leaders[0], 2, session=True)
        full = Follower(leaders[1], 2, session=False)
        others = [Follower(b, 3, session=False) for b in leaders]
        for _ in range(150):
            action = rng.random()
            if action < 0.35:
                tp = rng.choice(TPS)
                n = rng.randint(1, 3)
                for b in leaders:
                    append(b, tp, n)
            elif action < 0.45:
                for other in others:
                    other.fetch()
            elif action < 0.5:
                tp = rng.choice(TPS)
                plog = leaders[0].replicas.partition(tp)
                if plog.high_watermark > plog.log_start_offset:
                    to = rng.randint(plog.log_start_offset, plog.high_watermark)
                    for b in leaders:  # as DeleteRecords does it
                        b.replicas.partition(tp).delete_records_before(to)
                        b.replicas.notify_appended([tp])
            elif action < 0.55:
                mine.fetch(lose_answer=True)
                full.fetch(lose_answer=True)
            elif action < 0.58:
                assert mine.handler is not None
                leaders[0].context.fetch_sessions.remove(mine.handler.session_id)
            else:
                while mine.fetch().error_code != ErrorCode.none:
                    pass  # a session error: the next request is full
                full.fetch()
                assert (mine.end, mine.hw, mine.start) == (full.end, full.hw, full.start)
    finally:
        for b in leaders:
            b.close()


# -- quiet partitions: a follower's fetch costs what moved -------------------------------------


def _quiet_follower(broker: Broker) -> Follower:
    """Broker 2 on a session, caught up everywhere and told everything: all partitions quiet."""
    follower = Follower(broker, 2, session=True)
    other = Follower(broker, 3, session=True)
    follower.fetch()
    other.fetch()
    follower.fetch()
    follower.fetch()
    return follower


def _looked_at(monkeypatch: pytest.MonkeyPatch) -> list[TopicPartition]:
    """The partitions judged by `idle_for` from now on."""
    judged: list[TopicPartition] = []
    real = CachedPartition.idle_for

    def counted(self: CachedPartition, *args: Any) -> bool:
        judged.append(self.tp)
        return real(self, *args)

    monkeypatch.setattr(CachedPartition, "idle_for", counted)
    return judged


def test_quiet_partitions_are_looked_at_only_when_reported_or_swept(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower = _quiet_follower(broker)
    broker.clock.advance(SWEEP_MS)
    follower.fetch()  # a sweep: every partition judged, all quiet
    judged = _looked_at(monkeypatch)
    for _ in range(3):
        follower.fetch()
    assert judged == []  # nothing reported, no sweep due: none looked at
    append(broker, TPS[1])
    follower.fetch()
    assert judged == [TPS[1]] and follower.answered == [TPS[1]]
    judged.clear()
    broker.clock.advance(SWEEP_MS)
    follower.fetch()
    assert sorted(judged) == TPS  # the sweep


def test_what_no_report_covers_is_told_by_the_sweep(broker: Broker) -> None:
    follower = _quiet_follower(broker)
    other = Follower(broker, 3, session=True)
    append(broker, TPS[0], 4)
    for _ in range(3):  # both followers reach 4, the high watermark follows, broker 2 is told
        follower.fetch()
        other.fetch()
    assert follower.hw[TPS[0]] == 4
    follower.fetch()
    # Retention moves the log start without a report (DeleteRecords reports it).
    broker.replicas.partition(TPS[0]).delete_records_before(2)
    follower.fetch()
    assert follower.start[TPS[0]] == 0  # not yet: the partition is quiet
    broker.clock.advance(SWEEP_MS)
    follower.fetch()
    assert follower.answered == [TPS[0]] and follower.start[TPS[0]] == 2


def test_a_parked_follower_fetch_waits_on_its_session_and_wakes_on_any_partition(
    broker: Broker,
) -> None:
    follower = _quiet_follower(broker)
    purgatory = Purgatory()
    done: list[Any] = []
    broker.wake_listeners.append(lambda keys: done.extend(purgatory.on_append(keys)))
    handler = follower.handler
    assert handler is not None
    session = broker.context.fetch_sessions.get(handler.session_id, 0)
    assert session is not None

    def waited(delayed: Delayed) -> Any:
        assert delayed.keys == (session.key,)  # one key, not one per partition
        purgatory.watch(delayed)
        append(broker, TPS[3], 2)
        [(op, answer)] = done
        assert op is delayed
        return answer

    follower.fetch(max_wait_ms=500, waited=waited)
    assert follower.answered == [TPS[3]] and follower.end[TPS[3]] == 2


@pytest.mark.parametrize("then", ["records", "new leader"])
def test_a_parked_fetch_is_not_read_again_for_a_high_watermark_move(
    broker: Broker, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """The follower's next fetch names the partition it just got records of (a new position)
    and parks; the other follower's fetch then moves the high watermark, which wakes it. Only
    records, or a leadership or log start that moved since its last read, are worth a read."""
    follower = _quiet_follower(broker)
    other = Follower(broker, 3, session=True)
    other.fetch()
    append(broker, TPS[0])
    follower.fetch()  # gets the batch: its next fetch names TPS[0] at 1
    assert follower.end[TPS[0]] == 1
    purgatory = Purgatory()
    done: list[Any] = []
    broker.wake_listeners.append(lambda keys: done.extend(purgatory.on_append(keys)))
    reads: list[TopicPartition] = []
    real = broker.replicas.follower_fetch

    def counted(replica_id: int, tp: TopicPartition, *args: Any, **kwargs: Any) -> Any:
        if replica_id == 2:
            reads.append(tp)
        return real(replica_id, tp, *args, **kwargs)

    def waited(delayed: Delayed) -> Any:
        purgatory.watch(delayed)
        reads.clear()
        other.fetch()  # gets the batch
        other.fetch()  # at 1: the high watermark moves to 1 and wakes the parked fetch
        assert broker.replicas.partition(TPS[0]).high_watermark == 1
        assert done == [] and reads == []
        if then == "records":
            append(broker, TPS[0])
        else:
            broker.replicas.apply_partition_state(
                TPS[0], ReplicaView(1, 1, (1, 2, 3), 1, (1, 2, 3), 2)
            )
            broker.replicas.notify_appended([TPS[0]])
        [(op, answer)] = done
        assert op is delayed and reads == [TPS[0]]
        return answer

    monkeypatch.setattr(broker.replicas, "follower_fetch", counted)
    response = follower.fetch(max_wait_ms=500, waited=waited, errors=True)
    [part] = [p for t in response.responses for p in t.partitions]
    if then == "records":
        assert (part.error_code, follower.end[TPS[0]], follower.hw[TPS[0]]) == (0, 2, 1)
    else:
        assert part.error_code == ErrorCode.fenced_leader_epoch


def test_a_closed_session_is_no_longer_reported_to(broker: Broker) -> None:
    cache = broker.context.fetch_sessions
    follower = _quiet_follower(broker)
    handler = follower.handler
    assert handler is not None
    session = cache.get(handler.session_id, 0)
    assert session is not None
    assert session.key in cache.touched([TPS[0]])
    consumer = cache.open(False, now_ms=0)  # a consumer's session is never reported to
    assert consumer is not None
    consumer.add([_Topic("data", [_Part(0)])])
    assert consumer.key not in cache.touched([TPS[0]])
    session.forget([_Forgotten("data", [0])])
    assert session.key not in cache.touched([TPS[0]])
    assert session.key in cache.touched([TPS[1]])
    cache.remove(session.id)
    assert session.key not in cache.touched(TPS)


class _Part:
    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.current_leader_epoch = 0
        self.fetch_offset = 0
        self.last_fetched_epoch = -1
        self.log_start_offset = 0
        self.partition_max_bytes = 1 << 20


class _Topic:
    def __init__(self, topic: str, partitions: list[_Part]) -> None:
        self.topic = topic
        self.partitions = partitions


class _Forgotten:
    def __init__(self, topic: str, partitions: list[int]) -> None:
        self.topic = topic
        self.partitions = partitions
