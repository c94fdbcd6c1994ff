"""DescribeTransactions (65, KIP-664): the coordinator's view of transactional ids."""

from __future__ import annotations

from collections import defaultdict

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeTransactionsAnswer, DescribeTransactionsRequest
from oncelog.coordinator.txn.state import TxnState
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op

#: The state names Kafka's tools print and filter on.
STATE_NAMES = {
    TxnState.EMPTY: "Empty",
    TxnState.ONGOING: "Ongoing",
    TxnState.PREPARE_COMMIT: "PrepareCommit",
    TxnState.PREPARE_ABORT: "PrepareAbort",
    TxnState.COMPLETE_COMMIT: "CompleteCommit",
    TxnState.COMPLETE_ABORT: "CompleteAbort",
    TxnState.DEAD: "Dead",
    TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence",
}


def handle(ctx: RequestContext, request: DescribeTransactionsRequest) -> DescribeTransactionsAnswer:
    transactions = ctx.broker.txns.coordinator.transactions
    states: list[dict[str, object]] = []
    for txn_id in request.transactional_ids:
        meta = transactions.get(txn_id)
        allowed = authz.transactional_id(ctx, Op.DESCRIBE, txn_id)
        if meta is None or not allowed:
            states.append(
                {
                    "error_code": ErrorCode.transactional_id_not_found
                    if allowed
                    else ErrorCode.transactional_id_authorization_failed,
                    "transactional_id": txn_id,
                    "transaction_state": "",
                    "transaction_timeout": 0,
                    "transaction_start_time": -1,
                    "producer_id": -1,
                    "producer_epoch": -1,
                    "topics": [],
                }
            )
            continue
        by_topic: dict[str, list[int]] = defaultdict(list)
        for tp in sorted(meta.partitions):
            if not authz.topic(ctx, Op.DESCRIBE, tp.topic):
                continue  # Kafka leaves out the topics the principal may not Describe
            by_topic[tp.topic].append(tp.partition)
        states.append(
            {
                "error_code": ErrorCode.none,
                "transactional_id": txn_id,
                "transaction_state": STATE_NAMES[meta.state],
                "transaction_timeout": meta.timeout_ms,
                "transaction_start_time": meta.start_ms,
                "producer_id": meta.producer_id,
                "producer_epoch": meta.producer_epoch,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
            }
        )
    return {"throttle_time": 0, "transaction_states": states}
