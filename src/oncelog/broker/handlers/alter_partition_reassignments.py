"""AlterPartitionReassignments (45): move partitions to other replicas, or cancel a move.

Kafka's answers per partition: UNKNOWN_TOPIC_OR_PARTITION, INVALID_REPLICA_ASSIGNMENT for
an empty target, a broker named twice or one that is not registered,
NO_REASSIGNMENT_IN_PROGRESS for a cancel (replicas null) of a partition that is not moving,
INVALID_REPLICATION_FACTOR for a target of another size when v1's
allow_replication_factor_change is false. Needs Alter on the cluster.

In a cluster the move is written with the topic in etcd (`ClusterOps.reassign_partitions`)
and the answer waits for that write, not for the move: the new replicas catch up as
followers, and the controller ends the move once they are all in the ISR
(ListPartitionReassignments shows it until then). A single node has one broker, so its
only valid target is itself, where every partition already is.
"""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.cluster_view import PendingOp
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import (
    AlterPartitionReassignmentsAnswer,
    AlterPartitionReassignmentsRequest,
)
from oncelog.broker.purgatory import Delayed
from oncelog.errors import (
    ClusterAuthorizationFailed,
    ErrorCode,
    InvalidReplicationFactor,
    KafkaError,
    NoReassignmentInProgress,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from oncelog.metadata.placement import validate_manual_assignment
from oncelog.security.acl import AclOperation as Op

Outcomes = dict[str, dict[int, KafkaError | None]]


def handle(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsAnswer | Delayed:
    allow_rf_change = bool(getattr(request, "allow_replication_factor_change", True))
    asked: dict[str, dict[int, list[int] | None]] = {}
    for topic in request.topics:
        moves = asked.setdefault(topic.name, {})
        for p in topic.partitions:
            moves[int(p.partition_index)] = (
                None if p.replicas is None else [int(r) for r in p.replicas]
            )
    if not authz.authorize_cluster(ctx, Op.ALTER):
        denied = ClusterAuthorizationFailed("Cluster authorization failed.")
        outcomes: Outcomes = {t: dict.fromkeys(ps, denied) for t, ps in asked.items()}
        return _response(outcomes, allow_rf_change, denied)
    ops = ctx.broker.cluster_ops
    if ops is None:
        return _response(_single_node(ctx, asked, allow_rf_change), allow_rf_change)
    outcomes = {}
    pending: list[tuple[str, PendingOp]] = []
    for name, moves in asked.items():
        outcome, op = ops.reassign_partitions(name, moves, allow_rf_change)
        outcomes[name] = outcome
        if not op.done:
            pending.append((name, op))
        elif op.error is not None:
            outcomes[name] = _failed(outcome, op.error)
    if not pending:
        return _response(outcomes, allow_rf_change)

    def attempt(force: bool) -> AlterPartitionReassignmentsAnswer | None:
        if not force and not all(op.done for _, op in pending):
            return None
        for name, op in pending:
            if op.error is not None:
                outcomes[name] = _failed(outcomes[name], op.error)
            elif not op.done:
                late = RequestTimedOut("etcd did not confirm the reassignment in time")
                outcomes[name] = _failed(outcomes[name], late)
        return _response(outcomes, allow_rf_change)

    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 1)
    deadline = ctx.broker.clock.monotonic_ms() + timeout_ms
    return Delayed(attempt, deadline, tuple(op.key for _, op in pending))


def _failed(
    outcome: dict[int, KafkaError | None], error: KafkaError
) -> dict[int, KafkaError | None]:
    """The write failed: every partition it carried gets its error."""
    return {p: (error if e is None else e) for p, e in outcome.items()}


def _single_node(
    ctx: RequestContext, asked: dict[str, dict[int, list[int] | None]], allow_rf_change: bool
) -> Outcomes:
    node = ctx.broker.node.node_id
    outcomes: Outcomes = {}
    for name, moves in asked.items():
        image = ctx.broker.replicas.topic(name)
        outcome = outcomes[name] = {}
        for p, target in moves.items():
            if image is None or not 0 <= p < image.partitions:
                outcome[p] = UnknownTopicOrPartition(f"Partition {name}-{p} does not exist.")
            elif target is None:
                outcome[p] = NoReassignmentInProgress(
                    f"Partition {name}-{p} has no ongoing reassignment."
                )
            else:
                outcome[p] = _check_target(target, node, allow_rf_change)
    return outcomes


def _check_target(target: list[int], node: int, allow_rf_change: bool) -> KafkaError | None:
    try:
        validate_manual_assignment([target], [node])
    except KafkaError as exc:
        return exc
    if not allow_rf_change and len(target) != 1:
        return InvalidReplicationFactor(
            f"The replication factor is changed from 1 to {len(target)}"
        )
    return None


def _response(
    outcomes: Outcomes, allow_rf_change: bool, top: KafkaError | None = None
) -> AlterPartitionReassignmentsAnswer:
    return {
        "throttle_time": 0,
        "allow_replication_factor_change": allow_rf_change,
        "error_code": ErrorCode.none if top is None else top.code,
        "error_message": None if top is None else str(top),
        "responses": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": p,
                        "error_code": ErrorCode.none if e is None else e.code,
                        "error_message": None if e is None else str(e),
                    }
                    for p, e in sorted(outcome.items())
                ],
            }
            for name, outcome in outcomes.items()
        ],
    }
