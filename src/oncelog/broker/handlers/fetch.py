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

    __slots__ = ("committed", "follower", "parts", "replicas", "seen")

    def __init__(self, ctx: RequestContext, request: Any) -> None:
        replicas = ctx.broker.replicas
        self.replicas = replicas
        self.follower = request.replica_id >= 0
        self.committed = getattr(request, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
        self.parts: list[tuple[TopicPartition, Partition | None, LeaderState | None, int]] = []
        for topic in request.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                replica = replicas.replicas_by_tp.get(tp) if replicas.clustered else None
                leader = replica.leader if replica is not None else None
                epoch = replica.leader_epoch if replica is not None else -1
                self.parts.append((tp, replica, leader, epoch))
        self.seen: list[tuple[PartitionLog | None, int, int]] = []
        self.note()

    def _state(self) -> list[tuple[PartitionLog | None, int, int]]:
        logs = self.replicas.logs
        out: list[tuple[PartitionLog | None, int, int]] = []
        for tp, _, _, _ in self.parts:
            plog = logs.get(tp)
            if plog is None:
                out.append((None, -1, -1))
            elif self.follower:
                out.append((plog, plog.log_end_offset, plog.log_start_offset))
            elif self.committed:
                out.append((plog, plog.last_stable_offset, plog.log_start_offset))
            else:
                out.append((plog, plog.high_watermark, plog.log_start_offset))
        return out

    def note(self) -> None:
        self.seen = self._state()

    def changed(self) -> bool:
        for tp, replica, leader, epoch in self.parts:
            if replica is not None and (
                replica.leader is not leader or replica.leader_epoch != epoch
            ):
                return True
            if replica is None and self.replicas.replicas_by_tp.get(tp) is not None:
                return True
        return self._state() != self.seen


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
    for topic in request.topics:
        partitions = []
        for p in topic.partitions:
            tp = TopicPartition(topic.topic, p.partition)
            entry: dict[str, Any] = {
                "partition_index": p.partition,
                "error_code": ErrorCode.none,
                "high_watermark": -1,
                "last_stable_offset": -1,
                "log_start_offset": -1,
                "aborted_transactions": [] if read_committed else None,
                "preferred_read_replica": -1,
                "records": b"",
            }
            if topic.topic in denied:
                errors = True
                entry["error_code"] = denied[topic.topic]
                partitions.append(entry)
                continue
            try:
                epoch = getattr(p, "current_leader_epoch", -1)
                first = total == 0
                limit = max(min(p.partition_max_bytes, budget - total), 0)
                if request.replica_id >= 0:
                    result = replicas.follower_fetch(
                        request.replica_id, tp, p.fetch_offset, epoch, limit
                    )
                else:
                    replicas.check_leader_epoch(tp, epoch)
                    result = replicas.read(
                        tp,
                        p.fetch_offset,
                        limit,
                        min_one=first,
                        read_committed=read_committed,
                    )
                records = result.records
                entry.update(
                    high_watermark=result.high_watermark,
                    last_stable_offset=result.last_stable_offset,
                    log_start_offset=result.log_start_offset,
                    records=records,
                )
                if result.aborted:
                    entry["aborted_transactions"] = [
                        {"producer_id": t.producer_id, "first_offset": t.first_offset}
                        for t in result.aborted
                    ]
                total += len(records)
            except KafkaError as exc:
                errors = True
                entry["error_code"] = exc.code
            partitions.append(entry)
        responses.append({"topic": topic.topic, "partitions": partitions})
    response = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "session_id": 0,
        "responses": responses,
    }
    return response, total, errors


def _top_level_error(code: ErrorCode) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": code, "session_id": 0, "responses": []}
