"""DeleteGroups (42): remove Empty groups and their committed offsets (tombstones)."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DeleteGroupsAnswer, DeleteGroupsRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsAnswer:
    runtime = ctx.broker.groups
    names: list[str] = list(request.groups_names)
    allowed = [g for g in names if authz.group(ctx, Op.DELETE, g)]
    codes = runtime.complete(runtime.coordinator.delete_groups(allowed)) if allowed else {}
    codes = {g: codes.get(g, ErrorCode.group_authorization_failed) for g in dict.fromkeys(names)}
    return {
        "throttle_time": 0,
        "results": [{"group_id": g, "error_code": c} for g, c in codes.items()],
    }
