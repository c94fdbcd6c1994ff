"""AlterClientQuotas (49, v0-1): set or remove quotas of users, client ids and their
combinations; needs AlterConfigs on the cluster.

Each entry is checked as Kafka's ClientQuotaControlManager checks it (entity types, keys,
values) and refused alone; `validate_only` checks without changing anything. A single node
keeps the quotas in its metadata image; a cluster in etcd (`client_quotas/...`), which every
broker's watch applies, and the answer waits for the write. The keys oncelog does not enforce
(`controller_mutation_rate`, IP entities' `connection_creation_rate`) are refused rather than
stored and ignored.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import answer_when_written
from oncelog.broker.context import BrokerContext, RequestContext
from oncelog.broker.purgatory import Delayed
from oncelog.broker.quotas import (
    Entity,
    entity_text,
    entity_to_json,
    validate_entity,
    validate_value,
)
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.security.acl import AclOperation

#: How long a cluster's answer waits for etcd.
WRITE_TIMEOUT_MS = 30_000


def handle(ctx: RequestContext, request: Any) -> dict[str, Any] | Delayed:
    broker = ctx.broker
    allowed = authz.authorize_cluster(ctx, AclOperation.ALTER_CONFIGS)
    results: list[dict[str, Any]] = []
    changes: dict[Entity, dict[str, float]] = {}
    seen: set[Entity] = set()
    for entry in request.entries:
        echo = [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]
        result: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "entity": echo,
        }
        results.append(result)
        if not allowed:
            result.update(
                error_code=ErrorCode.cluster_authorization_failed,
                error_message="Cluster authorization failed.",
            )
            continue
        try:
            entity = validate_entity((e.entity_type, e.entity_name) for e in entry.entity)
            if entity in seen:
                raise InvalidRequest(f"Ignoring duplicate entity {entity_text(entity)}")
            seen.add(entity)
            changes[entity] = _new_values(broker, entity, entry.ops)
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
    response = {"throttle_time": 0, "entries": results}
    changes = {e: v for e, v in changes.items() if v != broker.quotas.entities.get(e, {})}
    if request.validate_only or not changes:
        return response
    ops = broker.cluster_ops
    if ops is None:
        for entity, values in changes.items():
            broker.quotas.set_entity(entity, values)
        broker.replicas.metadata.set_client_quotas(
            [{"entity": entity_to_json(e), "quotas": v} for e, v in broker.quotas.entities.items()]
        )
        return response
    op = ops.write_client_quotas(changes)

    def fail(code: ErrorCode, message: str) -> None:
        for result in results:
            if result["error_code"] == ErrorCode.none:
                result.update(error_code=code, error_message=message)

    return answer_when_written(op, broker.clock.monotonic_ms() + WRITE_TIMEOUT_MS, response, fail)


def _new_values(broker: BrokerContext, entity: Entity, ops: Any) -> dict[str, float]:
    """The entity's quotas after `ops` (InvalidRequest for a bad or repeated key)."""
    values = dict(broker.quotas.entities.get(entity, {}))
    keys: set[str] = set()
    for op in ops:
        if op.key in keys:
            raise InvalidRequest(
                f"Duplicate quota key {op.key} not updating quota for this entity "
                f"{entity_text(entity)}"
            )
        keys.add(op.key)
        if op.remove:
            values.pop(op.key, None)
        else:
            validate_value(op.key, float(op.value))
            values[op.key] = float(op.value)
    return values
