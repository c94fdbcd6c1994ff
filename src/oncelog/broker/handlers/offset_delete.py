"""OffsetDelete (47): remove a group's committed offsets of some partitions (KIP-496).

Partitions of unknown topics answer UNKNOWN_TOPIC_OR_PARTITION; the rest go to the group
coordinator, which refuses the whole request for a non-consumer group with members
(NON_EMPTY_GROUP) and single partitions of topics an active member subscribes to
(GROUP_SUBSCRIBED_TO_TOPIC). A group-level error answers no partitions, as Kafka does.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import OffsetDeleteAnswer, OffsetDeleteRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteAnswer:
    runtime = ctx.broker.groups
    if not authz.group(ctx, Op.DELETE, request.group_id):
        denied = ErrorCode.group_authorization_failed
        return {"error_code": denied, "throttle_time": 0, "topics": []}
    order: list[TopicPartition] = []
    codes: dict[TopicPartition, ErrorCode] = {}
    known: list[TopicPartition] = []
    for topic in request.topics:
        image = ctx.broker.replicas.topic(topic.name)
        readable = authz.topic(ctx, Op.READ, topic.name)
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            order.append(tp)
            if not readable:
                codes[tp] = ErrorCode.topic_authorization_failed
            elif image is None or not 0 <= p.partition_index < image.partitions:
                codes[tp] = ErrorCode.unknown_topic_or_partition
            else:
                known.append(tp)
    group_error, result = runtime.coordinator.delete_offsets(request.group_id, known)
    if group_error is not ErrorCode.none:
        return {"error_code": group_error, "throttle_time": 0, "topics": []}
    codes.update(runtime.complete(result))
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in order:
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": codes[tp]}
        )
    return {
        "error_code": ErrorCode.none,
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
