"""Coordinator answers that wait: for their records to be replicated, or for the previous
transaction of the same transactional id to complete.

A transaction is answered committed (EndTxn) once its decision is replicated; its markers
are written after that, and until its completion is stored the coordinator answers the
producer's next AddPartitionsToTxn or AddOffsetsToTxn with CONCURRENT_TRANSACTIONS, as
Kafka does; InitProducerId too (also while it aborts the open transaction it fences), and
a retried EndTxn while its own decision completes. Clients retry after a fixed pause
(librdkafka 20 ms for AddPartitionsToTxn, retry.backoff.ms for the others), so
back-to-back transactions on a cluster, whose markers take a few milliseconds of
replication, paid that pause every time. Here the request waits in the purgatory instead
and is answered as soon as the completion is stored: the same answer a retry would get,
without the pause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers import CloseConnection
from oncelog.broker.purgatory import Delayed
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

#: How long an answer waits for its coordinator records to be replicated (Kafka's
#: offsets.commit.timeout.ms default), and at most for the previous transaction to complete.
COORDINATOR_WRITE_TIMEOUT_MS = 5_000

Writes = Sequence[tuple[TopicPartition, int, int]]
T = TypeVar("T")
#: An API's answer (`types.<Api>Answer`, a TypedDict).
A = TypeVar("A", bound=Mapping[str, object])


def answer_once_replicated(
    replicas: ReplicaManager, writes: Writes, answer: T, force: bool
) -> T | CloseConnection | None:
    """A held coordinator answer's `try_complete`: `answer` once `writes` (partition, end,
    leader epoch) are replicated, None while they are not, CloseConnection when a
    leadership moved or (`force`) the time ran out: the client retries with the new
    coordinator, and never hears success for a record a failover may lose."""
    replicated = replicas.writes_replicated(writes)
    if replicated is None:
        return CloseConnection("leadership moved before the coordinator records replicated")
    if not replicated:
        return CloseConnection("coordinator records not replicated in time") if force else None
    return answer


def after_previous_transaction(
    ctx: RequestContext,
    txn_id: str,
    step: Callable[[], ErrorCode],
    answer: Callable[[ErrorCode], A],
) -> A | Delayed:
    """Run `step` (a coordinator operation of `txn_id`, returning its error) and answer with
    `answer(error)`; while `step` finds the previous transaction still completing
    (CONCURRENT_TRANSACTIONS), wait for the completion and run it again.

    The wait watches the transaction's `__transaction_state` partition, which the completion
    is appended to. Once `step` passes, the records it wrote must be replicated before the
    answer (what the dispatcher does for an answer given at once). When the wait runs out
    the answer is CONCURRENT_TRANSACTIONS, and the client retries as before; a wait that
    ends after `step` passed, with its records not yet replicated, closes the connection.
    """
    code = step()
    if code != ErrorCode.concurrent_transactions:
        return answer(code)
    replicas = ctx.broker.replicas
    txns = ctx.broker.txns
    writes: list[tuple[TopicPartition, int, int]] = []
    answered: A | None = None

    def attempt(force: bool) -> A | CloseConnection | None:
        nonlocal answered
        if answered is None:
            if force:
                return answer(ErrorCode.concurrent_transactions)
            # Run apart from whatever request is being handled: these writes are ours.
            code, written = replicas.writes_of(step)
            if code == ErrorCode.concurrent_transactions:
                return None
            writes[:] = written
            answered = answer(code)
        return answer_once_replicated(replicas, writes, answered, force)

    # The first step may have completed the transaction itself (a single broker writes the
    # markers of the transaction InitProducerId fences at once): try again before waiting.
    ready = attempt(False)
    if ready is not None and not isinstance(ready, CloseConnection):
        return ready
    deadline = ctx.broker.clock.monotonic_ms() + COORDINATOR_WRITE_TIMEOUT_MS
    return Delayed(attempt, deadline, (txns.state_partition(txn_id),))
