"""CreatePartitions (37): grow topics to a new partition count.

Kafka's answers per topic: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST for a topic named
twice, INVALID_PARTITIONS when the count does not grow (or exceeds the per-topic limit),
INVALID_REPLICA_ASSIGNMENT when explicit assignments do not match the partitions added or
name unknown or repeated brokers or another replication factor, INVALID_REPLICATION_FACTOR
when there are fewer live brokers than the topic's replication factor. `validate_only`
checks without growing.

In a cluster the new assignment (`Controller.add_partitions`: Kafka's placement, resumed
after the existing partitions) is written to etcd by compare-and-swap and the answer waits
for that write; the controller then creates the new partitions' states and every replica
opens their logs. A single node places every new partition on itself.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import PendingOp, answer_after_writes
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import CreatePartitionsAnswer, CreatePartitionsRequest
from oncelog.broker.purgatory import Delayed
from oncelog.broker.replica_manager import MAX_PARTITIONS_PER_TOPIC
from oncelog.errors import (
    ErrorCode,
    InvalidPartitions,
    InvalidReplicaAssignment,
    InvalidRequest,
    KafkaError,
    UnknownTopicOrPartition,
)
from oncelog.security.acl import AclOperation as Op


def handle(
    ctx: RequestContext, request: CreatePartitionsRequest
) -> CreatePartitionsAnswer | Delayed:
    counts = Counter(t.name for t in request.topics)
    results: list[dict[str, Any]] = []
    pending: list[tuple[dict[str, Any], PendingOp]] = []
    for topic in request.topics:
        result: dict[str, Any] = {
            "name": topic.name,
            "error_code": ErrorCode.none,
            "error_message": None,
        }
        results.append(result)
        if not authz.topic(ctx, Op.ALTER, topic.name):
            result.update(error_code=ErrorCode.topic_authorization_failed)
            continue
        try:
            if counts[topic.name] > 1:
                raise InvalidRequest("Duplicate topic in request.")
            manual = (
                None
                if topic.assignments is None
                else [[int(b) for b in a.broker_ids] for a in topic.assignments]
            )
            if topic.count > MAX_PARTITIONS_PER_TOPIC:
                raise InvalidPartitions(
                    f"Number of partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}"
                )
            if ctx.broker.cluster_ops is not None:
                op = _in_cluster(ctx, topic.name, topic.count, manual, request.validate_only)
                if not op.done:
                    pending.append((result, op))
                elif op.error is not None:
                    raise op.error
            else:
                _single_node(ctx, topic.name, topic.count, manual, request.validate_only)
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
    response: CreatePartitionsAnswer = {"throttle_time": 0, "results": results}
    if not pending:
        return response

    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 1)
    deadline = ctx.broker.clock.monotonic_ms() + timeout_ms
    return answer_after_writes(response, pending, deadline, "the new partitions")


def _in_cluster(
    ctx: RequestContext, name: str, total: int, manual: list[list[int]] | None, validate: bool
) -> PendingOp:
    ops = ctx.broker.cluster_ops
    assert ops is not None
    return ops.create_partitions(name, total, manual, validate)


def _single_node(
    ctx: RequestContext, name: str, total: int, manual: list[list[int]] | None, validate: bool
) -> None:
    replicas = ctx.broker.replicas
    image = replicas.topic(name)
    if image is None:
        raise UnknownTopicOrPartition(f"The topic '{name}' does not exist.")
    current = image.partitions
    if total < current:
        raise InvalidPartitions(
            f"Topic currently has {current} partitions, which is higher than the requested {total}."
        )
    if total == current:
        raise InvalidPartitions(f"Topic already has {current} partitions.")
    node = ctx.broker.node.node_id
    if manual is not None:
        if len(manual) != total - current:
            raise InvalidReplicaAssignment(
                f"Increasing the number of partitions by {total - current} but "
                f"{len(manual)} assignments provided."
            )
        for brokers in manual:
            unknown = sorted(set(brokers) - {node})
            if unknown:
                raise InvalidReplicaAssignment(
                    f"Unknown broker(s) in replica assignment: {','.join(map(str, unknown))}."
                )
            if len(brokers) != 1:
                raise InvalidReplicaAssignment(
                    "Inconsistent replication factor between partitions, partition 0 has 1 "
                    f"while partitions [{current}] has replication factors [{len(brokers)}], "
                    "respectively."
                )
    if validate:
        return
    # The topic's image with the new count; the replica manager opens the new logs.
    replicas.apply_topic(
        name, image.topic_id, ((node,),) * total, dict(image.configs), image.internal
    )
