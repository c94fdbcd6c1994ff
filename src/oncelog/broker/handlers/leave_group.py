"""LeaveGroup (13): members leave at once instead of waiting for their session to expire.

v0-v2 name one member; v3+ a batch, by member id or group.instance.id (KIP-345).
"""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import LeaveGroupAnswer, LeaveGroupRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupAnswer:
    if not authz.group(ctx, Op.READ, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "members": [],
        }
    runtime = ctx.broker.groups
    if ctx.api_version < 3:
        leaving: list[tuple[str, str | None]] = [(getattr(request, "member_id", ""), None)]  # v0-2
    else:
        leaving = [(m.member_id, m.group_instance_id) for m in getattr(request, "members", ())]
    codes = runtime.complete(runtime.coordinator.leave(request.group_id, leaving))
    if ctx.api_version < 3:
        return {"throttle_time": 0, "error_code": codes[0]}
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "members": [
            {"member_id": member_id, "group_instance_id": instance, "error_code": code}
            for (member_id, instance), code in zip(leaving, codes, strict=True)
        ],
    }
