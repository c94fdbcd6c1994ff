"""AddPartitionsToTxn (24), v0-3: a producer names the partitions its transaction writes.

Every partition must exist, else that one gets UNKNOWN_TOPIC_OR_PARTITION and the others
OPERATION_NOT_ATTEMPTED, as Kafka answers. v4+ (brokers verifying for each other, KIP-890)
is not offered.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    txns = ctx.broker.txns
    tps = [TopicPartition(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in tps if ctx.broker.replicas.logs.get(tp) is None}
    codes: dict[TopicPartition, ErrorCode] = {}
    if unknown:
        for tp in tps:
            codes[tp] = (
                ErrorCode.unknown_topic_or_partition
                if tp in unknown
                else ErrorCode.operation_not_attempted
            )
    else:
        result = txns.coordinator.add_partitions(
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            tps,
        )
        code = for_version(txns.run(result), ctx.api_key, ctx.api_version)
        codes = dict.fromkeys(tps, code)
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp, code in codes.items():
        by_topic[tp.topic].append({"partition_index": tp.partition, "partition_error_code": code})
    return {
        "throttle_time": 0,
        "results_by_topic_v3_and_below": [
            {"name": name, "results_by_partition": results} for name, results in by_topic.items()
        ],
    }
