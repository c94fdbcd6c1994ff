"""WriteTxnMarkers (27): write COMMIT/ABORT markers to partitions.

In a cluster the transaction coordinator sends this to partition leaders; operators also use
it (KIP-664, `oncelog transactions abort`) to end a hanging transaction whose coordinator no
longer knows it, which releases the partition's LSO. The markers go through the same
partition path the local coordinator uses, so epoch fencing applies.
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker import authz
from oncelog.broker.context import RequestContext
from oncelog.coordinator.txn import Marker
from oncelog.errors import ErrorCode, KafkaError
from oncelog.security.acl import AclOperation as Op
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
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
                plog = replicas.logs.get(tp)
                if not allowed:
                    code = ErrorCode.cluster_authorization_failed
                elif plog is None:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    try:
                        epoch = replicas.leader_epoch(tp)
                        info = plog.append_marker(
                            marker.producer_id,
                            marker.producer_epoch,
                            marker.coordinator_epoch,
                            bool(marker.transaction_result),
                            epoch,
                        )
                        touched.append(tp)
                        if replicas.clustered:
                            replicas.leader_appended(tp)
                            # Answered once replicated (the dispatcher waits for the HW).
                            replicas.coordinator_writes.append((tp, info.last_offset + 1, epoch))
                        # Offsets staged by TxnOffsetCommit are decided by this marker.
                        ctx.broker.groups.on_marker(
                            Marker(
                                tp,
                                marker.producer_id,
                                marker.producer_epoch,
                                bool(marker.transaction_result),
                                marker.coordinator_epoch,
                            )
                        )
                    except KafkaError as exc:
                        code = exc.code
                    except OSError as exc:
                        # The disk refused the marker (the log takes it back): this partition
                        # answers KAFKA_STORAGE_ERROR and the sender retries; the others stand.
                        log.error("%s: marker not written: %s", tp, exc)
                        code = ErrorCode.kafka_storage_error
                partitions.append({"partition_index": index, "error_code": code})
            topics.append({"name": topic.name, "partitions": partitions})
        results.append({"producer_id": marker.producer_id, "topics": topics})
    replicas.notify_appended(touched)
    return {"markers": results}
