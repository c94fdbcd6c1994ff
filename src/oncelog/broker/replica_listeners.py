"""What a replica manager tells the rest of the broker, given to it at construction
(`broker/assembly.py` wires them): the waiting requests an append or a state change wakes,
the follower fetch sessions holding a partition, the ISR changes a leader wants written, the
metrics of what was stored and fsynced, the server's background flushes and checkpoints, and
the transaction coordinator's answers for KIP-890 verification. Every field has an inert
default, so a replica manager in a test needs none."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.broker.partition import Partition


class TransactionChecks(Protocol):
    """The transaction coordinator's side of KIP-890 verification."""

    def verify(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """NONE when `tp` is in the producer's open transaction, else why not."""
        ...

    def knows(self, producer_id: int) -> bool:
        """Whether this broker coordinates `producer_id`'s transactional id."""
        ...


class NoTransactions:
    """No transaction coordinator: transactional data is refused, no producer is known."""

    def verify(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        return ErrorCode.invalid_txn_state

    def knows(self, producer_id: int) -> bool:
        return False


def _ignore(*_args: object) -> None:
    pass


def _no_sessions(_tps: list[TopicPartition]) -> list[tuple[str, int]]:
    return []


def _run(flush: Callable[[], None]) -> None:
    flush()


@dataclass(frozen=True, slots=True)
class ReplicaListeners:
    """The replica manager's listeners (see the module's docstring)."""

    wake: Callable[[list[Hashable]], None] = _ignore
    """Complete the waiting requests (the purgatory's) watching these keys: partitions that
    moved and the follower fetch sessions holding them."""
    fetch_touched: Callable[[list[TopicPartition]], list[tuple[str, int]]] = _no_sessions
    """The fetch sessions' `touched`: the keys of the follower sessions holding these
    partitions (woken with them)."""
    isr_change: Callable[[Partition, frozenset[int]], None] = _ignore
    """A leader wants this ISR written (in a cluster: to etcd, by compare-and-swap)."""
    appended: Callable[[str, int, int], None] = _ignore
    """(topic, bytes, records) of each append that wrote (duplicates do not), for the
    metrics; records are counted from the batch headers."""
    replicated: Callable[[str, int], None] = _ignore
    """(topic, bytes) stored as a follower, for the metrics."""
    flush: Callable[[Callable[[], None]], None] = _run
    """Runs every segment fsync of every partition (the metrics time them)."""
    segment_rolled: Callable[[], None] = _ignore
    """A partition rolled a segment (on whatever thread appended): the server then runs
    `flush_rolled` in a worker soon, not only on its 1 s timer."""
    checkpoint_soon: Callable[[], None] | None = None
    """Write the checkpoint files soon (the server: in a worker, off its event loop); None:
    at once."""
    transactions: TransactionChecks = field(default_factory=NoTransactions)
