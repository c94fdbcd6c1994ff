"""Produce (0): validate and append each partition's batches; acks 0, 1 and all.

Every partition is all-or-nothing. acks=all first checks the committed ISR against the
topic's min.insync.replicas (NOT_ENOUGH_REPLICAS, nothing appended). On a single node the
ISR is the leader itself, so the local append satisfies acks=all. In a cluster the answer
waits in the purgatory (Kafka's DelayedProduce) until the high watermark covers the batch;
if the ISR shrank below min.insync.replicas by then the batch is written but answered
NOT_ENOUGH_REPLICAS_AFTER_APPEND; a lost leadership answers NOT_LEADER_OR_FOLLOWER and
`timeout_ms` REQUEST_TIMED_OUT, so the client retries (and the new leader recognises the
retry as a duplicate from the producer state it replicated).
With acks=0 no response is sent; an error then closes the connection, as Kafka does, so the
client notices.
"""

from __future__ import annotations

import logging
from typing import Any

from oncelog.broker import authz
from oncelog.broker.cluster_view import PendingOp
from oncelog.broker.context import RequestContext
from oncelog.broker.handlers import NO_RESPONSE, CloseConnection
from oncelog.broker.handlers.types import ProduceAnswer, ProduceRequest
from oncelog.broker.purgatory import Delayed
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.fast_requests import produce_timeout_ms
from oncelog.security.acl import AclOperation as Op
from oncelog.storage.partition_log import AppendInfo
from oncelog.storage.validator import KeylessRecords
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)


def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceAnswer | Delayed | object:
    """`object`: `NO_RESPONSE`, for acks=0."""
    denied = _unauthorized(ctx, request)
    asks = _verifications(ctx, request, denied)
    if not asks:
        return _produce(ctx, request, _NOTHING_VERIFIED, {}, denied)
    return _after_verification(ctx, request, asks, denied)


#: Bit 4 of a record batch's attributes (big-endian int16 at offset 21): transactional.
_TRANSACTIONAL = 0x10
_NOTHING_VERIFIED: frozenset[tuple[int, int, TopicPartition]] = frozenset()
#: Read once: on CPython 3.11 each `ErrorCode.x` is a Python-level lookup (EnumType.__getattr__).
_NONE = ErrorCode.none
#: `tuple.__new__(TopicPartition, (topic, index))`: the NamedTuple without its Python-level
#: `__new__`, for the one made per partition of every Produce.
_new_tuple = tuple.__new__


def _has_transactional_batch(request: ProduceRequest) -> bool:
    """Whether any partition's batch is transactional (one byte read per partition)."""
    for topic in request.topic_data:
        for pdata in topic.partition_data:
            records = pdata.records
            if records is not None and len(records) > 22 and records[22] & _TRANSACTIONAL:
                return True
    return False


def _unauthorized(ctx: RequestContext, request: ProduceRequest) -> dict[TopicPartition, ErrorCode]:
    """Kafka's checks, before anything is appended: transactional batches need Write on the
    request's transactional id (else every partition fails), each topic Write."""
    txn_id = getattr(request, "transactional_id", None)
    enabled = authz.enabled(ctx)
    if not enabled and txn_id is not None:
        return {}
    # Transactional batches in a request without a transactional id fail whole, authorizer
    # or not (Kafka's KafkaApis.handleProduceRequest); one byte per partition is read.
    transactional = txn_id is not None or _has_transactional_batch(request)
    if not enabled and not transactional:
        return {}
    txn_denied = transactional and (
        not txn_id or not authz.transactional_id(ctx, Op.WRITE, txn_id)
    )
    denied: dict[TopicPartition, ErrorCode] = {}
    for topic in request.topic_data:
        if txn_denied:
            code = ErrorCode.transactional_id_authorization_failed
        elif not authz.topic(ctx, Op.WRITE, topic.name):
            code = ErrorCode.topic_authorization_failed
        else:
            continue
        for pdata in topic.partition_data:
            denied[TopicPartition(topic.name, pdata.index)] = code
    return denied


#: Coordinator trouble during verification: Kafka answers the produce with a retriable error.
_RETRIABLE_VERIFICATION = {
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.request_timed_out,
    ErrorCode.concurrent_transactions,
}


class _Unverified(Exception):
    """The transaction's coordinator (another broker) did not confirm this partition."""

    def __init__(self, code: ErrorCode, tp: TopicPartition) -> None:
        super().__init__(f"{tp}: the transaction's coordinator did not confirm it ({code.name})")
        self.error_code = code


def _verifications(
    ctx: RequestContext, request: ProduceRequest, denied: dict[TopicPartition, ErrorCode]
) -> list[tuple[PendingOp, int, int]]:
    """In a cluster: ask the coordinators of transactions that open here first (KIP-890)."""
    replicas, ops = ctx.broker.replicas, ctx.broker.cluster_ops
    txn_id = getattr(request, "transactional_id", None)
    if ops is None or not txn_id or request.acks == 0:
        return []
    wanted: dict[tuple[int, int], list[TopicPartition]] = {}
    for topic in request.topic_data:
        for pdata in topic.partition_data:
            tp = TopicPartition(topic.name, pdata.index)
            if tp in denied:
                continue
            producer = replicas.transactions_to_verify(tp, pdata.records or b"")
            if producer is not None:
                wanted.setdefault(producer, []).append(tp)
    return [
        (ops.verify_transaction(txn_id, pid, epoch, tps), pid, epoch)
        for (pid, epoch), tps in wanted.items()
    ]


def _after_verification(
    ctx: RequestContext,
    request: ProduceRequest,
    asks: list[tuple[PendingOp, int, int]],
    denied: dict[TopicPartition, ErrorCode],
) -> Delayed:
    """Wait for the coordinators' answers, then produce (which may wait again, acks=all)."""
    inner: list[Delayed] = []
    producing: list[bool] = []

    def attempt(force: bool) -> Any:
        if inner:
            return inner[0].try_complete(force)
        if producing:
            return None  # woken by our own appends while producing below
        if not force and not all(op.done for op, _, _ in asks):
            return None
        producing.append(True)
        verified: set[tuple[int, int, TopicPartition]] = set()
        refused: dict[TopicPartition, ErrorCode] = {}
        for op, pid, epoch in asks:
            codes = op.result if isinstance(op.result, dict) else {}
            for tp, code in codes.items():
                if code == ErrorCode.none:
                    verified.add((pid, epoch, tp))
                else:
                    refused[tp] = (
                        ErrorCode.not_enough_replicas
                        if code in _RETRIABLE_VERIFICATION
                        else ErrorCode(code)
                    )
            if not op.done or op.error is not None:
                for tp in op.key[-1] if isinstance(op.key, tuple) else ():
                    refused.setdefault(tp, ErrorCode.not_enough_replicas)
        try:
            answer = _produce(ctx, request, frozenset(verified), refused, denied)
        finally:
            producing.clear()
        if isinstance(answer, Delayed):
            inner.append(answer)
            return answer.try_complete(force)
        return answer

    tps = tuple(
        TopicPartition(t.name, p.index) for t in request.topic_data for p in t.partition_data
    )
    deadline = ctx.broker.clock.monotonic_ms() + produce_timeout_ms(request)
    return Delayed(attempt, deadline, tuple(op.key for op, _, _ in asks) + tps)


def _produce(
    ctx: RequestContext,
    request: ProduceRequest,
    verified: frozenset[tuple[int, int, TopicPartition]],
    refused: dict[TopicPartition, ErrorCode],
    denied: dict[TopicPartition, ErrorCode],
) -> ProduceAnswer | Delayed | object:
    replicas = ctx.broker.replicas
    acks = request.acks
    responses: list[dict[str, Any]] = []
    appended: list[TopicPartition] = []
    #: acks=all in a cluster: (partition, offset the HW must reach, leader epoch, entry)
    waiting: list[tuple[TopicPartition, int, int, dict[str, Any]]] = []
    failed = False
    for topic in request.topic_data:
        partitions = []
        for pdata in topic.partition_data:
            tp = _new_tuple(TopicPartition, (topic.name, pdata.index))
            entry: dict[str, Any] = {
                "index": pdata.index,
                "error_code": _NONE,
                "base_offset": -1,
                "log_append_time": -1,
                "log_start_offset": -1,
                "record_errors": [],
                "error_message": None,
            }
            if denied and tp in denied:
                entry.update(error_code=denied[tp], error_message=None)
                info = None
            else:
                info = _append_partition(
                    ctx, tp, pdata.records or b"", acks, verified, refused, entry
                )
            if info is None:
                failed = True
            else:
                appended.append(tp)
                if acks == -1 and replicas.clustered:
                    epoch = replicas.leader_epoch(tp)
                    waiting.append((tp, info.last_offset + 1, epoch, entry))
            partitions.append(entry)
        responses.append({"name": topic.name, "partition_responses": partitions})
    replicas.notify_appended(appended)
    if acks == 0:
        if failed:
            raise CloseConnection("acks=0 produce failed")
        return NO_RESPONSE
    response: ProduceAnswer = {"responses": responses, "throttle_time": 0}
    if not waiting:
        return response

    def attempt(force: bool) -> ProduceAnswer | None:
        pending = [w for w in waiting if not _replicated(replicas, *w, force=force)]
        waiting[:] = pending
        return response if not pending else None

    ready = attempt(False)
    if ready is not None:
        return ready
    deadline = ctx.broker.clock.monotonic_ms() + produce_timeout_ms(request)
    return Delayed(attempt, deadline, tuple(tp for tp, *_ in waiting))


def _append_partition(
    ctx: RequestContext,
    tp: TopicPartition,
    records: bytes | memoryview,
    acks: int,
    verified: frozenset[tuple[int, int, TopicPartition]],
    refused: dict[TopicPartition, ErrorCode],
    entry: dict[str, Any],
) -> AppendInfo | None:
    """Append one partition's data and fill its answer; None when it was refused."""
    replicas = ctx.broker.replicas
    try:
        if acks not in (0, 1, -1):
            raise _invalid_acks(acks)
        if refused and tp in refused:
            raise _Unverified(refused[tp], tp)
        info: AppendInfo = replicas.append(tp, records, acks_all=acks == -1, verified=verified)
    except _Unverified as exc:
        entry.update(error_code=exc.error_code, error_message=str(exc))
        return None
    except KeylessRecords as exc:
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
        return None
    except KafkaError as exc:
        log.debug("produce to %s refused: %s", tp, exc)
        entry.update(error_code=exc.code, error_message=str(exc) or None)
        return None
    if info.duplicate:
        ctx.broker.metrics.record_duplicate(tp.topic)
    entry["base_offset"] = info.base_offset
    entry["log_append_time"] = info.log_append_time
    entry["log_start_offset"] = info.log_start_offset
    return info


def _replicated(
    replicas: ReplicaManager,
    tp: TopicPartition,
    required: int,
    epoch: int,
    entry: dict[str, Any],
    *,
    force: bool,
) -> bool:
    """Kafka's DelayedProduce check for one partition; True when its answer is settled."""
    try:
        replica = replicas.cluster_partition(tp)
        leader = replica.check_leader()
    except KafkaError as exc:
        entry.update(error_code=exc.code, error_message=str(exc) or None)
        return True
    if leader.leader_epoch != epoch:
        entry.update(
            error_code=ErrorCode.not_leader_or_follower,
            error_message=f"{tp}: leadership moved on while waiting for replication",
        )
        return True
    if replica.log.high_watermark >= required:
        min_isr = replica.log.config.min_insync_replicas
        if len(leader.isr) < min_isr:
            entry.update(
                error_code=ErrorCode.not_enough_replicas_after_append,
                error_message=f"{tp}: the ISR {sorted(leader.isr)} shrank below "
                f"min.insync.replicas {min_isr} while the batch was replicated",
            )
        return True
    if force:
        entry.update(
            error_code=ErrorCode.request_timed_out,
            error_message=f"{tp}: not replicated to the ISR within the request timeout",
        )
        return True
    return False


def _invalid_acks(acks: int) -> KafkaError:
    from oncelog.errors import InvalidRequiredAcks

    return InvalidRequiredAcks(f"acks must be 0, 1 or -1, got {acks}")
