"""FindCoordinator (10): where the group or transaction coordinator of a key lives.

Groups (key type 0) and transactional ids (key type 1) are coordinated by this node; the
transaction log is created on the first transactional request. Other key types get
INVALID_REQUEST. Advertising the API matters beyond groups: librdkafka enables lz4 only for
brokers that list it. In a cluster the coordinators are not offered yet
(COORDINATOR_NOT_AVAILABLE).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.errors import ErrorCode

GROUP = 0
TRANSACTION = 1
_MESSAGE = "Unknown coordinator key type."


def _answer(ctx: RequestContext, key_type: int) -> dict[str, Any]:
    if key_type in (GROUP, TRANSACTION) and ctx.broker.cluster is not None:
        # The coordinators do not run across brokers yet: clients retry, and say why.
        return {
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_code": ErrorCode.coordinator_not_available,
            "error_message": "oncelog runs group and transaction coordinators on single-node "
            "brokers only (not yet in a cluster)",
        }
    if key_type in (GROUP, TRANSACTION):
        if key_type == TRANSACTION:
            ctx.broker.txns.ensure_topic()
        node = ctx.broker.node
        return {
            "node_id": node.node_id,
            "host": node.host,
            "port": node.port,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
    return {
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": ErrorCode.invalid_request,
        "error_message": _MESSAGE,
    }


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    key_type = int(getattr(request, "key_type", GROUP))
    keys = getattr(request, "coordinator_keys", None)
    if keys is not None:
        return {
            "throttle_time": 0,
            "coordinators": [{"key": key, **_answer(ctx, key_type)} for key in keys],
        }
    return {"throttle_time": 0, **_answer(ctx, key_type)}
