"""Fetch (1): stored batches as bytes, with min_bytes / max_wait_ms long polling.

Limits follow KIP-74: partitions are filled in request order until `max_bytes` (for a
consumer at most the broker's `fetch.max.bytes`); each gets at most `partition_max_bytes`,
except that the first non-empty partition always returns at least one whole batch so a batch
larger than the limits cannot block a consumer.
If fewer than `min_bytes` are ready, the request waits in the purgatory until an append to
one of its partitions or `max_wait_ms`. A woken wait first checks, without reading, whether any
of its partitions has something new past its fetch offset (or changed leadership) and only
then reads again, as Kafka's DelayedFetch does: a consumer's parked fetch is woken by every
high-watermark move of an acks=all produce, and most wake-ups are not new data for it. A
follower's parked session fetch is not woken by the high-watermark moves its fellow followers'
fetches make (`ReplicaManager.notify_appended`): a high watermark alone never completes it.

Fetch sessions (KIP-227, `broker/fetch_session.py`): a fetch on a session reads the
session's partitions and answers only those with news. A follower's session partition that is
caught up, has no new high watermark or log start and was last answered under the same
leadership is not read at all: the follower's fetch is only noted (it stays caught up for the
ISR), which is all a read would have led to. Such a quiet partition is not even looked at
again until it is reported moved or the session's sweep comes (`SWEEP_MS`), so a follower's
fetch costs what moved, not what it follows.

A fetch with `replica_id` >= 0 is a follower's, in a cluster only: it reads past the high
watermark up to the leader's log end, and tells the leader how far the follower got (which
moves the high watermark and the ISR). From anyone that is not a replica of the partition
it is refused per partition (NOT_LEADER_OR_FOLLOWER); on a single node, whole.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
)
from oncelog.broker.handlers.types import FetchAnswer, FetchRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol import fast_requests
from oncelog.security.acl import AclOperation as Op
from oncelog.types import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.replication.leader import LeaderState
    from oncelog.storage.partition_log import PartitionLog, ReadResult


#: Read once: on CPython 3.11 each `ErrorCode.x` is a Python-level lookup (EnumType.__getattr__).
_NONE = ErrorCode.none
#: `tuple.__new__(TopicPartition, (topic, index))`: the NamedTuple without its Python-level
#: `__new__`, for the one made per partition of every Fetch.
_new_tuple = tuple.__new__


def handle(ctx: RequestContext, request: FetchRequest) -> FetchAnswer | Delayed:
    if request.replica_id >= 0 and not ctx.broker.replicas.clustered:
        return _top_level_error(ErrorCode.not_leader_or_follower)
    follower = request.replica_id >= 0
    opened = _session(ctx, request, follower)
    if isinstance(opened, ErrorCode):
        return _top_level_error(opened)
    session, incremental = opened
    topics: list[tuple[str, Iterable[Any]]]
    if session is None:
        topics = [(t.topic, t.partitions) for t in request.topics]
        tps = tuple([_new_tuple(TopicPartition, (n, p.partition)) for n, ps in topics for p in ps])
    else:
        # The session's lists stay as they are until a request adds or forgets partitions,
        # which is never while this one waits (its answer comes first).
        layout, tps = session.layout()
        topics = list(layout)
    max_wait = fast_requests.fetch_max_wait_ms(request)
    denied = _unauthorized(ctx, follower, [name for name, _ in topics])
    fetch = _Fetch(ctx, request, topics, denied, session, incremental)

    # A consumer's min_bytes beyond what it may be sent (fetch.max.bytes, its quota's
    # allowance) would only make it wait out max_wait: Kafka caps it so.
    min_bytes = request.min_bytes
    if request.replica_id < 0:
        min_bytes = min(min_bytes, fetch.budget)

    def attempt(force: bool) -> FetchAnswer | None:
        response, size, errors = fetch.collect()
        if force or errors or size >= min_bytes or max_wait <= 0 or not tps:
            fetch.sent()
            return response
        return None

    ready = attempt(False)
    if ready is not None:
        return ready
    if fetch.follower_session:
        # Woken by appends, log start moves and state changes of its partitions, and by
        # high-watermark moves not made by a follower's fetch: read again only when a
        # partition has records past the follower's position, or its log start or leadership
        # moved.

        def woken_follower(force: bool) -> FetchAnswer | None:
            if not force and not fetch.may_have_records():
                return None
            return attempt(force)

        # One key, not one per partition: a report on any of them wakes the session's.
        assert session is not None
        deadline = ctx.broker.clock.monotonic_ms() + max_wait
        return Delayed(woken_follower, deadline, (session.key,))
    waiting = _Waiting(ctx, follower, fetch.read_committed, topics)

    def woken(force: bool) -> FetchAnswer | None:
        if not force and not waiting.changed():
            return None
        answer = attempt(force)
        if answer is None:
            waiting.note()
        return answer

    return Delayed(woken, ctx.broker.clock.monotonic_ms() + max_wait, tps)


def _session(
    ctx: RequestContext, request: FetchRequest, follower: bool
) -> tuple[FetchSession | None, bool] | ErrorCode:
    """The request's fetch session (None: a full fetch without one) and whether the fetch is
    incremental, after applying the request to it; or the top-level error."""
    session_id = getattr(request, "session_id", INVALID_SESSION_ID)
    epoch = getattr(request, "session_epoch", FINAL_EPOCH)
    sessions = ctx.broker.fetch_sessions
    now = ctx.broker.clock.monotonic_ms()
    if epoch > INITIAL_EPOCH:
        session = sessions.get(session_id, now)
        if session is None:
            return ErrorCode.fetch_session_id_not_found
        if epoch != session.next_epoch:
            return ErrorCode.invalid_fetch_session_epoch
        session.next_epoch = epoch + 1 if epoch < _MAX_EPOCH else 1
        session.forget(getattr(request, "forgotten_topics_data", ()))  # v7+, as sessions are
        session.add(request.topics)
        return session, True
    if session_id != INVALID_SESSION_ID:
        sessions.remove(session_id)
    if epoch != INITIAL_EPOCH:
        return None, False
    session = sessions.open(follower, now)
    if session is not None:
        session.add(request.topics)
    return session, False


_MAX_EPOCH = 2**31 - 1


class _Waiting:
    """What a parked fetch's partitions looked like when it last read them, to tell cheaply
    whether a wake-up can change its answer: a readable end that moved (the log end for a
    follower, the high watermark or last stable offset for a consumer), a log start that
    moved, or a log or leadership that is no longer the one it read from."""

    __slots__ = ("committed", "follower", "parts", "replicas")

    def __init__(
        self,
        ctx: RequestContext,
        follower: bool,
        committed: bool,
        topics: list[tuple[str, Iterable[Any]]],
    ) -> None:
        replicas = ctx.broker.replicas
        self.replicas = replicas
        self.follower = follower
        self.committed = committed
        by_tp = replicas.replicas_by_tp if replicas.clustered else {}
        #: Per partition: (tp, replica, its leader state, leader epoch, log, readable end,
        #: log start) as last read.
        self.parts: list[_Seen] = []
        for name, parts in topics:
            for p in parts:
                tp = TopicPartition(name, p.partition)
                replica = by_tp.get(tp)
                leader = replica.leader if replica is not None else None
                epoch = replica.leader_epoch if replica is not None else -1
                self.parts.append((tp, replica, leader, epoch, *self._now(tp)))

    def _now(self, tp: TopicPartition) -> tuple[PartitionLog | None, int, int]:
        plog = self.replicas.logs.get(tp)
        if plog is None:
            return None, -1, -1
        if self.follower:
            return plog, plog.log_end_offset, plog.log_start_offset
        if self.committed:
            return plog, plog.last_stable_offset, plog.log_start_offset
        return plog, plog.high_watermark, plog.log_start_offset

    def note(self) -> None:
        self.parts = [(tp, r, ls, e, *self._now(tp)) for tp, r, ls, e, *_ in self.parts]

    def changed(self) -> bool:
        by_tp = self.replicas.replicas_by_tp
        for tp, replica, leader, epoch, plog, end, start in self.parts:
            if replica is not None:
                if replica.leader is not leader or replica.leader_epoch != epoch:
                    return True
            elif by_tp.get(tp) is not None:
                return True
            if (plog, end, start) != self._now(tp):
                return True
        return False


_Seen = tuple[
    TopicPartition,
    "Partition | None",
    "LeaderState | None",
    int,
    "PartitionLog | None",
    int,
    int,
]


def _unauthorized(ctx: RequestContext, follower: bool, topics: list[str]) -> dict[str, ErrorCode]:
    """A follower's fetch needs ClusterAction on the cluster, a consumer's Read on each topic
    (Kafka's KafkaApis.handleFetchRequest); the refused topics and their error."""
    if not authz.enabled(ctx):
        return {}
    if follower:
        if authz.authorize_cluster(ctx, Op.CLUSTER_ACTION):
            return {}
        return {t: ErrorCode.cluster_authorization_failed for t in topics}
    return {
        t: ErrorCode.topic_authorization_failed for t in topics if not authz.topic(ctx, Op.READ, t)
    }


class _Fetch:
    """One Fetch request's reads, done again on every attempt of a parked fetch; on a session
    what each attempt found is kept apart and becomes the session's only when its answer is
    sent (`sent`)."""

    __slots__ = (
        "_answered",
        "budget",
        "ctx",
        "denied",
        "follower_session",
        "incremental",
        "now",
        "read_committed",
        "request",
        "session",
        "topics",
    )

    def __init__(
        self,
        ctx: RequestContext,
        request: FetchRequest,
        topics: list[tuple[str, Iterable[Any]]],
        denied: dict[str, ErrorCode],
        session: FetchSession | None,
        incremental: bool,
    ) -> None:
        self.ctx = ctx
        self.request = request
        self.topics = topics
        self.denied = denied
        self.session = session
        self.incremental = incremental
        self.follower_session = session is not None and request.replica_id >= 0
        self.read_committed = (
            getattr(request, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
        )
        self.now = 0
        budget = request.max_bytes if request.max_bytes > 0 else 0
        if request.replica_id < 0:  # a consumer's, capped as Kafka caps it
            budget = min(budget, ctx.broker.config.get_int("fetch.max.bytes"))
            if ctx.broker.quotas.enabled:  # and to what its quota allows in one window
                budget = min(budget, ctx.broker.quotas.window_allowance(ctx))
        self.budget = budget
        #: Per session partition read by the last attempt: (its state, error, high
        #: watermark, log start, leader state answered under).
        self._answered: list[tuple[CachedPartition, int, int, int, LeaderState | None]] = []

    def sent(self) -> None:
        node_id = self.request.replica_id
        for cached, error, hw, start, leader in self._answered:
            cached.answered(error, hw, start, leader, node_id)
        self._answered = []

    def collect(self) -> tuple[FetchAnswer, int, bool]:
        read_committed = self.read_committed
        denied = self.denied
        session = self.session
        answered = self._answered = []
        total = 0
        errors = False
        responses: list[dict[str, Any]] = []
        # One clock read per request: a follower's fetch notes its position in every partition.
        replica_id = self.request.replica_id
        self.now = self.ctx.broker.clock.monotonic_ms() if replica_id >= 0 else 0
        by_tp = self.ctx.broker.replicas.replicas_by_tp
        follower_session = self.follower_session
        skip_idle = follower_session and self.incremental
        for name, parts in self._to_look_at(skip_idle):
            refused = denied.get(name)
            partitions = []
            for p in parts:
                index = p.partition
                code: int | None = refused
                leader: LeaderState | None = None
                if code is None:
                    if session is None:
                        tp = _new_tuple(TopicPartition, (name, index))
                    else:
                        tp = p.tp
                        if skip_idle and session.judge(p, by_tp, replica_id, self.now):
                            continue
                        if follower_session:
                            replica = by_tp.get(tp)
                            leader = replica.leader if replica is not None else None
                    try:
                        limit = min(p.partition_max_bytes, self.budget - total)
                        limit = limit if limit > 0 else 0
                        result = self._read(tp, p, limit, total == 0)
                    except KafkaError as exc:
                        code = exc.code
                if code is not None:
                    errors = True
                    partitions.append(_error_entry(index, code, read_committed))
                    if session is not None:
                        answered.append((p, code, -1, -1, None))
                    continue
                records = result.records
                if session is not None:
                    hw = result.high_watermark
                    start = result.log_start_offset
                    answered.append((p, 0, hw, start, leader))
                    if self.incremental and not p.must_answer(0, hw, start, len(records)):
                        continue
                partitions.append(_entry(index, result, read_committed))
                total += len(records)
            if partitions or not self.incremental:
                responses.append({"topic": name, "partitions": partitions})
        return _response(session, responses), total, errors

    def _to_look_at(self, skip_idle: bool) -> list[tuple[str, Iterable[Any]]]:
        """The partitions by topic this attempt reads: the request's or session's, or for an
        incremental follower fetch between sweeps only the stirring ones."""
        if skip_idle and self.session is not None:
            chosen = self.session.to_look_at(self.now)
            if chosen is not None:
                return list(chosen)
        return self.topics

    def may_have_records(self) -> bool:
        """For a parked follower session fetch: whether reading again could answer it (a
        partition with records past the follower's position, or one whose log start or
        leadership changed since the last answer, or for a partition this request named, since
        this fetch last read it); a cheap walk, no reads, of the awake partitions and those
        reported moved (a quiet one nothing was reported on has nothing)."""
        by_tp = self.ctx.broker.replicas.replicas_by_tp
        assert self.session is not None
        seen: dict[int, tuple[LeaderState | None, int]] | None = None
        for p in self.session.stirring():
            replica = by_tp.get(p.tp)
            if replica is None:
                return True
            leader, start = p.sent_leader, p.sent_log_start
            if p.sent_follower is None:
                # Named by this request (a new position) and not answered since: compare
                # with what this fetch's last attempt read instead, which found nothing to
                # send.
                if seen is None:
                    seen = {id(a[0]): (a[4], a[3]) for a in self._answered if a[1] == 0}
                last = seen.get(id(p))
                if last is None:
                    return True
                leader, start = last
            if replica.leader is not leader:
                return True
            plog = replica.log
            if p.fetch_offset != plog.log_end_offset:
                return True
            if plog.log_start_offset != start:
                return True
        return False

    def _read(self, tp: TopicPartition, p: Any, limit: int, first: bool) -> ReadResult:
        replicas = self.ctx.broker.replicas
        replica_id = self.request.replica_id
        epoch = getattr(p, "current_leader_epoch", -1)
        if replica_id >= 0:
            return replicas.follower_fetch(
                replica_id, tp, p.fetch_offset, epoch, limit, now_ms=self.now
            )
        replicas.check_leader_epoch(tp, epoch)
        return replicas.read(
            tp, p.fetch_offset, limit, min_one=first, read_committed=self.read_committed
        )


def _entry(index: int, result: ReadResult, read_committed: bool) -> dict[str, Any]:
    aborted: list[dict[str, int]] | None = [] if read_committed else None
    if result.aborted:
        aborted = [
            {"producer_id": t.producer_id, "first_offset": t.first_offset} for t in result.aborted
        ]
    return {
        "partition_index": index,
        "error_code": _NONE,
        "high_watermark": result.high_watermark,
        "last_stable_offset": result.last_stable_offset,
        "log_start_offset": result.log_start_offset,
        "aborted_transactions": aborted,
        "preferred_read_replica": -1,
        "records": result.records,
    }


def _error_entry(index: int, code: int, read_committed: bool) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": [] if read_committed else None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _response(session: FetchSession | None, responses: list[dict[str, Any]]) -> FetchAnswer:
    return {
        "throttle_time": 0,
        "error_code": _NONE,
        "session_id": session.id if session is not None else INVALID_SESSION_ID,
        "responses": responses,
    }


def _top_level_error(code: ErrorCode) -> FetchAnswer:
    return {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": []}
