"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional.id Kafka always hands out a new id at epoch 0, also when the client
sends its current id and epoch (KIP-360): the partitions accept an unknown producer at any
sequence, so the new session starts cleanly. With one, the transaction coordinator keeps the
id and bumps the epoch, fencing older sessions (and aborting their open transaction first).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.security.acl import ResourceType


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    # Kafka: Write on the transactional id; an idempotent producer needs IdempotentWrite on
    # the cluster or Write on at least one topic.
    if request.transactional_id is not None:
        if not authz.transactional_id(ctx, Op.WRITE, request.transactional_id):
            return _answer(ErrorCode.transactional_id_authorization_failed, -1, -1)
    elif not authz.authorize_cluster(ctx, Op.IDEMPOTENT_WRITE) and not authz.authorize_any(
        ctx, Op.WRITE, ResourceType.TOPIC
    ):
        return _answer(ErrorCode.cluster_authorization_failed, -1, -1)
    if request.transactional_id is not None:
        txns = ctx.broker.txns
        try:
            result = txns.coordinator.init_producer_id(
                request.transactional_id,
                int(request.transaction_timeout.total_seconds() * 1000),
                getattr(request, "producer_id", -1),
                getattr(request, "producer_epoch", -1),
            )
        except KafkaError as exc:  # a cluster's broker without a producer id block yet
            return _answer(exc.code, -1, -1)
        code = for_version(txns.run(result, request.transactional_id), ctx.api_key, ctx.api_version)
        if code != ErrorCode.none:
            return _answer(code, -1, -1)
        return _answer(code, result.producer_id, result.producer_epoch)
    try:
        producer_id = ctx.broker.replicas.producer_ids.next_id()
    except KafkaError as exc:  # a cluster's broker without a producer id block yet
        return _answer(exc.code, -1, -1)
    return _answer(ErrorCode.none, producer_id, 0)


def _answer(code: ErrorCode, producer_id: int, epoch: int) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
