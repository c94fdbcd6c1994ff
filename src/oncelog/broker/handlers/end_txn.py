"""EndTxn (26): commit or abort. The answer comes once the decision is persisted; the
markers and the completion are written before it (all local here), except that a marker
which cannot be written is retried by the coordinator's tick: the decision stands, as in
Kafka, and the transaction stays Prepare* (new work gets CONCURRENT_TRANSACTIONS) until then."""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if not authz.transactional_id(ctx, Op.WRITE, request.transactional_id):
        return {"throttle_time": 0, "error_code": ErrorCode.transactional_id_authorization_failed}
    txns = ctx.broker.txns
    result = txns.coordinator.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        bool(request.committed),
    )
    code = for_version(txns.run(result, request.transactional_id), ctx.api_key, ctx.api_version)
    return {"throttle_time": 0, "error_code": code}
