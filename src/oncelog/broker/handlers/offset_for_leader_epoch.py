"""OffsetForLeaderEpoch (23): the end offset of a leader epoch (KIP-101 / KIP-320).

A single node has had one leader epoch (0) since each partition was created, so epoch 0 ends
at the log end offset; a later epoch is unknown (-1, -1) as in Kafka's epoch cache. In a
cluster the leader answers from its leader-epoch cache: a follower asks where its latest
epoch ends before it fetches after a leader change, and truncates there (KIP-101/KIP-279).
"""

from __future__ import annotations

from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import OffsetForLeaderEpochAnswer, OffsetForLeaderEpochRequest
from oncelog.broker.replica_manager import LEADER_EPOCH
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochAnswer:
    replicas = ctx.broker.replicas
    # A follower's request needs ClusterAction on the cluster, a client's Describe on the topic.
    follower = getattr(request, "replica_id", -1) >= 0
    cluster_ok = follower and authz.authorize_cluster(ctx, Op.CLUSTER_ACTION)
    topics = []
    for topic in request.topics:
        partitions = []
        if follower:
            denied = None if cluster_ok else ErrorCode.cluster_authorization_failed
        elif authz.topic(ctx, Op.DESCRIBE, topic.topic):
            denied = None
        else:
            denied = ErrorCode.topic_authorization_failed
        for p in topic.partitions:
            entry: dict[str, Any] = {
                "error_code": ErrorCode.none,
                "partition": p.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            if denied is not None:
                entry["error_code"] = denied
                partitions.append(entry)
                continue
            try:
                tp = TopicPartition(topic.topic, p.partition)
                plog = replicas.partition(tp)
                replicas.check_leader_epoch(tp, p.current_leader_epoch)
                if replicas.clustered:
                    replicas.leader_epoch(tp)  # only the leader answers
                    epoch, end = plog.end_offset_for_epoch(p.leader_epoch)
                    entry.update(leader_epoch=epoch, end_offset=end)
                elif p.leader_epoch <= LEADER_EPOCH and p.leader_epoch >= 0:
                    entry.update(leader_epoch=LEADER_EPOCH, end_offset=plog.log_end_offset)
            except KafkaError as exc:
                entry["error_code"] = exc.code
            partitions.append(entry)
        topics.append({"topic": topic.topic, "partitions": partitions})
    return {"throttle_time": 0, "topics": topics}
