"""InitProducerId (22): a fresh producer id at epoch 0 for idempotent producers.

Without a transactional.id Kafka always hands out a new id, also when the client sends its
current id and epoch (KIP-360): the partitions accept an unknown producer at any sequence,
so the new session starts cleanly. Transactional ids need the transaction coordinator, which
this broker does not run yet: they get COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.errors import ErrorCode


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        return _answer(ErrorCode.coordinator_not_available, -1, -1)
    producer_id = ctx.broker.replicas.producer_ids.next_id()
    return _answer(ErrorCode.none, producer_id, 0)


def _answer(code: ErrorCode, producer_id: int, epoch: int) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": code,
        "producer_id": producer_id,
        "producer_epoch": epoch,
    }
