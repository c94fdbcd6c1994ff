"""Metadata (3): brokers, topics and partition leadership; auto-creates topics per config.

In a cluster the answer is etcd's view as this broker last saw it: every live broker, the
controller (this broker while none is known), and per partition its leader (-1 and
LEADER_NOT_AVAILABLE when offline), leader epoch, replicas, ISR and the replicas whose
brokers are down.
"""

from __future__ import annotations

import uuid
from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import ClusterView
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import MetadataAnswer, MetadataRequest
from oncelog.broker.replica_manager import LEADER_EPOCH
from oncelog.config import validate_topic_name
from oncelog.errors import ErrorCode, KafkaError
from oncelog.metadata.image import TopicImage
from oncelog.security.acl import AclOperation as Op
from oncelog.security.acl import ResourceType
from oncelog.types import TopicPartition

ZERO_UUID = uuid.UUID(int=0)
OPERATIONS_NOT_REQUESTED = -(2**31)


def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataAnswer:
    broker = ctx.broker
    replicas = broker.replicas
    requested = request.topics
    topics: list[dict[str, Any]] = []
    if requested is None or (ctx.api_version == 0 and not requested):
        # Internal topics too, flagged is_internal, as Kafka answers: clients filter by the flag.
        # Only the topics the principal may Describe: the others are not revealed.
        topics = [
            _describe(ctx, t)
            for t in replicas.metadata.topics.values()
            if authz.topic(ctx, Op.DESCRIBE, t.name)
        ]
    else:
        allow_create = getattr(request, "allow_auto_topic_creation", True)
        for entry in requested:
            topics.append(_lookup(ctx, entry, allow_create))
    if getattr(request, "include_topic_authorized_operations", False):
        for t in topics:
            if t["name"] is not None and t["error_code"] != ErrorCode.topic_authorization_failed:
                t["topic_authorized_operations"] = authz.authorized_operations(
                    ctx, ResourceType.TOPIC, t["name"]
                )
    node = broker.node
    cluster = broker.cluster
    # Each broker's endpoint of the listener the request came in on, as Kafka answers;
    # brokers without that listener are left out.
    listener = ctx.listener_name
    own_host, own_port = node.endpoint(listener) or (node.host, node.port)
    if cluster is not None:
        brokers = [
            {"node_id": b.node_id, "host": ep[0], "port": ep[1], "rack": b.rack}
            for b in cluster.brokers.values()
            if (ep := b.endpoint(listener)) is not None
        ]
        if node.node_id not in cluster.brokers:
            # Its registration expired (etcd unreachable or paused past the session) or is not
            # seen yet; it is still alive and answering. An empty broker list would make clients
            # fail the whole response (librdkafka: "No brokers or topics in metadata").
            brokers.append(
                {"node_id": node.node_id, "host": own_host, "port": own_port, "rack": None}
            )
        cluster_id, controller_id = cluster.cluster_id, cluster.controller_id
        if controller_id < 0:
            # No controller elected or seen yet (a starting cluster, a failover): name this
            # broker, which takes admin requests as any broker does, as Kafka's KRaft brokers
            # name a live broker. librdkafka's admin client that reads -1 waits for the
            # controller on its cached answer and times out (a new cluster's CreateTopics).
            controller_id = node.node_id
    else:
        brokers = [{"node_id": node.node_id, "host": own_host, "port": own_port, "rack": None}]
        cluster_id, controller_id = replicas.metadata.cluster_id, node.node_id
    return {
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": cluster_id,
        "controller_id": controller_id,
        "topics": topics,
        "cluster_authorized_operations": authz.cluster_operations(
            ctx, bool(getattr(request, "include_cluster_authorized_operations", False))
        ),
    }


def _lookup(ctx: RequestContext, entry: Any, allow_create: bool) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    name = entry.name
    topic_id = getattr(entry, "topic_id", None)
    if name is None:
        image = replicas.topic_by_id(topic_id) if topic_id else None
        if image is None:
            return _error(ErrorCode.unknown_topic_id, None, topic_id)
        if not authz.topic(ctx, Op.DESCRIBE, image.name):
            return _error(ErrorCode.topic_authorization_failed, None, topic_id)
        return _describe(ctx, image)
    # Kafka: a topic the principal may not Describe is TOPIC_AUTHORIZATION_FAILED, existing
    # or not; auto-creating one needs Create on the cluster or the topic.
    if not authz.topic(ctx, Op.DESCRIBE, name):
        return _error(ErrorCode.topic_authorization_failed, name, None)
    if (
        allow_create
        and ctx.broker.config.auto_create_topics
        and replicas.topic(name) is None
        and not authz.authorize_cluster(ctx, Op.CREATE)
        and not authz.topic(ctx, Op.CREATE, name)
    ):
        return _error(ErrorCode.topic_authorization_failed, name, None)
    try:
        if ctx.broker.cluster is not None:
            image = replicas.topic(name)
            if image is None and allow_create and ctx.broker.config.auto_create_topics:
                _auto_create_in_cluster(ctx, name)
                return _error(ErrorCode.leader_not_available, name, None)
        else:
            image = replicas.maybe_auto_create(name) if allow_create else replicas.topic(name)
    except KafkaError as exc:
        return _error(exc.code, name, None)
    if image is None:
        return _error(ErrorCode.unknown_topic_or_partition, name, None)
    return _describe(ctx, image)


def _auto_create_in_cluster(ctx: RequestContext, name: str) -> None:
    """Ask etcd for the topic with the broker defaults; clients retry Metadata meanwhile."""
    cluster, ops, config = ctx.broker.cluster, ctx.broker.cluster_ops, ctx.broker.config
    assert cluster is not None and ops is not None
    validate_topic_name(name)
    factor = config.get_int("default.replication.factor")
    ops.create_topic(name, cluster.place(ops, config.num_partitions, factor), {}, False)


def _error(code: ErrorCode, name: str | None, topic_id: uuid.UUID | None) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id or ZERO_UUID,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": OPERATIONS_NOT_REQUESTED,
    }


def _describe(ctx: RequestContext, image: TopicImage) -> dict[str, Any]:
    if ctx.broker.cluster is not None:
        return _describe_replicated(ctx.broker.cluster, image)
    node_id = ctx.broker.node.node_id
    return {
        "error_code": ErrorCode.none,
        "name": image.name,
        "topic_id": image.topic_id,
        "is_internal": image.internal,
        "partitions": [
            {
                "error_code": ErrorCode.none,
                "partition_index": p,
                "leader_id": node_id,
                "leader_epoch": LEADER_EPOCH,
                "replica_nodes": [node_id],
                "isr_nodes": [node_id],
                "offline_replicas": [],
            }
            for p in range(image.partitions)
        ],
        "topic_authorized_operations": OPERATIONS_NOT_REQUESTED,
    }


def _describe_replicated(cluster: ClusterView, image: TopicImage) -> dict[str, Any]:
    assignment = cluster.topics.get(image.name)
    partitions = []
    for p in range(image.partitions):
        replicas = list(assignment.replicas[p]) if assignment and p < assignment.partitions else []
        state = cluster.state(TopicPartition(image.name, p))
        leader = state.leader if state is not None else -1
        partitions.append(
            {
                "error_code": ErrorCode.none if leader >= 0 else ErrorCode.leader_not_available,
                "partition_index": p,
                "leader_id": leader,
                "leader_epoch": state.leader_epoch if state is not None else -1,
                "replica_nodes": replicas,
                "isr_nodes": list(state.isr) if state is not None else [],
                "offline_replicas": [r for r in replicas if r not in cluster.brokers],
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": image.name,
        "topic_id": image.topic_id,
        "is_internal": image.internal,
        "partitions": partitions,
        "topic_authorized_operations": OPERATIONS_NOT_REQUESTED,
    }
