"""Produce (0): validate and append each partition's batches; acks 0, 1 and all.

Every partition is all-or-nothing. With acks=all the in-sync replica set of a single node is
the leader itself, so the local append satisfies it, unless the topic's min.insync.replicas
asks for more than that one replica: then, as in Kafka, NOT_ENOUGH_REPLICAS and no append.
With acks=0 no response is sent; an error then closes the connection, as Kafka does, so the
client notices.
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers import NO_RESPONSE, CloseConnection
from oncelog.errors import ErrorCode, KafkaError, NotEnoughReplicas
from oncelog.storage.validator import KeylessRecords
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

#: A single node is the only member of every partition's in-sync replica set.
IN_SYNC_REPLICAS = 1


def handle(ctx: RequestContext, request: Any) -> Any:
    replicas = ctx.broker.replicas
    acks = request.acks
    responses: list[dict[str, Any]] = []
    appended: list[TopicPartition] = []
    failed = False
    for topic in request.topic_data:
        partitions = []
        for pdata in topic.partition_data:
            tp = TopicPartition(topic.name, pdata.index)
            entry: dict[str, Any] = {
                "index": pdata.index,
                "error_code": ErrorCode.none,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
                "record_errors": [],
                "error_message": None,
            }
            try:
                if acks not in (0, 1, -1):
                    raise _invalid_acks(acks)
                if acks == -1:
                    _check_min_isr(replicas, tp)
                info = replicas.append(tp, pdata.records or b"")
                if info.duplicate:
                    ctx.broker.metrics.duplicate_batches += 1
                entry.update(
                    base_offset=info.base_offset,
                    log_append_time=info.log_append_time,
                    log_start_offset=info.log_start_offset,
                )
                appended.append(tp)
            except KeylessRecords as exc:
                failed = True
                log.debug("produce to %s refused: %s", tp, exc)
                # Kafka names each refused record by its index in the batch (KIP-467).
                entry.update(
                    error_code=exc.code,
                    error_message=exc.kafka_message(str(tp)),
                    record_errors=[
                        {"batch_index": index, "batch_index_error_message": why}
                        for index, why in exc.record_errors(str(tp))
                    ],
                )
            except KafkaError as exc:
                failed = True
                log.debug("produce to %s refused: %s", tp, exc)
                entry.update(error_code=exc.code, error_message=str(exc) or None)
            partitions.append(entry)
        responses.append({"name": topic.name, "partition_responses": partitions})
    replicas.notify_appended(appended)
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed")
        return NO_RESPONSE
    return {"responses": responses, "throttle_time": 0}


def _check_min_isr(replicas: Any, tp: TopicPartition) -> None:
    """Kafka refuses acks=all while the in-sync replicas are fewer than min.insync.replicas."""
    required = replicas.partition(tp).config.min_insync_replicas
    if required > IN_SYNC_REPLICAS:
        raise NotEnoughReplicas(
            f"{tp}: the in-sync replicas [{IN_SYNC_REPLICAS}] are fewer than "
            f"min.insync.replicas {required}"
        )


def _invalid_acks(acks: int) -> KafkaError:
    from oncelog.errors import InvalidRequiredAcks

    return InvalidRequiredAcks(f"acks must be 0, 1 or -1, got {acks}")
