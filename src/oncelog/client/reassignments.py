"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455), which
confluent-kafka's AdminClient does not offer. Both go to the controller named in Metadata,
as Kafka's admin client sends them (an oncelog broker answers them anywhere)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError, Connection
from oncelog.errors import error_name
from oncelog.types import TopicPartition

ALTER_PARTITION_REASSIGNMENTS, LIST_PARTITION_REASSIGNMENTS = 45, 46


@dataclass(frozen=True, slots=True)
class OngoingMove:
    """A partition being moved: all its replicas now, those added and those removed."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]


def _controller(admin: Admin) -> Connection:
    metadata = admin.refresh_metadata([])
    controller = int(getattr(metadata, "controller_id", -1))
    if controller < 0:
        controller = min(b.node_id for b in metadata.brokers)
    return admin.node(controller)


def alter(
    admin: Admin,
    moves: Mapping[TopicPartition, Sequence[int] | None],
    timeout_ms: int = 30_000,
) -> dict[TopicPartition, str | None]:
    """Start (replicas) or cancel (None) moves; per partition None, or `NAME (code): why`."""
    by_topic: dict[str, list[dict[str, object]]] = {}
    for tp, replicas in moves.items():
        by_topic.setdefault(tp.topic, []).append(
            {
                "partition_index": tp.partition,
                "replicas": None if replicas is None else list(replicas),
            }
        )
    body = {
        "timeout": timeout_ms,
        "allow_replication_factor_change": True,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    response = _controller(admin).call(ALTER_PARTITION_REASSIGNMENTS, (0, 1), body)
    if response.error_code != 0:
        return dict.fromkeys(moves, _error(response.error_code, response.error_message))
    out: dict[TopicPartition, str | None] = {}
    for topic in response.responses:
        for p in topic.partitions:
            tp = TopicPartition(topic.name, p.partition_index)
            out[tp] = None if p.error_code == 0 else _error(p.error_code, p.error_message)
    return out


def ongoing(
    admin: Admin, partitions: Iterable[TopicPartition] | None = None
) -> dict[TopicPartition, OngoingMove]:
    """The moves in progress (of `partitions` only, if given)."""
    topics = None
    if partitions is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in partitions:
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    body = {"timeout": 30_000, "topics": topics}
    response = _controller(admin).call(LIST_PARTITION_REASSIGNMENTS, (0, 0), body)
    if response.error_code != 0:
        raise ClientError(_error(response.error_code, response.error_message))
    return {
        TopicPartition(t.name, p.partition_index): OngoingMove(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
        )
        for t in response.topics
        for p in t.partitions
    }


def _error(code: int, message: str | None) -> str:
    return f"{error_name(code)}: {message}" if message else error_name(code)
