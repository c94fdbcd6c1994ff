"""DescribeUserScramCredentials (50): each user's SCRAM mechanisms and iteration counts
(never salts or keys); needs Describe on the cluster. An unknown user is RESOURCE_NOT_FOUND, a
user asked for twice DUPLICATE_RESOURCE, as Kafka answers."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import (
    DescribeUserScramCredentialsAnswer,
    DescribeUserScramCredentialsRequest,
)
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation
from oncelog.security.credentials import describe


def handle(
    ctx: RequestContext, request: DescribeUserScramCredentialsRequest
) -> DescribeUserScramCredentialsAnswer:
    users = None if request.users is None else [u.name for u in request.users]
    if not authz.authorize_cluster(ctx, AclOperation.DESCRIBE):
        message = "Cluster authorization failed."
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.cluster_authorization_failed,
            "error_message": message,
            "results": [
                {
                    "user": user,
                    "error_code": ErrorCode.cluster_authorization_failed,
                    "error_message": message,
                    "credential_infos": [],
                }
                for user in users or []
            ],
        }
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "results": describe(ctx.broker.scram, users),
    }
