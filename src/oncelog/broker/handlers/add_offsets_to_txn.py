"""AddOffsetsToTxn (25): the group's `__consumer_offsets` partition joins the transaction,
so the offsets the producer commits with TxnOffsetCommit get the transaction's marker."""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.group_runtime import OFFSETS_TOPIC
from oncelog.broker.handlers.txn_errors import for_version
from oncelog.types import TopicPartition


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    groups = ctx.broker.groups
    tp = TopicPartition(OFFSETS_TOPIC, groups.coordinator.partition_for(request.group_id))
    result = ctx.broker.txns.coordinator.add_partitions(
        request.transactional_id, request.producer_id, request.producer_epoch, [tp]
    )
    code = for_version(ctx.broker.txns.run(result), ctx.api_key, ctx.api_version)
    return {"throttle_time": 0, "error_code": code}
