"""OffsetFetch (9), v1-v7: a group's committed offsets (-1 where nothing is committed).

v2+ may ask for every partition the group has (topics null). With `require_stable` (v7) a
partition whose transactional offsets still wait for their transaction's marker answers
UNSTABLE_OFFSET_COMMIT (the client retries), so a consumer taking over from a transactional
copier never starts from an offset that is about to change. Without it the last committed
offset is returned. The batched multi-group form (v8+) is not offered.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    coordinator = ctx.broker.groups.coordinator
    wanted = None
    if request.topics is not None:
        wanted = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    if not coordinator.owns(request.group_id):
        return _not_coordinator(wanted or [])
    found = coordinator.fetch_offsets(request.group_id, wanted)
    unstable = set()
    if getattr(request, "require_stable", False):
        unstable = coordinator.unstable_partitions(request.group_id)
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, stored in found.items():
        value = None if tp in unstable else stored
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": value.offset if value else -1,
                "committed_leader_epoch": value.leader_epoch if value else -1,
                "metadata": value.metadata if value else "",
                "error_code": (
                    ErrorCode.unstable_offset_commit if tp in unstable else ErrorCode.none
                ),
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.none,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }


def _not_coordinator(wanted: list[TopicPartition]) -> dict[str, Any]:
    """Another broker coordinates the group (v1 has only per-partition error codes)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp in wanted:
        topics.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "committed_offset": -1,
                "committed_leader_epoch": -1,
                "metadata": "",
                "error_code": ErrorCode.not_coordinator,
            }
        )
    return {
        "throttle_time": 0,
        "error_code": ErrorCode.not_coordinator,
        "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
    }
