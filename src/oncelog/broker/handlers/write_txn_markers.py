"""WriteTxnMarkers (27): write COMMIT/ABORT markers to partitions.

In a cluster the transaction coordinator sends this to partition leaders; operators also use
it (KIP-664, `oncelog transactions abort`) to end a hanging transaction whose coordinator no
longer knows it, which releases the partition's LSO. The markers go through the same
write the local coordinator uses (`TxnRuntime.write_marker`), so epoch fencing applies.
"""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.types import WriteTxnMarkersAnswer, WriteTxnMarkersRequest
from oncelog.coordinator.txn import Marker
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: WriteTxnMarkersRequest) -> WriteTxnMarkersAnswer:
    replicas = ctx.broker.replicas
    results = []
    touched: list[TopicPartition] = []
    # Only brokers (ClusterAction on the cluster) write markers.
    allowed = authz.authorize_cluster(ctx, Op.CLUSTER_ACTION)
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                tp = TopicPartition(topic.name, index)
                code = ErrorCode.none
                if not allowed:
                    code = ErrorCode.cluster_authorization_failed
                else:
                    try:
                        # Answered once replicated (the dispatcher waits for the HW); the
                        # offsets staged by TxnOffsetCommit are decided by this marker.
                        ctx.broker.txns.write_marker(
                            Marker(
                                tp,
                                marker.producer_id,
                                marker.producer_epoch,
                                bool(marker.transaction_result),
                                marker.coordinator_epoch,
                            )
                        )
                        touched.append(tp)
                    except KafkaError as exc:
                        # KAFKA_STORAGE_ERROR when the disk refused it (the log took it
                        # back): the sender retries; the other partitions stand.
                        code = exc.code
                partitions.append({"partition_index": index, "error_code": code})
            topics.append({"name": topic.name, "partitions": partitions})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    replicas.notify_appended(touched)
    return {"markers": results}
