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
from oncelog.broker.handlers.types import AlterClientQuotasAnswer, AlterClientQuotasRequest
from oncelog.broker.purgatory import Delayed
from oncelog.broker.quotas import (
    Entity,
    QuotaOp,
    entity_text,
    entity_to_json,
    validate_entity,
    validate_value,
)
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.security.acl import AclOperation

#: How long a cluster's answer waits for etcd.
WRITE_TIMEOUT_MS = 30_000


def handle(
    ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasAnswer | Delayed:
    broker = ctx.broker
    allowed = authz.authorize_cluster(ctx, AclOperation.ALTER_CONFIGS)
    results: list[dict[str, Any]] = []
    #: Per entity: its quotas after the ops (as this broker knows them), and the ops.
    changes: dict[Entity, tuple[dict[str, float], list[QuotaOp]]] = {}
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
            changes[entity] = _apply_ops(broker, entity, entry.ops)
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
    response: AlterClientQuotasAnswer = {"throttle_time": 0, "entries": results}
    if request.validate_only or not changes:
        return response
    cluster = broker.cluster_ops
    if cluster is None:
        for entity, (values, _) in changes.items():
            broker.quotas.set_entity(entity, values)
        broker.replicas.metadata.set_client_quotas(
            [{"entity": entity_to_json(e), "quotas": v} for e, v in broker.quotas.entities.items()]
        )
        return response
    # etcd applies the ops to what it holds then, not this broker's view of it: a concurrent
    # change of another key through another broker is kept.
    op = cluster.write_client_quotas({entity: ops for entity, (_, ops) in changes.items()})

    def fail(code: ErrorCode, message: str) -> None:
        for result in results:
            if result["error_code"] == ErrorCode.none:
                result.update(error_code=code, error_message=message)

    return answer_when_written(op, broker.clock.monotonic_ms() + WRITE_TIMEOUT_MS, response, fail)


def _apply_ops(
    broker: BrokerContext, entity: Entity, ops: Any
) -> tuple[dict[str, float], list[QuotaOp]]:
    """The entity's quotas after `ops` as this broker knows them, and the ops checked
    (InvalidRequest for a bad or repeated key)."""
    values = dict(broker.quotas.entities.get(entity, {}))
    checked: list[QuotaOp] = []
    for op in ops:
        if any(op.key == key for key, _ in checked):
            raise InvalidRequest(
                f"Duplicate quota key {op.key} not updating quota for this entity "
                f"{entity_text(entity)}"
            )
        if op.remove:
            values.pop(op.key, None)
            checked.append((op.key, None))
        else:
            validate_value(op.key, float(op.value))
            values[op.key] = float(op.value)
            checked.append((op.key, float(op.value)))
    return values, checked
