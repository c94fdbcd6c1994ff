"""JoinGroup (11): join or rejoin a classic group; the reply waits for the join phase.

v4+ requires a known member id (KIP-394): a first join gets MEMBER_ID_REQUIRED with an id to
join with. v5+ carries group.instance.id (static membership, KIP-345); v8 a reason; v9 tells
a static leader that rejoined without a rebalance to skip the assignment (KIP-814).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import JoinGroupAnswer, JoinGroupRequest
from oncelog.broker.purgatory import Delayed
from oncelog.coordinator.group.coordinator import WAITER_SLACK_MS, JoinRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000)


def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupAnswer | Delayed:
    runtime = ctx.broker.groups
    version = ctx.api_version
    if not authz.group(ctx, Op.READ, request.group_id):
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.group_authorization_failed,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None if version >= 7 else "",
            "leader": "",
            "skip_assignment": False,
            "member_id": request.member_id,
            "members": [],
        }
    session_ms = _ms(request.session_timeout)
    rebalance_ms = _ms(getattr(request, "rebalance_timeout", None)) if version >= 1 else session_ms
    join = JoinRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=ctx.client_host,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        require_known_member=version >= 4,
    )
    result = runtime.coordinator.join(join)
    settings = runtime.coordinator.settings
    wait_ms = rebalance_ms + settings.initial_rebalance_delay_ms + WAITER_SLACK_MS

    def shape(reply: dict[str, Any]) -> dict[str, Any]:
        out = {"throttle_time": 0, **reply}
        if version < 7 and out["protocol_name"] is None:
            out["protocol_name"] = ""  # a non-nullable string before v7
        return out

    # The group runtime frames the coordinator's reply with `shape`.
    answered: JoinGroupAnswer | Delayed = runtime.respond(result, request.group_id, wait_ms, shape)
    return answered
