"""ListPartitionReassignments (46): the partitions moving now, with their replicas (target
and original together), the ones being added and the ones being removed.

`topics` null lists every move; named partitions that are not moving (or do not exist) are
left out, as Kafka does. Needs Describe on the cluster. A single node never moves anything.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import (
    ListPartitionReassignmentsAnswer,
    ListPartitionReassignmentsRequest,
)
from oncelog.errors import ClusterAuthorizationFailed, ErrorCode
from oncelog.security.acl import AclOperation as Op


def handle(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsAnswer:
    if not authz.authorize_cluster(ctx, Op.DESCRIBE):
        denied = ClusterAuthorizationFailed("Cluster authorization failed.")
        return _response([], denied.code, str(denied))
    cluster = ctx.broker.cluster
    if cluster is None:
        return _response([])
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(t.name, set()).update(int(p) for p in t.partition_indexes)
    topics = []
    for name, assignment in sorted(cluster.topics.items()):
        if wanted is not None and name not in wanted:
            continue
        partitions = [
            {
                "partition_index": p,
                "replicas": list(assignment.replicas[p]),
                "adding_replicas": list(move.adding),
                "removing_replicas": list(move.removing(assignment.replicas[p])),
            }
            for p, move in sorted(assignment.reassignments.items())
            if wanted is None or p in wanted[name]
        ]
        if partitions:
            topics.append({"name": name, "partitions": partitions})
    return _response(topics)


def _response(
    topics: list[dict[str, Any]], code: ErrorCode = ErrorCode.none, message: str | None = None
) -> ListPartitionReassignmentsAnswer:
    return {"throttle_time": 0, "error_code": code, "error_message": message, "topics": topics}
