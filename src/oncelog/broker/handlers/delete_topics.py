"""DeleteTopics (20): remove topics and their partition directories."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.errors import ErrorCode, KafkaError


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    responses = []
    delete_enabled = ctx.broker.config.get("delete.topic.enable")
    for name in request.topic_names:
        entry: dict[str, Any] = {"name": name, "error_code": ErrorCode.none, "error_message": None}
        if not delete_enabled:
            entry.update(error_code=ErrorCode.topic_deletion_disabled)
        else:
            try:
                ctx.broker.replicas.delete_topic(name)
            except KafkaError as exc:
                entry.update(error_code=exc.code, error_message=str(exc))
        responses.append(entry)
    return {"throttle_time": 0, "responses": responses}
