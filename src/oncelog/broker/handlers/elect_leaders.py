"""ElectLeaders (43): preferred (election_type 0) or unclean (1) leader elections.

In a cluster only the active controller elects (`Controller.elect_leaders`, written to etcd
by CAS); any other broker answers NOT_CONTROLLER, at the top (v1+) and for each partition
named (Kafka's ZooKeeper-mode controller does the latter), and clients find the controller
again through Metadata's controller_id. Per partition, as Kafka: ELECTION_NOT_NEEDED (the
preferred replica already leads / a leader is alive), PREFERRED_LEADER_NOT_AVAILABLE,
ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION. The answer waits until the
elections are written and seen by this broker, or the request's timeout (REQUEST_TIMED_OUT
for what is left). `topic_partitions` null means every partition, and then, as Kafka, the
answer leaves out those that needed no election. A single node leads every partition:
ELECTION_NOT_NEEDED for each.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import ElectLeadersAnswer, ElectLeadersRequest
from oncelog.broker.purgatory import Delayed
from oncelog.errors import (
    ClusterAuthorizationFailed,
    ElectionNotNeeded,
    ErrorCode,
    InvalidRequest,
    KafkaError,
    NotController,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition

PREFERRED = 0
UNCLEAN = 1


def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersAnswer | Delayed:
    election_type = int(getattr(request, "election_type", PREFERRED))
    named = request.topic_partitions
    wanted: list[TopicPartition] | None = None
    if named is not None:
        wanted = list(
            dict.fromkeys(TopicPartition(t.topic, int(p)) for t in named for p in t.partitions)
        )
    if not authz.authorize_cluster(ctx, Op.ALTER):
        denied = ClusterAuthorizationFailed("Cluster authorization failed.")
        return _response(denied.code, dict.fromkeys(wanted or [], denied), named is None)
    if election_type not in (PREFERRED, UNCLEAN):
        invalid = InvalidRequest(f"unknown election type {election_type}")
        return _response(invalid.code, dict.fromkeys(wanted or [], invalid), named is None)
    if ctx.broker.cluster_ops is None:
        return _response(ErrorCode.none, _single_node(ctx, wanted), named is None)
    ops = ctx.broker.cluster_ops
    started = ops.elect_leaders(wanted, election_type == PREFERRED)
    if started is None:
        error = NotController(
            f"broker {ctx.broker.node.node_id} is not the controller "
            f"(controller: {ctx.broker.cluster.controller_id if ctx.broker.cluster else -1})"
        )
        return _response(error.code, dict.fromkeys(wanted or [], error), named is None)
    results, op = started
    if op.done:
        return _response(ErrorCode.none, results, named is None)

    def attempt(force: bool) -> ElectLeadersAnswer | None:
        if not op.done and not force:
            return None
        final = dict(results)
        if not op.done:
            late = RequestTimedOut("the election did not complete within the request's timeout")
            final = {tp: (late if e is None else e) for tp, e in final.items()}
        return _response(ErrorCode.none, final, named is None)

    timeout_ms = max(int(request.timeout.total_seconds() * 1000), 1)
    return Delayed(attempt, ctx.broker.clock.monotonic_ms() + timeout_ms, (op.key,))


def _single_node(
    ctx: RequestContext, wanted: list[TopicPartition] | None
) -> dict[TopicPartition, KafkaError | None]:
    replicas = ctx.broker.replicas
    if wanted is None:
        wanted = [
            TopicPartition(t.name, p)
            for t in replicas.metadata.topics.values()
            for p in range(t.partitions)
        ]
    results: dict[TopicPartition, KafkaError | None] = {}
    node = ctx.broker.node.node_id
    for tp in wanted:
        image = replicas.topic(tp.topic)
        if image is None or not 0 <= tp.partition < image.partitions:
            results[tp] = UnknownTopicOrPartition(f"no such partition {tp}")
        else:
            results[tp] = ElectionNotNeeded(f"{node} already leads {tp}")
    return results


def _response(
    code: ErrorCode, results: dict[TopicPartition, KafkaError | None], all_partitions: bool
) -> ElectLeadersAnswer:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, error in results.items():
        if all_partitions and isinstance(error, ElectionNotNeeded):
            continue
        by_topic[tp.topic].append(
            {
                "partition_id": tp.partition,
                "error_code": ErrorCode.none if error is None else error.code,
                "error_message": None if error is None else str(error),
            }
        )
    return {
        "throttle_time": 0,
        "error_code": code,
        "replica_election_results": [
            {"topic": topic, "partition_result": sorted(parts, key=lambda r: r["partition_id"])}
            for topic, parts in by_topic.items()
        ],
    }
