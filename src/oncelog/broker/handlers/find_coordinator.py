"""FindCoordinator (10): where the group or transaction coordinator of a key lives.

Groups (key type 0) and transactional ids (key type 1) are coordinated by this node; the
transaction log is created on the first transactional request. Other key types get
INVALID_REQUEST. Advertising the API matters beyond groups: librdkafka enables lz4 only for
brokers that list it. In a cluster a group's coordinator is the leader of its
`__consumer_offsets` partition, a transactional id's the leader of its
`__transaction_state` partition (each topic is created, replicated, on first use).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import FindCoordinatorAnswer, FindCoordinatorRequest
from oncelog.broker.internal_topics import OFFSETS_TOPIC, internal_topic_configs
from oncelog.broker.txn_runtime import TXN_TOPIC
from oncelog.coordinator.group.records import partition_for
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition

GROUP = 0
TRANSACTION = 1
_MESSAGE = "Unknown coordinator key type."


class _Coordinator(TypedDict):
    """A key's coordinator: the top-level fields before v4, a `coordinators` entry since."""

    node_id: int
    host: str
    port: int
    error_code: int
    error_message: str | None


def _answer(ctx: RequestContext, key: str, key_type: int) -> _Coordinator:
    # Kafka: Describe on the group / transactional id, before anything is created.
    if key_type == GROUP and not authz.group(ctx, Op.DESCRIBE, key):
        return _refused(ErrorCode.group_authorization_failed)
    if key_type == TRANSACTION and not authz.transactional_id(ctx, Op.DESCRIBE, key):
        return _refused(ErrorCode.transactional_id_authorization_failed)
    if key_type == GROUP and ctx.broker.cluster is not None:
        return _coordinator_in_cluster(ctx, key, OFFSETS)
    if key_type == TRANSACTION and ctx.broker.cluster is not None:
        return _coordinator_in_cluster(ctx, key, TRANSACTIONS)
    if key_type in (GROUP, TRANSACTION):
        if key_type == TRANSACTION:
            ctx.broker.txns.ensure_topic()
        node = ctx.broker.node
        host, port = node.endpoint(ctx.listener_name) or (node.host, node.port)
        return {
            "node_id": node.node_id,
            "host": host,
            "port": port,
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


def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorAnswer:
    key_type = int(getattr(request, "key_type", GROUP))
    keys = getattr(request, "coordinator_keys", None)
    if keys is not None:
        return {
            "throttle_time": 0,
            "coordinators": [{"key": key, **_answer(ctx, key, key_type)} for key in keys],
        }
    found = _answer(ctx, getattr(request, "key", ""), key_type)  # v0-3: one key, top level
    return {
        "throttle_time": 0,
        "node_id": found["node_id"],
        "host": found["host"],
        "port": found["port"],
        "error_code": found["error_code"],
        "error_message": found["error_message"],
    }


@dataclass(frozen=True, slots=True)
class _InternalTopic:
    name: str
    replication_factor: str
    partitions: str
    segment_bytes: str
    min_isr: str | None


OFFSETS = _InternalTopic(
    OFFSETS_TOPIC,
    "offsets.topic.replication.factor",
    "offsets.topic.num.partitions",
    "offsets.topic.segment.bytes",
    None,
)
TRANSACTIONS = _InternalTopic(
    TXN_TOPIC,
    "transaction.state.log.replication.factor",
    "transaction.state.log.num.partitions",
    "transaction.state.log.segment.bytes",
    "transaction.state.log.min.isr",
)


def _coordinator_in_cluster(
    ctx: RequestContext, key: str, internal: _InternalTopic
) -> _Coordinator:
    """The leader of the key's internal-topic partition; the topic is created (replicated)
    on the first request, as Kafka does."""
    cluster, ops, config = ctx.broker.cluster, ctx.broker.cluster_ops, ctx.broker.config
    assert cluster is not None and ops is not None
    assignment = cluster.topics.get(internal.name)
    if assignment is None:
        factor = config.get_int(internal.replication_factor)
        live = len(cluster.brokers)
        if live < factor:
            return _unavailable(
                f"{internal.name} needs {internal.replication_factor}={factor} brokers; "
                f"{live} are alive"
            )
        configs = internal_topic_configs(config.get_int(internal.segment_bytes))
        if internal.min_isr is not None:
            configs["min.insync.replicas"] = str(config.get_int(internal.min_isr))
        partitions = config.get_int(internal.partitions)
        ops.create_topic(internal.name, cluster.place(ops, partitions, factor), configs, True)
        return _unavailable(f"creating {internal.name}")
    p = partition_for(key, assignment.partitions)
    state = cluster.state(TopicPartition(internal.name, p))
    leader = cluster.brokers.get(state.leader) if state is not None else None
    endpoint = leader.endpoint(ctx.listener_name) if leader is not None else None
    if leader is None or endpoint is None:
        return _unavailable(f"{internal.name}-{p} has no leader")
    return {
        "node_id": leader.node_id,
        "host": endpoint[0],
        "port": endpoint[1],
        "error_code": ErrorCode.none,
        "error_message": None,
    }


def _refused(code: ErrorCode) -> _Coordinator:
    return {"node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}


def _unavailable(why: str) -> _Coordinator:
    return {
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": ErrorCode.coordinator_not_available,
        "error_message": why,
    }
