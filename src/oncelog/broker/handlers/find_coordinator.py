"""FindCoordinator (10): where the group or transaction coordinator of a key lives.

This broker does not run the group and transaction coordinators yet, so every key is answered
with COORDINATOR_NOT_AVAILABLE, which clients treat as retriable. Advertising the API
matters beyond groups: librdkafka enables lz4 only for brokers that list FindCoordinator.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.errors import ErrorCode

GROUP = 0
TRANSACTION = 1
_MESSAGE = "The coordinator is not available."


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    code = ErrorCode.coordinator_not_available
    keys = getattr(request, "coordinator_keys", None)
    if keys is not None:
        return {
            "throttle_time": 0,
            "coordinators": [
                {
                    "key": key,
                    "node_id": -1,
                    "host": "",
                    "port": -1,
                    "error_code": code,
                    "error_message": _MESSAGE,
                }
                for key in keys
            ],
        }
    return {
        "throttle_time": 0,
        "error_code": code,
        "error_message": _MESSAGE,
        "node_id": -1,
        "host": "",
        "port": -1,
    }
