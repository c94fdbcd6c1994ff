"""FindCoordinator (10): where the group or transaction coordinator of a key lives.

Groups (key type 0) and transactional ids (key type 1) are coordinated by this node; the
transaction log is created on the first transactional request. Other key types get
INVALID_REQUEST. Advertising the API matters beyond groups: librdkafka enables lz4 only for
brokers that list it. In a cluster a group's coordinator is the leader of its
`__consumer_offsets` partition (the topic is created on first use); the transaction
coordinator is not offered there yet (COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.group_runtime import OFFSETS_TOPIC
from oncelog.broker.internal_topics import internal_topic_configs
from oncelog.coordinator.group.records import partition_for
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

GROUP = 0
TRANSACTION = 1
_MESSAGE = "Unknown coordinator key type."


def _answer(ctx: RequestContext, key: str, key_type: int) -> dict[str, Any]:
    if key_type == GROUP and ctx.broker.cluster is not None:
        return _group_coordinator_in_cluster(ctx, key)
    if key_type == TRANSACTION and ctx.broker.cluster is not None:
        # The transaction coordinator does not run across brokers yet: clients retry.
        return _unavailable(
            "oncelog runs the transaction coordinator on single-node brokers only (not yet "
            "in a cluster)"
        )
    if key_type in (GROUP, TRANSACTION):
        if key_type == TRANSACTION:
            ctx.broker.txns.ensure_topic()
        node = ctx.broker.node
        return {
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
    return {
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": ErrorCode.invalid_request,
        "error_message": _MESSAGE,
    }


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    key_type = int(getattr(request, "key_type", GROUP))
    keys = getattr(request, "coordinator_keys", None)
    if keys is not None:
        return {
            "throttle_time": 0,
            "coordinators": [{"key": key, **_answer(ctx, key, key_type)} for key in keys],
        }
    return {"throttle_time": 0, **_answer(ctx, request.key, key_type)}


def _group_coordinator_in_cluster(ctx: RequestContext, group_id: str) -> dict[str, Any]:
    """The leader of the group's `__consumer_offsets` partition; the topic is created
    (replicated, offsets.topic.replication.factor) on the first request, as Kafka does."""
    cluster, ops, config = ctx.broker.cluster, ctx.broker.cluster_ops, ctx.broker.config
    assert cluster is not None and ops is not None
    assignment = cluster.topics.get(OFFSETS_TOPIC)
    if assignment is None:
        factor = config.get_int("offsets.topic.replication.factor")
        live = len(cluster.brokers)
        if live < factor:
            return _unavailable(
                f"{OFFSETS_TOPIC} needs offsets.topic.replication.factor={factor} brokers; "
                f"{live} are alive"
            )
        partitions = config.get_int("offsets.topic.num.partitions")
        segment_bytes = config.get_int("offsets.topic.segment.bytes")
        ops.create_topic(
            OFFSETS_TOPIC,
            cluster.place(ops, partitions, factor),
            internal_topic_configs(segment_bytes),
            True,
        )
        return _unavailable(f"creating {OFFSETS_TOPIC}")
    p = partition_for(group_id, assignment.partitions)
    state = cluster.state(TopicPartition(OFFSETS_TOPIC, p))
    leader = cluster.brokers.get(state.leader) if state is not None else None
    if leader is None:
        return _unavailable(f"{OFFSETS_TOPIC}-{p} has no leader")
    return {
        "node_id": leader.node_id,
        "host": leader.host,
        "port": leader.port,
        "error_code": ErrorCode.none,
        "error_message": None,
    }


def _unavailable(why: str) -> dict[str, Any]:
    return {
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": ErrorCode.coordinator_not_available,
        "error_message": why,
    }
