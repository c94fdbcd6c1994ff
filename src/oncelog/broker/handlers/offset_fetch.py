"""OffsetFetch (9), v1-v10: a group's committed offsets (-1 where nothing is committed).

v2+ may ask for every partition the group has (topics null). With `require_stable` (v7+) a
partition whose transactional offsets still wait for their transaction's marker answers
UNSTABLE_OFFSET_COMMIT (the client retries), so a consumer taking over from a transactional
copier never starts from an offset that is about to change. Without it the last committed
offset is returned. v8+ asks for several groups at once (each answered with its own error
code); v9 adds the KIP-848 member id and epoch, which classic groups do not check (Kafka
checks them only for consumer-protocol groups, which oncelog does not have). v10 (KIP-848's
topic ids) names topics by id both ways: an unknown id answers UNKNOWN_TOPIC_ID for its
partitions, and committed offsets of a topic that no longer exists are left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import OffsetFetchAnswer, OffsetFetchRequest
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition

#: The first version with the batched layout (groups[]).
BATCHED_VERSION = 8
#: The first version naming topics by id.
TOPIC_ID_VERSION = 10


def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchAnswer:
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= BATCHED_VERSION:
        groups = []
        for group in getattr(request, "groups", ()):  # v8+
            if ctx.api_version >= TOPIC_ID_VERSION:
                error, topics = _fetch_group_by_id(
                    ctx, group.group_id, group.topics, require_stable
                )
            else:
                error, topics = fetch_group(ctx, group.group_id, group.topics, require_stable)
            groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    group_id: str = getattr(request, "group_id", "")  # v1-7
    requested = getattr(request, "topics", None)
    error, topics = fetch_group(ctx, group_id, requested, require_stable)
    return {"throttle_time": 0, "error_code": error, "topics": topics}


def fetch_group(
    ctx: RequestContext, group_id: str, requested: Any, require_stable: bool
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """One group's answer: its error code and its topics (in the version-neutral shape)."""
    coordinator = ctx.broker.groups.coordinator
    wanted = None
    if requested is not None:
        wanted = [TopicPartition(t.name, p) for t in requested for p in t.partition_indexes]
    if not authz.group(ctx, Op.DESCRIBE, group_id):
        failed = dict.fromkeys(wanted or [], ErrorCode.group_authorization_failed)
        return ErrorCode.group_authorization_failed, _topics({tp: None for tp in failed}, failed)
    # Kafka: partitions of topics the principal may not Describe are TOPIC_AUTHORIZATION_FAILED
    # when named, left out when all the group's partitions are asked for.
    readable = {tp.topic: authz.topic(ctx, Op.DESCRIBE, tp.topic) for tp in wanted or []}
    refused = {
        tp: ErrorCode.topic_authorization_failed for tp in wanted or [] if not readable[tp.topic]
    }
    if not coordinator.owns(group_id):
        # Another broker coordinates the group (v1 has only per-partition error codes).
        failed = dict.fromkeys(wanted or [], ErrorCode.not_coordinator)
        return ErrorCode.not_coordinator, _topics({tp: None for tp in failed}, failed)
    asked = None if wanted is None else [tp for tp in wanted if tp not in refused]
    found = coordinator.fetch_offsets(group_id, asked) if asked != [] else {}
    if wanted is None:
        found = {tp: v for tp, v in found.items() if authz.topic(ctx, Op.DESCRIBE, tp.topic)}
    unstable = coordinator.unstable_partitions(group_id) if require_stable else set()
    codes = {tp: ErrorCode.unstable_offset_commit for tp in found if tp in unstable}
    codes.update(refused)
    answered = {tp: None if tp in unstable else v for tp, v in found.items()}
    answered.update(dict.fromkeys(refused))
    return ErrorCode.none, _topics(answered, codes)


def _fetch_group_by_id(
    ctx: RequestContext, group_id: str, requested: Any, require_stable: bool
) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """v10: `fetch_group` with topics named by id in the request and the answer."""
    replicas = ctx.broker.replicas
    named: list[_ByName] | None = None
    unknown: list[dict[str, Any]] = []
    if requested is not None:
        named = []
        for t in requested:
            image = replicas.topic_by_id(t.topic_id)
            if image is None:
                unknown.append(
                    {
                        "topic_id": t.topic_id,
                        "partitions": [
                            _partition(p, None, ErrorCode.unknown_topic_id)
                            for p in t.partition_indexes
                        ],
                    }
                )
            else:
                named.append(_ByName(image.name, t.partition_indexes))
    error, topics = fetch_group(ctx, group_id, named, require_stable)
    out = []
    for topic in topics:
        image = replicas.topic(topic["name"])
        if image is not None:
            out.append({"topic_id": image.topic_id, "partitions": topic["partitions"]})
    return error, out + unknown


@dataclass(frozen=True, slots=True)
class _ByName:
    """A v10 request topic, resolved to its name (the shape `fetch_group` reads)."""

    name: str
    partition_indexes: Sequence[int]


def _partition(index: int, value: Any, code: ErrorCode) -> dict[str, Any]:
    return {
        "partition_index": index,
        "committed_offset": value.offset if value else -1,
        "committed_leader_epoch": value.leader_epoch if value else -1,
        "metadata": value.metadata if value else "",
        "error_code": code,
    }


def _topics(
    found: dict[TopicPartition, Any], codes: dict[TopicPartition, ErrorCode]
) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for tp, value in found.items():
        topics.setdefault(tp.topic, []).append(
            _partition(tp.partition, value, codes.get(tp, ErrorCode.none))
        )
    return [{"name": name, "partitions": parts} for name, parts in topics.items()]
