"""ListTransactions (66, KIP-664): transactional ids, filtered by state, producer id and
(v1, KIP-994) by how long the transaction has been running."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.describe_transactions import STATE_NAMES
from oncelog.broker.handlers.types import ListTransactionsAnswer, ListTransactionsRequest
from oncelog.coordinator.txn.state import TxnState
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: ListTransactionsRequest) -> ListTransactionsAnswer:
    known = {name: state for state, name in STATE_NAMES.items()}
    wanted_states = {known[s] for s in request.state_filters if s in known}
    unknown = [s for s in request.state_filters if s not in known]
    wanted_pids = set(request.producer_id_filters)
    min_duration = getattr(request, "duration_filter", -1)
    now = ctx.broker.clock.wall_ms()
    out = []
    for txn_id, meta in ctx.broker.txns.coordinator.transactions.items():
        if not authz.transactional_id(ctx, Op.DESCRIBE, txn_id):
            continue
        if request.state_filters and meta.state not in wanted_states:
            continue
        if wanted_pids and meta.producer_id not in wanted_pids:
            continue
        if min_duration >= 0 and not (
            meta.state == TxnState.ONGOING and now - meta.start_ms >= min_duration
        ):
            continue
        out.append(
            {
                "transactional_id": txn_id,
                "producer_id": meta.producer_id,
                "transaction_state": STATE_NAMES[meta.state],
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "unknown_state_filters": unknown,
        "transaction_states": out,
    }
