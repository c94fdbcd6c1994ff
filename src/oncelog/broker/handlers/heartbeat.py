"""Heartbeat (12): keeps a member's session alive and tells it when to rejoin."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    runtime = ctx.broker.groups
    code = runtime.coordinator.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    runtime.after_operation()
    return {"throttle_time": 0, "error_code": code}
