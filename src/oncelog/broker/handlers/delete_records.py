"""DeleteRecords (21): move a partition's log start offset forward (-1 = high watermark)."""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DeleteRecordsAnswer, DeleteRecordsRequest
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsAnswer:
    replicas = ctx.broker.replicas
    topics = []
    moved: list[TopicPartition] = []
    for topic in request.topics:
        partitions = []
        allowed = authz.topic(ctx, Op.DELETE, topic.name)
        for p in topic.partitions:
            entry: dict[str, Any] = {
                "partition_index": p.partition_index,
                "low_watermark": -1,
                "error_code": ErrorCode.none,
            }
            if not allowed:
                entry["error_code"] = ErrorCode.topic_authorization_failed
                partitions.append(entry)
                continue
            try:
                tp = TopicPartition(topic.name, p.partition_index)
                plog = replicas.partition(tp)
                replicas.leader_epoch(tp)  # only a leader moves a log start (followers follow)
                target = plog.high_watermark if p.offset == -1 else p.offset
                entry["low_watermark"] = plog.delete_records_before(target)
                moved.append(tp)
            except KafkaError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"name": topic.name, "partitions": partitions})
    if moved:
        replicas.logs.checkpoint_soon()  # log-start-offset-checkpoint, off the event loop
        # Parked fetches and follower sessions learn the new log start now, not at their
        # next wake-up or sweep.
        replicas.notify_appended(moved)
    return {"throttle_time": 0, "topics": topics}
