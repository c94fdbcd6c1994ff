"""Heartbeat (12): keeps a member's session alive and tells it when to rejoin."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import HeartbeatAnswer, HeartbeatRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatAnswer:
    if not authz.group(ctx, Op.READ, request.group_id):
        return {"throttle_time": 0, "error_code": ErrorCode.group_authorization_failed}
    runtime = ctx.broker.groups
    code = runtime.coordinator.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    runtime.after_operation()
    return {"throttle_time": 0, "error_code": code}
