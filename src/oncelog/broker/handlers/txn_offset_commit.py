"""TxnOffsetCommit (28), v0-3: a transactional producer commits a group's offsets inside its
transaction (consume-transform-produce).

1. The producer is verified with the transaction coordinator: its transactional id maps to
   this producer id (else INVALID_PRODUCER_ID_MAPPING), its epoch is current (else
   INVALID_PRODUCER_EPOCH, the code every version knows as fenced), and its ongoing
   transaction holds the group's `__consumer_offsets` partition, added by AddOffsetsToTxn
   (else INVALID_TXN_STATE).
2. The group coordinator fences stale members (v3, KIP-447) and stages the offsets as
   transactional records; the transaction's marker commits or drops them.
"""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.offset_commit import partition_errors_response, requested_offsets
from oncelog.broker.handlers.types import TxnOffsetCommitAnswer, TxnOffsetCommitRequest
from oncelog.broker.internal_topics import OFFSETS_TOPIC
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitAnswer:
    runtime = ctx.broker.groups
    order, offsets, errors = requested_offsets(ctx, request)
    # Kafka: Write on the transactional id, Read on the group, Read on each topic (above).
    if not authz.transactional_id(ctx, Op.WRITE, request.transactional_id):
        return partition_errors_response(
            order, dict.fromkeys(order, ErrorCode.transactional_id_authorization_failed)
        )
    if not authz.group(ctx, Op.READ, request.group_id):
        return partition_errors_response(
            order, dict.fromkeys(order, ErrorCode.group_authorization_failed)
        )
    if offsets:
        code = _verify_producer(ctx, request)
        if code is not ErrorCode.none:
            errors.update(dict.fromkeys(offsets, code))
        else:
            result = runtime.coordinator.commit_txn_offsets(
                request.group_id,
                request.producer_id,
                request.producer_epoch,
                getattr(request, "generation_id", -1),
                getattr(request, "member_id", ""),
                getattr(request, "group_instance_id", None),
                offsets,
            )
            errors.update(runtime.complete(result))
    return partition_errors_response(order, errors)


def _verify_producer(ctx: RequestContext, request: TxnOffsetCommitRequest) -> ErrorCode:
    """The producer's transaction must hold the group's offsets partition (KIP-890). In a
    cluster whose transaction coordinator for this producer is another broker, the check is
    left out, as before KIP-890 (`TxnRuntime.verify`)."""
    runtime = ctx.broker.txns
    known = runtime.coordinator.transactional_id_of(request.producer_id)
    if known is not None and known != request.transactional_id:
        return ErrorCode.invalid_producer_id_mapping
    if known is None and not runtime.clustered:
        return ErrorCode.invalid_producer_id_mapping
    partition = ctx.broker.groups.coordinator.partition_for(request.group_id)
    code = runtime.verify(
        request.producer_id, request.producer_epoch, TopicPartition(OFFSETS_TOPIC, partition)
    )
    return ErrorCode(code)
