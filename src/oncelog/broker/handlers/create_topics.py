"""CreateTopics (19): validated per topic; `validate_only` checks without creating.

In a cluster the topic's replicas are placed over the live brokers (Kafka's round robin, or
the request's explicit assignment) and the assignment is written to etcd; the answer waits
for that write. The controller then creates the partitions' states (leaders, ISR), which
clients see in Metadata a moment later (LEADER_NOT_AVAILABLE until then, as with Kafka).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import PendingOp, answer_after_writes
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.describe_configs import describe_topic_configs
from oncelog.broker.handlers.metadata import ZERO_UUID
from oncelog.broker.handlers.types import CreateTopicsAnswer, CreateTopicsRequest
from oncelog.broker.purgatory import Delayed
from oncelog.broker.replica_manager import MAX_PARTITIONS_PER_TOPIC, TopicSpec
from oncelog.config import validate_topic_configs, validate_topic_name
from oncelog.errors import (
    ErrorCode,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    KafkaError,
    TopicAlreadyExists,
)
from oncelog.metadata.placement import validate_manual_assignment
from oncelog.security.acl import AclOperation as Op


def _may_create(ctx: RequestContext, name: str) -> bool:
    """Kafka: Create on the cluster, or on the topic."""
    return authz.authorize_cluster(ctx, Op.CREATE) or authz.topic(ctx, Op.CREATE, name)


def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsAnswer | Delayed:
    if ctx.broker.cluster_ops is not None:
        return _handle_in_cluster(ctx, request)
    replicas = ctx.broker.replicas
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        result: dict[str, Any] = {
            "name": topic.name,
            "topic_id": ZERO_UUID,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        if not _may_create(ctx, topic.name):
            result["error_code"] = ErrorCode.topic_authorization_failed
            results.append(result)
            continue
        try:
            if counts[topic.name] > 1:
                raise InvalidRequest(f"Topic {topic.name} appears more than once in the request")
            spec = _spec(ctx, topic)
            partitions, _ = replicas.validate_topic(spec)
            # Kafka's cross-key rules see the broker's defaults under the topic's overrides.
            validate_topic_configs(spec.configs, ctx.broker.replicas.topic_defaults())
            if request.validate_only:
                result.update(num_partitions=partitions, replication_factor=1)
            else:
                image = replicas.create_topic(spec)
                result.update(
                    topic_id=image.topic_id,
                    num_partitions=image.partitions,
                    replication_factor=1,
                    configs=[
                        {
                            "name": c["name"],
                            "value": c["value"],
                            "read_only": False,
                            "config_source": c["config_source"],
                            "is_sensitive": False,
                        }
                        for c in describe_topic_configs(ctx, topic.name, None, False)
                    ],
                )
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "topics": results}


def _spec(ctx: RequestContext, topic: Any) -> TopicSpec:
    partitions = topic.num_partitions
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequest(
                "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [ctx.broker.node.node_id]:
                raise InvalidReplicationFactor(
                    f"Replica assignment {list(assignment.broker_ids)} names unknown brokers"
                )
        partitions = len(topic.assignments)
    configs = {c.name: c.value for c in topic.configs}
    replication = -1 if topic.assignments else topic.replication_factor
    return TopicSpec(topic.name, partitions, replication, configs)


def _handle_in_cluster(
    ctx: RequestContext, request: CreateTopicsRequest
) -> CreateTopicsAnswer | Delayed:
    cluster, ops = ctx.broker.cluster, ctx.broker.cluster_ops
    assert cluster is not None and ops is not None
    counts = Counter(t.name for t in request.topics)
    results: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], PendingOp]] = []
    for topic in request.topics:
        result: dict[str, Any] = {
            "name": topic.name,
            "topic_id": ZERO_UUID,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        results.append(result)
        if not _may_create(ctx, topic.name):
            result["error_code"] = ErrorCode.topic_authorization_failed
            continue
        try:
            if counts[topic.name] > 1:
                raise InvalidRequest(f"Topic {topic.name} appears more than once in the request")
            configs = {c.name: c.value for c in topic.configs}
            validate_topic_name(topic.name)
            if topic.name in cluster.topics:
                raise TopicAlreadyExists(f"Topic '{topic.name}' already exists.")
            validate_topic_configs(configs, ctx.broker.replicas.topic_defaults())
            assignment = _placement(ctx, topic)
            result.update(num_partitions=len(assignment), replication_factor=len(assignment[0]))
            if not request.validate_only:
                kept = {k: v for k, v in configs.items() if v is not None}
                pending.append((result, ops.create_topic(topic.name, assignment, kept, False)))
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
    response: CreateTopicsAnswer = {"throttle_time": 0, "topics": results}
    if not pending:
        return response

    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 1)
    deadline = ctx.broker.clock.monotonic_ms() + timeout_ms
    return answer_after_writes(response, pending, deadline, "the topic")


def _placement(ctx: RequestContext, topic: Any) -> tuple[tuple[int, ...], ...]:
    """The replicas of each partition: the request's own, or Kafka's round robin."""
    cluster, ops = ctx.broker.cluster, ctx.broker.cluster_ops
    assert cluster is not None and ops is not None
    live = cluster.live_broker_ids()
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequest(
                "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
        ordered = sorted(topic.assignments, key=lambda a: a.partition_index)
        manual = [list(a.broker_ids) for a in ordered]
        validate_manual_assignment(manual, live)
        return tuple(tuple(r) for r in manual)
    config = ctx.broker.config
    partitions = config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
    if not 0 < partitions <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitions(f"Number of partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}")
    factor = topic.replication_factor
    if factor == -1:
        factor = config.get_int("default.replication.factor")
    return cluster.place(ops, partitions, factor)
