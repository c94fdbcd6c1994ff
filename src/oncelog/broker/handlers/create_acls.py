"""CreateAcls (30): add ACL bindings; needs Alter on the cluster.

Each creation is checked as Kafka's AclControlManager does (INVALID_REQUEST for an unknown
or ANY type, a MATCH/ANY pattern, an empty name, a principal without `Type:`, a cluster name
other than kafka-cluster); the valid ones are stored, an existing binding is left as it is.
Without an authorizer every creation is SECURITY_DISABLED.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.acl_wire import apply, code, refusal
from oncelog.broker.handlers.types import CreateAclsAnswer, CreateAclsRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    validate_binding,
)


def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsAnswer | Delayed:
    refused = refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        refusals = [
            {"error_code": refused[0], "error_message": refused[1]} for _ in request.creations
        ]
        return {"throttle_time": 0, "results": refusals}
    results = []
    valid: list[tuple[dict[str, Any], AclBinding]] = []
    for creation in request.creations:
        binding = AclBinding(
            ResourcePattern(
                code(ResourceType, creation.resource_type),
                creation.resource_name,
                code(PatternType, getattr(creation, "resource_pattern_type", PatternType.LITERAL)),
            ),
            AccessControlEntry(
                creation.principal,
                creation.host,
                code(AclOperation, creation.operation),
                code(PermissionType, creation.permission_type),
            ),
        )
        result: dict[str, Any] = {"error_code": ErrorCode.none, "error_message": None}
        problem = validate_binding(binding)
        if problem is not None:
            result.update(error_code=ErrorCode.invalid_request, error_message=problem)
        else:
            valid.append((result, binding))
        results.append(result)
    response: CreateAclsAnswer = {"throttle_time": 0, "results": results}

    def answer(error: ErrorCode | None, message: str | None) -> CreateAclsAnswer:
        if error is not None:
            for result, _ in valid:
                result.update(error_code=error, error_message=message)
        return response

    return apply(ctx, [b for _, b in valid], [], answer)
