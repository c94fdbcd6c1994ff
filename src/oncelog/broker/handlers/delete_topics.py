"""DeleteTopics (20): remove topics and their partition directories.

A single node deletes the logs at once. In a cluster the topic and its partition states are
deleted from etcd in one transaction and the answer waits for that write (REQUEST_TIMED_OUT
after the request's timeout); every broker's watch then removes its replicas' logs. Either
way: UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist, INVALID_REQUEST for an
internal topic, TOPIC_DELETION_DISABLED when `delete.topic.enable` is false.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import PendingOp, answer_after_writes
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import DeleteTopicsAnswer, DeleteTopicsRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode, InvalidRequest, KafkaError
from oncelog.security.acl import AclOperation as Op


def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsAnswer | Delayed:
    responses = []
    pending: list[tuple[dict[str, Any], PendingOp]] = []
    delete_enabled = ctx.broker.config.get("delete.topic.enable")
    for name in request.topic_names:
        entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.none, "error_message": None}
        responses.append(entry)
        if not authz.topic(ctx, Op.DELETE, name):
            entry.update(error_code=ErrorCode.topic_authorization_failed)
            continue
        if not delete_enabled:
            entry.update(error_code=ErrorCode.topic_deletion_disabled)
            continue
        try:
            if ctx.broker.cluster_ops is not None:
                pending.append((entry, _delete_in_cluster(ctx, name)))
            else:
                ctx.broker.replicas.delete_topic(name)
        except KafkaError as exc:
            entry.update(error_code=exc.code, error_message=str(exc))
    response: DeleteTopicsAnswer = {"throttle_time": 0, "responses": responses}
    if not pending:
        return response

    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 1)
    deadline = ctx.broker.clock.monotonic_ms() + timeout_ms
    return answer_after_writes(response, pending, deadline, "the deletion")


def _delete_in_cluster(ctx: RequestContext, name: str) -> PendingOp:
    cluster, ops = ctx.broker.cluster, ctx.broker.cluster_ops
    assert cluster is not None and ops is not None
    local = ctx.broker.replicas.topic(name)
    assignment = cluster.topics.get(name)
    if (local is not None and local.internal) or (assignment is not None and assignment.internal):
        raise InvalidRequest(f"Topic {name} is internal and cannot be deleted")
    # A topic this broker's view lacks may have just been created through another broker:
    # the deletion reads etcd, and answers UNKNOWN_TOPIC_OR_PARTITION if etcd has none.
    return ops.delete_topic_atomically(name)
