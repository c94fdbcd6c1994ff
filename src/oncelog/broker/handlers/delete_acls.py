"""DeleteAcls (31): delete every binding each filter matches; needs Alter on the cluster.

Each filter's result lists the bindings it deleted (a binding two filters match is listed
under both, as Kafka does). Without an authorizer: SECURITY_DISABLED for every filter.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.acl_wire import apply, filter_of, refusal
from oncelog.broker.handlers.types import DeleteAclsAnswer, DeleteAclsRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclBinding, AclOperation


def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsAnswer | Delayed:
    refused = refusal(ctx, AclOperation.ALTER)
    if refused is not None:
        return {
            "throttle_time": 0,
            "filter_results": [
                {"error_code": refused[0], "error_message": refused[1], "matching_acls": []}
                for _ in request.filters
            ],
        }
    authorizer = ctx.broker.authorizer
    assert authorizer is not None
    results: list[dict[str, Any]] = []
    doomed: dict[AclBinding, None] = {}
    for item in request.filters:
        acl_filter = filter_of(item)
        problem = acl_filter.problem()
        if problem is not None:
            results.append(
                {
                    "error_code": ErrorCode.invalid_request,
                    "error_message": problem,
                    "matching_acls": [],
                }
            )
            continue
        matched = authorizer.acls.matching(acl_filter)
        doomed.update(dict.fromkeys(matched))
        results.append(
            {
                "error_code": ErrorCode.none,
                "error_message": None,
                "matching_acls": [_matching(b) for b in matched],
            }
        )
    response: DeleteAclsAnswer = {"throttle_time": 0, "filter_results": results}

    def answer(error: ErrorCode | None, message: str | None) -> DeleteAclsAnswer:
        if error is not None:
            for result in results:
                if result["error_code"] == ErrorCode.none:
                    result.update(error_code=error, error_message=message, matching_acls=[])
        return response

    return apply(ctx, [], list(doomed), answer)


def _matching(b: AclBinding) -> dict[str, Any]:
    p, e = b.pattern, b.entry
    return {
        "error_code": ErrorCode.none,
        "error_message": None,
        "resource_type": int(p.resource_type),
        "resource_name": p.name,
        "pattern_type": int(p.pattern_type),
        "principal": e.principal,
        "host": e.host,
        "operation": int(e.operation),
        "permission_type": int(e.permission),
    }
