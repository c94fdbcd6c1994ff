"""AddOffsetsToTxn (25): the group's `__consumer_offsets` partition joins the transaction,
so the offsets the producer commits with TxnOffsetCommit get the transaction's marker."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.coordinator_wait import after_previous_transaction
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.broker.handlers.types import AddOffsetsToTxnAnswer, AddOffsetsToTxnRequest
from oncelog.broker.internal_topics import OFFSETS_TOPIC
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnAnswer | Delayed:
    if not authz.transactional_id(ctx, Op.WRITE, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    if not authz.group(ctx, Op.READ, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    groups = ctx.broker.groups
    tp = TopicPartition(OFFSETS_TOPIC, groups.coordinator.partition_for(request.group_id))
    txns = ctx.broker.txns

    def step() -> ErrorCode:
        result = txns.coordinator.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp]
        )
        return txns.run(result, request.transactional_id)

    def answer(error: ErrorCode) -> AddOffsetsToTxnAnswer:
        return {"throttle_time": 0, "error_code": for_version(error, ctx.api_key, ctx.api_version)}

    # As AddPartitionsToTxn: wait for the previous transaction's completion, not a retry.
    return after_previous_transaction(ctx, request.transactional_id, step, answer)
