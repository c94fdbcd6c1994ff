"""FindCoordinator (10): where the group or transaction coordinator of a key lives.

Groups (key type 0) are coordinated by this node. Transactions (key type 1) are not run yet,
so those keys get COORDINATOR_NOT_AVAILABLE, which clients treat as retriable. Advertising
the API matters beyond groups: librdkafka enables lz4 only for brokers that list it.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.errors import ErrorCode

GROUP = 0
TRANSACTION = 1
_MESSAGE = "The coordinator is not available."


def _answer(ctx: RequestContext, key_type: int) -> dict[str, Any]:
    if key_type == GROUP:
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
        "error_code": ErrorCode.coordinator_not_available,
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
