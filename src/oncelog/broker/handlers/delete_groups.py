"""DeleteGroups (42): remove Empty groups and their committed offsets (tombstones)."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    runtime = ctx.broker.groups
    codes = runtime.complete(runtime.coordinator.delete_groups(list(request.groups_names)))
    return {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": c} for g, c in codes.items()],
    }
