"""DescribeClientQuotas (48, v0-1): the quotas of the entities a filter matches (Kafka's
match types EXACT, DEFAULT and SPECIFIED; `strict` wants exactly the filter's entity types).
Needs DescribeConfigs on the cluster. A bad filter is the answer's error, with Kafka's
message."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DescribeClientQuotasAnswer, DescribeClientQuotasRequest
from oncelog.broker.quotas import describe_filter
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation


def handle(ctx: RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasAnswer:
    if not authz.authorize_cluster(ctx, AclOperation.DESCRIBE_CONFIGS):
        return _error(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    try:
        exact, typed = describe_filter(
            (c.entity_type, int(c.match_type), c.match) for c in request.components
        )
    except KafkaError as exc:
        return _error(exc.code, str(exc))
    found = ctx.broker.quotas.describe(exact, typed, request.strict)
    entries = [
        {
            "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
            "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
        }
        for entity, values in found
    ]
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "error_message": None,
        "entries": entries,
    }


def _error(code: ErrorCode, message: str) -> DescribeClientQuotasAnswer:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "entries": None}
