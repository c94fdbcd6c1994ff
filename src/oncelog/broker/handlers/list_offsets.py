"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3) and lookup by timestamp."""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import ListOffsetsAnswer, ListOffsetsRequest
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.types import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    READ_COMMITTED,
    READ_UNCOMMITTED,
    TopicPartition,
)


def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsAnswer:
    read_committed = getattr(request, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
    topics = []
    for topic in request.topics:
        partitions = []
        allowed = authz.topic(ctx, Op.DESCRIBE, topic.name)
        for p in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "error_code": ErrorCode.none,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            if not allowed:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                partitions.append(entry)
                continue
            try:
                tp = TopicPartition(topic.name, p.partition_index)
                ctx.broker.replicas.check_leader_epoch(tp, getattr(p, "current_leader_epoch", -1))
                timestamp, offset = _lookup(ctx, tp, p.timestamp, read_committed)
                entry.update(
                    timestamp=timestamp,
                    offset=offset,
                    leader_epoch=_epoch(ctx, tp, p.timestamp, offset),
                )
            except KafkaError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}


def _lookup(
    ctx: RequestContext, tp: TopicPartition, timestamp: int, read_committed: bool
) -> tuple[int, int]:
    plog = ctx.broker.replicas.partition(tp)
    if timestamp == LATEST_TIMESTAMP:
        return -1, plog.last_stable_offset if read_committed else plog.high_watermark
    if timestamp == EARLIEST_TIMESTAMP:
        return -1, plog.log_start_offset
    if timestamp == MAX_TIMESTAMP:
        return plog.max_timestamp_and_offset()
    if timestamp < 0:
        raise InvalidRequest(f"unsupported special timestamp {timestamp}")
    found = plog.offset_for_timestamp(timestamp)
    if found is None:
        return -1, -1
    offset, ts = found
    return ts, offset


def _epoch(ctx: RequestContext, tp: TopicPartition, timestamp: int, offset: int) -> int:
    """The leader epoch the answer's offset belongs to, as Kafka answers it: the log's
    latest epoch for LATEST, else the epoch of the record at that offset (the first cached
    epoch for EARLIEST). A consumer validates its position against this epoch after a
    leader change, so it must be the epoch that wrote the data, not today's leader's."""
    if offset < 0:
        return -1
    cache = ctx.broker.replicas.partition(tp).leader_epoch_cache
    if timestamp == LATEST_TIMESTAMP:
        return cache.latest_epoch
    return cache.epoch_for_offset(offset)
