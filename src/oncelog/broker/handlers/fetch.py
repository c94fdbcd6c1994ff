"""Fetch (1): stored batches as bytes, with min_bytes / max_wait_ms long polling.

Limits follow KIP-74: partitions are filled in request order until `max_bytes` (for a
consumer at most the broker's `fetch.max.bytes`); each gets at most `partition_max_bytes`,
except that the first non-empty partition always returns at least one whole batch so a batch
larger than the limits cannot block a consumer.
If fewer than `min_bytes` are ready, the request waits in the purgatory until an append to
one of its partitions or `max_wait_ms`. A woken wait first checks, without reading, whether any
of its partitions has something new past its fetch offset (or changed leadership) and only
then reads again, as Kafka's DelayedFetch does: an acks=all produce wakes the followers'
parked fetches on every high-watermark move, which is not new data for them. Fetch sessions
(KIP-227) are not offered: the response carries session id 0, which tells clients to send full
fetch requests.

A fetch with `replica_id` >= 0 is a follower's, in a cluster only: it reads past the high
watermark up to the leader's log end, and tells the leader how far the follower got (which
moves the high watermark and the ISR). From anyone that is not a replica of the partition
it is refused per partition (NOT_LEADER_OR_FOLLOWER); on a single node, whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.types import READ_COMMITTED, READ_UNCOMMITTED, TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition
    from oncelog.replication.leader import LeaderState
    from oncelog.storage.partition_log import PartitionLog


def handle(ctx: RequestContext, request: Any) -> Any:
    if request.replica_id >= 0 and not ctx.broker.replicas.clustered:
        return _top_level_error(ErrorCode.not_leader_or_follower)
    session_id = getattr(request, "session_id", 0)
    if session_id != 0:
        return _top_level_error(ErrorCode.fetch_session_id_not_found)
    max_wait = int(request.max_wait.total_seconds() * 1000)
    tps = tuple(TopicPartition(t.topic, p.partition) for t in request.topics for p in t.partitions)
    denied = _unauthorized(ctx, request)

    def attempt(force: bool) -> dict[str, Any] | None:
        response, size, errors = _collect(ctx, request, denied)
        if force or errors or size >= request.min_bytes or max_wait <= 0 or not tps:
            return response
        return None

    ready = attempt(False)
    if ready is not None:
        return ready
    waiting = _Waiting(ctx, request)

    def woken(force: bool) -> dict[str, Any] | None:
        if not force and not waiting.changed():
            return None
        answer = attempt(force)
        if answer is None:
            waiting.note()
        return answer

    return Delayed(woken, ctx.broker.clock.monotonic_ms() + max_wait, tps)


class _Waiting:
    """What a parked fetch's partitions looked like when it last read them, to tell cheaply
    whether a wake-up can change its answer: a readable end that moved (the log end for a
    follower, the high watermark or last stable offset for a consumer), a log start that
    moved, or a log or leadership that is no longer the one it read from."""

    __slots__ = ("committed", "follower", "parts", "replicas")

    def __init__(self, ctx: RequestContext, request: Any) -> None:
        replicas = ctx.broker.replicas
        self.replicas = replicas
        self.follower = request.replica_id >= 0
        self.committed = getattr(request, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
        by_tp = replicas.replicas_by_tp if replicas.clustered else {}
        #: Per partition: (tp, replica, its leader state, leader epoch, log, readable end,
        #: log start) as last read.
        self.parts: list[_Seen] = []
        for topic in request.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
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


def _unauthorized(ctx: RequestContext, request: Any) -> dict[str, ErrorCode]:
    """A follower's fetch needs ClusterAction on the cluster, a consumer's Read on each topic
    (Kafka's KafkaApis.handleFetchRequest); the refused topics and their error."""
    if request.replica_id >= 0:
        if authz.authorize_cluster(ctx, Op.CLUSTER_ACTION):
            return {}
        return {t.topic: ErrorCode.cluster_authorization_failed for t in request.topics}
    return {
        t.topic: ErrorCode.topic_authorization_failed
        for t in request.topics
        if not authz.topic(ctx, Op.READ, t.topic)
    }


def _collect(
    ctx: RequestContext, request: Any, denied: dict[str, ErrorCode]
) -> tuple[dict[str, Any], int, bool]:
    replicas = ctx.broker.replicas
    read_committed = getattr(request, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
    budget = request.max_bytes if request.max_bytes > 0 else 0
    if request.replica_id < 0:  # a consumer's, capped as Kafka caps it
        budget = min(budget, ctx.broker.config.get_int("fetch.max.bytes"))
    total = 0
    errors = False
    responses: list[dict[str, Any]] = []
    replica_id = request.replica_id
    follower = replica_id >= 0
    # One clock read per request: a follower's fetch notes its position in every partition.
    now = ctx.broker.clock.monotonic_ms() if follower else 0
    for topic in request.topics:
        name = topic.topic
        refused = denied.get(name)
        partitions = []
        for p in topic.partitions:
            index = p.partition
            if refused is not None:
                errors = True
                partitions.append(_error_entry(index, refused, read_committed))
                continue
            tp = TopicPartition(name, index)
            epoch = getattr(p, "current_leader_epoch", -1)
            limit = max(min(p.partition_max_bytes, budget - total), 0)
            try:
                if follower:
                    result = replicas.follower_fetch(
                        replica_id, tp, p.fetch_offset, epoch, limit, now_ms=now
                    )
                else:
                    replicas.check_leader_epoch(tp, epoch)
                    result = replicas.read(
                        tp,
                        p.fetch_offset,
                        limit,
                        min_one=total == 0,
                        read_committed=read_committed,
                    )
            except KafkaError as exc:
                errors = True
                partitions.append(_error_entry(index, exc.code, read_committed))
                continue
            records = result.records
            aborted: list[dict[str, int]] | None = [] if read_committed else None
            if result.aborted:
                aborted = [
                    {"producer_id": t.producer_id, "first_offset": t.first_offset}
                    for t in result.aborted
                ]
            partitions.append(
                {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "high_watermark": result.high_watermark,
                    "last_stable_offset": result.last_stable_offset,
                    "log_start_offset": result.log_start_offset,
                    "aborted_transactions": aborted,
                    "preferred_read_replica": -1,
                    "records": records,
                }
            )
            total += len(records)
        responses.append({"topic": name, "partitions": partitions})
    response = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": responses,
    }
    return response, total, errors


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


def _top_level_error(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": []}
