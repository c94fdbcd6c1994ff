"""DescribeGroups (15): state, protocol and members (with assignments) of groups.

An unknown group is described as Dead with no error, as Kafka does; from v6 (KIP-1043) it
answers GROUP_ID_NOT_FOUND with an error message instead.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeGroupsAnswer, DescribeGroupsRequest
from oncelog.coordinator.group.state import GroupState
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.security.acl import ResourceType

OPERATIONS_NOT_REQUESTED = -(2**31)
#: The first version that answers GROUP_ID_NOT_FOUND for an unknown group.
NOT_FOUND_VERSION = 6


def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsAnswer:
    coordinator = ctx.broker.groups.coordinator
    described = []
    for group_id in request.groups:
        group = coordinator.describe(group_id)
        entry: dict[str, Any] = {
            "error_code": ErrorCode.none,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": OPERATIONS_NOT_REQUESTED,
        }
        if not authz.group(ctx, Op.DESCRIBE, group_id):
            entry["error_code"] = ErrorCode.group_authorization_failed
            described.append(entry)
            continue
        entry["authorized_operations"] = authz.authorized_operations(
            ctx,
            ResourceType.GROUP,
            group_id,
            bool(getattr(request, "include_authorized_operations", False)),
        )
        if not coordinator.owns(group_id):
            entry["error_code"] = ErrorCode.not_coordinator
        elif (group is None or group.state is GroupState.DEAD) and (
            ctx.api_version >= NOT_FOUND_VERSION
        ):
            entry["error_code"] = ErrorCode.group_id_not_found
            entry["error_message"] = f"Group {group_id} not found."
        elif group is not None:
            stable = group.state is GroupState.STABLE
            entry.update(
                group_state=group.state.value,
                protocol_type=group.protocol_type or "",
                protocol_data=(group.protocol_name or "") if stable else "",
                members=[
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata_for(group.protocol_name) if stable else b"",
                        "member_assignment": m.assignment if stable else b"",
                    }
                    for m in group.members.values()
                ],
            )
        described.append(entry)
    return {"throttle_time": 0, "groups": described}
