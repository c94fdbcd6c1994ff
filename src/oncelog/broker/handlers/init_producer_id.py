"""InitProducerId (22): producer ids for idempotent and transactional producers.

Without a transactional.id Kafka always hands out a new id at epoch 0, also when the client
sends its current id and epoch (KIP-360): the partitions accept an unknown producer at any
sequence, so the new session starts cleanly. With one, the transaction coordinator keeps the
id and bumps the epoch, fencing older sessions (and aborting their open transaction first).
"""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.coordinator_wait import after_previous_transaction
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.broker.handlers.types import InitProducerIdAnswer, InitProducerIdRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.security.acl import ResourceType


def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdAnswer | Delayed:
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
        return _transactional(ctx, request, request.transactional_id)
    try:
        producer_id = ctx.broker.replicas.producer_ids.next_id()
    except KafkaError as exc:  # a cluster's broker without a producer id block yet
        return _answer(exc.code, -1, -1)
    return _answer(ErrorCode.none, producer_id, 0)


def _transactional(
    ctx: RequestContext, request: InitProducerIdRequest, txn_id: str
) -> InitProducerIdAnswer | Delayed:
    txns = ctx.broker.txns
    ids = (-1, -1)

    def step() -> ErrorCode:
        nonlocal ids
        try:
            result = txns.coordinator.init_producer_id(
                txn_id,
                int(request.transaction_timeout.total_seconds() * 1000),
                getattr(request, "producer_id", -1),
                getattr(request, "producer_epoch", -1),
            )
        except KafkaError as exc:  # a cluster's broker without a producer id block yet
            return exc.code
        code = txns.run(result, txn_id)
        ids = (result.producer_id, result.producer_epoch)
        return code

    def answer(error: ErrorCode) -> InitProducerIdAnswer:
        code = for_version(error, ctx.api_key, ctx.api_version)
        return _answer(code, *ids) if code == ErrorCode.none else _answer(code, -1, -1)

    # A producer that starts again while its last transaction is being completed, or whose
    # open transaction this request fences and aborts, waits for the completion rather than
    # for a retry (coordinator_wait).
    return after_previous_transaction(ctx, txn_id, step, answer)


def _answer(code: ErrorCode, producer_id: int, epoch: int) -> InitProducerIdAnswer:
    return {
        "throttle_time": 0,
        "error_code": code,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
