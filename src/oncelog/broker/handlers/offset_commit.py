"""OffsetCommit (8): store a group's consumed positions in `__consumer_offsets`.

Members of a managed group are fenced by generation and member id (ILLEGAL_GENERATION,
UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID); consumers without group management commit with
generation -1 to a group that has no members.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import (
    OffsetCommitAnswer,
    OffsetCommitRequest,
    TxnOffsetCommitRequest,
)
from oncelog.coordinator.group.records import OffsetValue
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitAnswer:
    runtime = ctx.broker.groups
    order, offsets, errors = requested_offsets(ctx, request)
    if not authz.group(ctx, Op.READ, request.group_id):
        return partition_errors_response(
            order, dict.fromkeys(order, ErrorCode.group_authorization_failed)
        )
    if offsets:
        result = runtime.coordinator.commit_offsets(
            request.group_id,
            request.generation_id_or_member_epoch,
            request.member_id,
            getattr(request, "group_instance_id", None),
            offsets,
        )
        errors.update(runtime.complete(result))
    return partition_errors_response(order, errors)


def requested_offsets(
    ctx: RequestContext, request: OffsetCommitRequest | TxnOffsetCommitRequest
) -> tuple[
    list[TopicPartition], dict[TopicPartition, OffsetValue], dict[TopicPartition, ErrorCode]
]:
    """The partitions of an OffsetCommit or TxnOffsetCommit request in request order, the
    offsets to commit for those that exist and may be Read, and TOPIC_AUTHORIZATION_FAILED
    or UNKNOWN_TOPIC_OR_PARTITION for the rest."""
    now = ctx.broker.clock.wall_ms()
    errors: dict[TopicPartition, ErrorCode] = {}
    offsets: dict[TopicPartition, OffsetValue] = {}
    order: list[TopicPartition] = []
    for topic in request.topics:
        image = ctx.broker.replicas.topic(topic.name)
        readable = authz.topic(ctx, Op.READ, topic.name)
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            order.append(tp)
            if not readable:
                errors[tp] = ErrorCode.topic_authorization_failed
                continue
            if image is None or not 0 <= p.partition_index < image.partitions:
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            epoch = getattr(p, "committed_leader_epoch", -1)
            offsets[tp] = OffsetValue(p.committed_offset, epoch, p.committed_metadata or "", now)
    return order, offsets, errors


def partition_errors_response(
    order: list[TopicPartition], errors: dict[TopicPartition, ErrorCode]
) -> OffsetCommitAnswer:
    """The response body both commit APIs share: an error code per partition, by topic."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in order:
        topics.setdefault(tp.topic, []).append(
            {"partition_index": tp.partition, "error_code": errors[tp]}
        )
    return {
        "throttle_time": 0,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
