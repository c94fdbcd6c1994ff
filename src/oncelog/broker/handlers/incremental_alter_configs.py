"""IncrementalAlterConfigs (44): SET/DELETE/APPEND/SUBTRACT on topic and broker configs.

A topic's new overrides are validated as CreateTopics validates them and kept in the
metadata image (single node) or the topic's etcd assignment (cluster), then applied to its
partition logs. BROKER resources ("" the cluster default, or this broker's id) change the
dynamic broker configs the broker can apply live (`broker.config_changes`). With
`validate_only` everything is checked and nothing kept. In a cluster the answer waits for
the etcd write (REQUEST_TIMED_OUT if etcd does not confirm it in time).

The legacy AlterConfigs (33) shares this flow (`alter` with incremental=False): each
resource's entries replace all of its overrides. Each resource is handled on its own, so a
per-resource authorization check fits at the top of `_alter_one`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import PendingOp, answer_after_writes
from oncelog.broker.config_changes import (
    BROKER,
    DEFAULT_ENTITY,
    SET,
    TOPIC,
    Change,
    broker_entity,
    check_resource,
    new_broker_configs,
    new_topic_configs,
)
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import (
    AlterConfigsRequest,
    IncrementalAlterConfigsAnswer,
    IncrementalAlterConfigsRequest,
)
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError, UnknownTopicOrPartition
from oncelog.security.acl import AclOperation as Op

#: How long a cluster's answer waits for etcd (the request has no timeout field).
ETCD_WAIT_MS = 30_000


def handle(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsAnswer | Delayed:
    return alter(ctx, request, incremental=True)


def alter(
    ctx: RequestContext,
    request: IncrementalAlterConfigsRequest | AlterConfigsRequest,
    *,
    incremental: bool,
) -> IncrementalAlterConfigsAnswer | Delayed:
    counts = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], PendingOp]] = []
    for resource in request.resources:
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "resource_type": resource.resource_type,
            "resource_name": resource.resource_name,
        }
        results.append(result)
        refused = authz.config_refusal(
            ctx, Op.ALTER_CONFIGS, resource.resource_type, resource.resource_name
        )
        if refused is not None:
            result["error_code"] = refused
            continue
        try:
            if counts[(resource.resource_type, resource.resource_name)] > 1:
                raise InvalidRequest("Each resource must appear at most once.")
            changes = [
                Change(c.name, getattr(c, "config_operation", SET) if incremental else SET, c.value)
                for c in resource.configs
            ]
            check_resource(changes, incremental=incremental)
            op = _alter_one(
                ctx,
                resource.resource_type,
                resource.resource_name,
                changes,
                bool(request.validate_only),
                incremental,
            )
            if op is not None:
                pending.append((result, op))
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
    response: IncrementalAlterConfigsAnswer = {"throttle_time": 0, "responses": results}
    if not pending:
        return response
    deadline = ctx.broker.clock.monotonic_ms() + ETCD_WAIT_MS
    return answer_after_writes(response, pending, deadline, "the configs")


def _alter_one(
    ctx: RequestContext,
    resource_type: int,
    name: str,
    changes: list[Change],
    validate_only: bool,
    incremental: bool,
) -> PendingOp | None:
    """Validate one resource's changes and keep them (or ask etcd to); the PendingOp of
    the etcd write in a cluster, else None."""
    replicas, ops = ctx.broker.replicas, ctx.broker.cluster_ops
    if resource_type == TOPIC:
        defaults = replicas.topic_defaults()

        def change_topic(current: Mapping[str, str]) -> dict[str, str]:
            return new_topic_configs(current, changes, defaults, incremental=incremental)

        cluster = ctx.broker.cluster
        if cluster is not None:
            assignment = cluster.topics.get(name)
            if assignment is not None:
                change_topic(assignment.configs)  # answer a bad change now
                if validate_only:
                    return None
            if ops is None:
                return None
            # Not in this broker's view: perhaps created through another broker a moment
            # ago. The op reads etcd and answers UNKNOWN_TOPIC_OR_PARTITION if it has none.
            return ops.alter_topic_configs(name, change_topic, validate_only)
        topic = replicas.topic(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist")
        configs = change_topic(topic.configs)
        if not validate_only:
            replicas.alter_topic_configs(name, configs)
        return None
    if resource_type == BROKER:
        node_id = ctx.broker.config.node_id
        entity = broker_entity(name, node_id)
        other = DEFAULT_ENTITY if entity != DEFAULT_ENTITY else str(node_id)
        other_layer = dict(replicas.dynamic_configs.get(other, {}))

        def change_broker(current: Mapping[str, str]) -> dict[str, str]:
            return new_broker_configs(
                current, changes, ctx.broker.config, other_layer, entity, incremental=incremental
            )

        new = change_broker(replicas.dynamic_configs.get(entity, {}))
        if validate_only:
            return None
        if ops is not None:
            return ops.alter_broker_configs(entity, change_broker)
        replicas.set_broker_configs(entity, new)
        return None
    raise InvalidRequest(f"Unknown resource type {resource_type}")
