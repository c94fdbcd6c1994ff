"""EndTxn (26): commit or abort. The answer comes once the decision is persisted (in a
cluster: replicated). A single broker writes the markers and the completion before it; a
cluster sends the markers to the partitions' leaders after it. A marker that cannot be
written is retried (the coordinator's tick, the marker sender): the decision stands, as in
Kafka, and the transaction stays Prepare* until then; the producer's next request waits for
the completion (`coordinator_wait`), up to 5 s, then gets CONCURRENT_TRANSACTIONS."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.coordinator_wait import after_previous_transaction
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.broker.handlers.types import EndTxnAnswer, EndTxnRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnAnswer | Delayed:
    if not authz.transactional_id(ctx, Op.WRITE, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    txns = ctx.broker.txns

    def step() -> ErrorCode:
        result = txns.coordinator.end_txn(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            bool(request.committed),
        )
        return txns.run(result, request.transactional_id)

    def answer(error: ErrorCode) -> EndTxnAnswer:
        return {"throttle_time": 0, "error_code": for_version(error, ctx.api_key, ctx.api_version)}

    # A retried EndTxn that finds its decision still completing waits for the completion
    # (coordinator_wait) and is then answered as the retry after it would be.
    return after_previous_transaction(ctx, request.transactional_id, step, answer)
