"""DescribeAcls (29): the bindings a filter matches, grouped by resource pattern; needs
Describe on the cluster. Without an authorizer: SECURITY_DISABLED."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.acl_wire import filter_of, refusal
from oncelog.broker.handlers.types import DescribeAclsAnswer, DescribeAclsRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation, ResourcePattern


def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsAnswer:
    response: DescribeAclsAnswer = {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "resources": [],
    }
    refused = refusal(ctx, AclOperation.DESCRIBE)
    if refused is not None:
        response["error_code"], response["error_message"] = refused
        return response
    acl_filter = filter_of(request)
    problem = acl_filter.problem()
    if problem is not None:
        response["error_code"] = ErrorCode.invalid_request
        response["error_message"] = problem
        return response
    authorizer = ctx.broker.authorizer
    assert authorizer is not None
    grouped: dict[ResourcePattern, list[dict[str, Any]]] = {}
    for binding in authorizer.acls.matching(acl_filter):
        e = binding.entry
        grouped.setdefault(binding.pattern, []).append(
            {
                "principal": e.principal,
                "host": e.host,
                "operation": int(e.operation),
                "permission_type": int(e.permission),
            }
        )
    response["resources"] = [
        {
            "resource_type": int(p.resource_type),
            "resource_name": p.name,
            "pattern_type": int(p.pattern_type),
            "acls": acls,
        }
        for p, acls in grouped.items()
    ]
    return response
