"""ListGroups (16): the groups this coordinator knows, with state (v4+) and type (v5+)
filters."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import ListGroupsAnswer, ListGroupsRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op

CLASSIC = "classic"


def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsAnswer:
    states = {s.lower() for s in getattr(request, "states_filter", ())}
    types = {t.lower() for t in getattr(request, "types_filter", ())}
    groups = []
    # Kafka: Describe on the cluster lists every group, else those the principal may Describe.
    everything = authz.authorize_cluster(ctx, Op.DESCRIBE)
    for group in ctx.broker.groups.coordinator.list_groups():
        if not everything and not authz.group(ctx, Op.DESCRIBE, group.group_id):
            continue
        if states and group.state.value.lower() not in states:
            continue
        if types and CLASSIC not in types:
            continue
        groups.append(
            {
                "group_id": group.group_id,
                "protocol_type": group.protocol_type or "",
                "group_state": group.state.value,
                "group_type": CLASSIC,
            }
        )
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}
