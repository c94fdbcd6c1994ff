"""DescribeProducers (61, KIP-664): the producer state of partitions, for finding hanging
transactions (`current_txn_start_offset` >= 0 is an open transaction on that partition)."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeProducersAnswer, DescribeProducersRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersAnswer:
    topics = []
    for topic in request.topics:
        partitions: list[dict[str, object]] = []
        allowed = authz.topic(ctx, Op.READ, topic.name)
        for index in topic.partition_indexes:
            plog = ctx.broker.replicas.logs.get(TopicPartition(topic.name, index))
            if plog is None or not allowed:
                partitions.append(
                    {
                        "partition_index": index,
                        "error_code": ErrorCode.unknown_topic_or_partition
                        if allowed
                        else ErrorCode.topic_authorization_failed,
                        "error_message": None,
                        "active_producers": [],
                    }
                )
                continue
            producers = [
                {
                    "producer_id": entry.producer_id,
                    "producer_epoch": entry.producer_epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.current_txn_first_offset,
                }
                for entry in plog.producer_state.producers.values()
            ]
            partitions.append(
                {
                    "partition_index": index,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "active_producers": producers,
                }
            )
        topics.append({"name": topic.name, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
