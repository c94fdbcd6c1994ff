"""SyncGroup (14): the leader hands in the assignment; every member waits for its share,
which is sent once the assignment is stored in `__consumer_offsets` (in a cluster: and
replicated, `GroupRuntime.respond`)."""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import SyncGroupAnswer, SyncGroupRequest
from oncelog.broker.purgatory import Delayed
from oncelog.coordinator.group.coordinator import WAITER_SLACK_MS
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupAnswer | Delayed:
    if not authz.group(ctx, Op.READ, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "protocol_type": None,
            "protocol_name": None,
            "assignment": b"",
        }
    runtime = ctx.broker.groups
    coordinator = runtime.coordinator
    result = coordinator.sync(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
        getattr(request, "protocol_type", None),
        getattr(request, "protocol_name", None),
        {a.member_id: a.assignment for a in request.assignments},
    )
    group = coordinator.describe(request.group_id)
    wait_ms = (group.max_rebalance_timeout_ms() if group else 0) + WAITER_SLACK_MS

    def shape(reply: dict[str, Any]) -> dict[str, Any]:
        return {"throttle_time": 0, **reply}

    # The group runtime frames the coordinator's reply with `shape`.
    answered: SyncGroupAnswer | Delayed = runtime.respond(
        result, request.group_id, wait_ms, shape, replicated=True
    )
    return answered
