"""AddPartitionsToTxn (24): a producer names the partitions its transaction writes.

v0-3 (clients): every partition must exist in the cluster's metadata (this broker need not
host it), else that one gets UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, as Kafka answers. v4 (KIP-890, what brokers send
each other) batches transactions; with `verify_only` it changes nothing and answers, per
partition, whether it is in the producer's open transaction — a partition leader asks this
before accepting a transaction's first batch when the coordinator is another broker.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.coordinator_wait import after_previous_transaction
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.broker.handlers.types import AddPartitionsToTxnAnswer, AddPartitionsToTxnRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(
    ctx: RequestContext, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnAnswer | Delayed:
    if ctx.api_version >= 4:
        if not authz.authorize_cluster(ctx, Op.CLUSTER_ACTION):
            return {
                "throttle_time": 0,
                "error_code": ErrorCode.cluster_authorization_failed,
                "results_by_transaction": [],
            }
        return _batched(ctx, request)
    txns = ctx.broker.txns
    # v0-3's fields (v4 has none of them).
    txn_id: str = getattr(request, "v3_and_below_transactional_id", "")
    producer_id: int = getattr(request, "v3_and_below_producer_id", -1)
    producer_epoch: int = getattr(request, "v3_and_below_producer_epoch", -1)
    topics = getattr(request, "v3_and_below_topics", ())
    tps = [TopicPartition(t.name, p) for t in topics for p in t.partitions]
    # Kafka: Write on the transactional id, then on each topic; nothing is added unless all
    # are allowed and exist.
    refused: dict[TopicPartition, ErrorCode] = {}
    if not authz.transactional_id(ctx, Op.WRITE, txn_id):
        refused = dict.fromkeys(tps, ErrorCode.transactional_id_authorization_failed)
    else:
        for tp in tps:
            if not authz.topic(ctx, Op.WRITE, tp.topic):
                refused[tp] = ErrorCode.topic_authorization_failed
            elif not ctx.broker.replicas.partition_exists(tp):
                refused[tp] = ErrorCode.unknown_topic_or_partition
    if refused:
        return _answer({tp: refused.get(tp, ErrorCode.operation_not_attempted) for tp in tps})

    def step() -> ErrorCode:
        result = txns.coordinator.add_partitions(txn_id, producer_id, producer_epoch, tps)
        return txns.run(result, txn_id)

    def answer(error: ErrorCode) -> AddPartitionsToTxnAnswer:
        return _answer(dict.fromkeys(tps, for_version(error, ctx.api_key, ctx.api_version)))

    # The producer's next transaction often starts while its last one's markers are being
    # written: wait for them rather than answer CONCURRENT_TRANSACTIONS (coordinator_wait).
    return after_previous_transaction(ctx, txn_id, step, answer)


def _answer(codes: dict[TopicPartition, ErrorCode]) -> AddPartitionsToTxnAnswer:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, code in codes.items():
        by_topic[tp.topic].append({"partition_index": tp.partition, "partition_error_code": code})
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": results} for name, results in by_topic.items()
        ],
    }


def _batched(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnAnswer:
    results = []
    for txn in getattr(request, "transactions", ()):  # v4
        tps = [TopicPartition(t.name, p) for t in txn.topics for p in t.partitions]
        if txn.verify_only:
            codes = {tp: _verify(ctx, txn, tp) for tp in tps}
        else:
            txns = ctx.broker.txns
            result = txns.coordinator.add_partitions(
                txn.transactional_id, txn.producer_id, txn.producer_epoch, tps
            )
            codes = dict.fromkeys(tps, txns.run(result, txn.transactional_id))
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp, code in codes.items():
            by_topic[tp.topic].append(
                {"partition_index": tp.partition, "partition_error_code": code}
            )
        results.append(
            {
                "transactional_id": txn.transactional_id,
                "topic_results": [
                    {"name": name, "results_by_partition": parts}
                    for name, parts in by_topic.items()
                ],
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "results_by_transaction": results}


def _verify(ctx: RequestContext, txn: Any, tp: TopicPartition) -> ErrorCode:
    coordinator = ctx.broker.txns.coordinator
    if not coordinator.owns(txn.transactional_id):
        return ErrorCode.not_coordinator
    if coordinator.transactional_id_of(txn.producer_id) != txn.transactional_id:
        return ErrorCode.invalid_producer_id_mapping
    ctx.broker.txns.answer_when_replicated(txn.transactional_id)
    return ErrorCode(coordinator.verify_partition(txn.producer_id, txn.producer_epoch, tp))
