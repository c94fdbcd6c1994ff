"""The transaction coordinator, sans-IO and event-sourced over `__transaction_state`.

Theory of operation. Each operation checks a request against the current `TxnMetadata` and
returns a `TxnResult`: the records to append (whole metadata values) and the answer. State
changes only in `replay`, after the broker appended the records, so loading the coordinator
is the same replay. Two-phase commit (EndTxn, and the aborts of InitProducerId and timeouts):

1. Prepare*: PrepareCommit or PrepareAbort is persisted (the decision is durable).
2. Markers: the broker writes a COMMIT/ABORT control batch to every partition of the
   transaction (`markers`), the same path a multi-broker WriteTxnMarkers takes.
3. Complete*: CompleteCommit or CompleteAbort is persisted (`complete`).
A coordinator that restarts between 1 and 3 finds Prepare* states in `pending()` and redoes
2 and 3; markers are idempotent on the partitions.

Ownership (a cluster): the leader of a transactional id's `__transaction_state` partition is
its coordinator, and the partition's leader epoch is the coordinator epoch its markers carry,
so a partition leader refuses markers of a deposed coordinator. `owned` lists the partitions
this coordinator has loaded (None: all, a single node); other ids get NOT_COORDINATOR.

Fencing: InitProducerId bumps the epoch (a new producer id when the epoch is exhausted);
requests with an older epoch get PRODUCER_FENCED. An open transaction of the old epoch, or
one past its `transaction.timeout.ms`, is aborted with a bumped epoch, so its producer is
fenced on every partition by the ABORT markers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from oncelog.clock import Clock
from oncelog.coordinator.txn.metadata import TxnMetadata
from oncelog.coordinator.txn.state import TxnState, check_transition
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition

MAX_EPOCH = 32767
COORDINATOR_EPOCH = 0  # single node: the __transaction_state leader epoch never changes

TxnRecord = tuple[str, TxnMetadata | None]


@dataclass(frozen=True, slots=True)
class TxnSettings:
    max_timeout_ms: int = 900_000
    id_expiration_ms: int = 604_800_000


@dataclass(slots=True)
class TxnResult:
    """Records to persist, then the answer; `complete` names a transaction whose markers
    must be written and that must then be completed."""

    error: ErrorCode = ErrorCode.none
    records: list[TxnRecord] = field(default_factory=list)
    producer_id: int = -1
    producer_epoch: int = -1
    complete: str | None = None


@dataclass(frozen=True, slots=True)
class Marker:
    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int = COORDINATOR_EPOCH


class TransactionCoordinator:
    def __init__(
        self, settings: TxnSettings, clock: Clock, allocate_producer_id: Callable[[], int]
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.allocate_producer_id = allocate_producer_id
        self.transactions: dict[str, TxnMetadata] = {}
        self._by_producer: dict[int, str] = {}
        #: Loaded `__transaction_state` partitions -> their coordinator (leader) epoch;
        #: None: every partition, epoch 0 (a single node).
        self.owned: dict[int, int] | None = None
        #: Which `__transaction_state` partition a transactional id lives in.
        self.partition_of: Callable[[str], int] = lambda txn_id: 0

    # -- ownership ---------------------------------------------------------------------------

    def owns(self, txn_id: str) -> bool:
        return self.owned is None or self.partition_of(txn_id) in self.owned

    def own_partitions(self, partition_of: Callable[[str], int]) -> None:
        """Serve only the partitions given to `loaded` from now on (cluster mode)."""
        self.partition_of = partition_of
        if self.owned is None:
            self.owned = {}

    def loaded(self, partition: int, coordinator_epoch: int) -> None:
        if self.owned is not None:
            self.owned[partition] = coordinator_epoch

    def unload(self, partition: int) -> None:
        """This broker no longer leads `partition`: forget its transactions."""
        if self.owned is not None:
            self.owned.pop(partition, None)
        for txn_id in [t for t in self.transactions if self.partition_of(t) == partition]:
            meta = self.transactions.pop(txn_id)
            self._by_producer.pop(meta.producer_id, None)

    def coordinator_epoch(self, txn_id: str) -> int:
        if self.owned is None:
            return COORDINATOR_EPOCH
        return self.owned.get(self.partition_of(txn_id), COORDINATOR_EPOCH)

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: TxnRecord) -> None:
        txn_id, meta = record
        old = self.transactions.pop(txn_id, None)
        if old is not None:
            self._by_producer.pop(old.producer_id, None)
        if meta is not None:
            self.transactions[txn_id] = meta
            self._by_producer[meta.producer_id] = txn_id

    def pending(self) -> list[str]:
        """Transactions decided (Prepare*) but not completed: redo their markers."""
        return [t for t, m in self.transactions.items() if m.state.is_prepare]

    # -- InitProducerId ----------------------------------------------------------------------

    def init_producer_id(
        self, txn_id: str, timeout_ms: int, expected_pid: int = -1, expected_epoch: int = -1
    ) -> TxnResult:
        if not self.owns(txn_id):
            return TxnResult(ErrorCode.not_coordinator)
        if not 0 < timeout_ms <= self.settings.max_timeout_ms:
            return TxnResult(ErrorCode.invalid_transaction_timeout)
        now = self.clock.wall_ms()
        meta = self.transactions.get(txn_id)
        if meta is None:
            pid = self.allocate_producer_id()
            fresh = TxnMetadata(txn_id, pid, 0, timeout_ms, TxnState.EMPTY, frozenset(), now, -1)
            return TxnResult(records=[(txn_id, fresh)], producer_id=pid, producer_epoch=0)
        if expected_pid >= 0 and (
            expected_pid != meta.producer_id or expected_epoch != meta.producer_epoch
        ):
            return TxnResult(ErrorCode.producer_fenced)
        if meta.state.is_prepare or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            return TxnResult(ErrorCode.concurrent_transactions)
        if meta.state == TxnState.ONGOING:
            # Abort the previous epoch's transaction first; the client retries.
            aborting = self._fence_and_abort(meta, now)
            return TxnResult(
                ErrorCode.concurrent_transactions, [(txn_id, aborting)], complete=txn_id
            )
        if meta.producer_epoch >= MAX_EPOCH - 1:
            pid, epoch = self.allocate_producer_id(), 0
        else:
            pid, epoch = meta.producer_id, meta.producer_epoch + 1
        bumped = meta.to(
            TxnState.EMPTY,
            now,
            producer_id=pid,
            producer_epoch=epoch,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
        )
        return TxnResult(records=[(txn_id, bumped)], producer_id=pid, producer_epoch=epoch)

    def _fence_and_abort(self, meta: TxnMetadata, now: int) -> TxnMetadata:
        check_transition(meta.state, TxnState.PREPARE_EPOCH_FENCE)
        fenced = replace(meta, state=TxnState.PREPARE_EPOCH_FENCE)
        epoch = min(meta.producer_epoch + 1, MAX_EPOCH)
        return fenced.to(TxnState.PREPARE_ABORT, now, producer_epoch=epoch)

    # -- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def _check_producer(self, txn_id: str, pid: int, epoch: int) -> TxnMetadata | ErrorCode:
        if not self.owns(txn_id):
            return ErrorCode.not_coordinator
        meta = self.transactions.get(txn_id)
        if meta is None or meta.producer_id != pid:
            return ErrorCode.invalid_producer_id_mapping
        if epoch != meta.producer_epoch:
            return ErrorCode.producer_fenced
        return meta

    def add_partitions(
        self, txn_id: str, pid: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> TxnResult:
        checked = self._check_producer(txn_id, pid, epoch)
        if isinstance(checked, ErrorCode):
            return TxnResult(checked)
        meta = checked
        if meta.state.is_prepare or meta.state == TxnState.PREPARE_EPOCH_FENCE:
            return TxnResult(ErrorCode.concurrent_transactions)
        wanted = frozenset(partitions)
        if meta.state == TxnState.ONGOING and wanted <= meta.partitions:
            return TxnResult()
        now = self.clock.wall_ms()
        start = meta.start_ms if meta.state == TxnState.ONGOING else now
        updated = meta.to(
            TxnState.ONGOING,
            now,
            partitions=(meta.partitions if meta.state == TxnState.ONGOING else frozenset())
            | wanted,
            start_ms=start,
        )
        return TxnResult(records=[(txn_id, updated)])

    # -- EndTxn ------------------------------------------------------------------------------

    def end_txn(self, txn_id: str, pid: int, epoch: int, commit: bool) -> TxnResult:
        checked = self._check_producer(txn_id, pid, epoch)
        if isinstance(checked, ErrorCode):
            return TxnResult(checked)
        meta = checked
        state = meta.state
        wanted_prepare = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        wanted_complete = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state == TxnState.ONGOING:
            prepared = meta.to(wanted_prepare, self.clock.wall_ms())
            return TxnResult(records=[(txn_id, prepared)], complete=txn_id)
        if state == wanted_complete:
            return TxnResult()  # a retry of an EndTxn that already completed
        if state == wanted_prepare:
            return TxnResult(ErrorCode.concurrent_transactions)
        if state == TxnState.EMPTY and not commit:
            return TxnResult()  # aborting nothing
        return TxnResult(ErrorCode.invalid_txn_state)

    def markers(self, txn_id: str) -> list[Marker]:
        """The markers a Prepare* transaction needs on each of its partitions."""
        meta = self.transactions[txn_id]
        commit = meta.state == TxnState.PREPARE_COMMIT
        epoch = self.coordinator_epoch(txn_id)
        return [
            Marker(tp, meta.producer_id, meta.producer_epoch, commit, epoch)
            for tp in sorted(meta.partitions)
        ]

    def complete(self, txn_id: str) -> list[TxnRecord]:
        """Records that move a Prepare* transaction to Complete* once its markers are written."""
        meta = self.transactions.get(txn_id)
        if meta is None or not meta.state.is_prepare:
            return []
        target = (
            TxnState.COMPLETE_COMMIT
            if meta.state == TxnState.PREPARE_COMMIT
            else TxnState.COMPLETE_ABORT
        )
        # Like Kafka, a completed transaction keeps its start time (DescribeTransactions shows it).
        done = meta.to(target, self.clock.wall_ms(), partitions=frozenset())
        return [(txn_id, done)]

    # -- timers ------------------------------------------------------------------------------

    def expire(self) -> list[TxnResult]:
        """Abort transactions past their timeout (with an epoch bump) and remove ids idle
        longer than transactional.id.expiration.ms."""
        now = self.clock.wall_ms()
        out: list[TxnResult] = []
        for txn_id, meta in list(self.transactions.items()):
            if meta.state == TxnState.ONGOING and now - meta.start_ms >= meta.timeout_ms:
                aborting = self._fence_and_abort(meta, now)
                out.append(TxnResult(records=[(txn_id, aborting)], complete=txn_id))
            elif (
                meta.state in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
                and now - meta.last_update_ms >= self.settings.id_expiration_ms
            ):
                out.append(TxnResult(records=[(txn_id, None)]))
        return out

    def next_deadline_ms(self) -> int | None:
        """Wall-clock time of the next transaction timeout, if any transaction is open."""
        deadlines = [
            m.start_ms + m.timeout_ms
            for m in self.transactions.values()
            if m.state == TxnState.ONGOING
        ]
        return min(deadlines) if deadlines else None

    # -- questions from the partitions and tools ---------------------------------------------

    def verify_partition(self, pid: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """KIP-890: may this producer write transactional data to `tp` now?"""
        txn_id = self._by_producer.get(pid)
        if txn_id is None:
            return ErrorCode.invalid_producer_id_mapping
        meta = self.transactions[txn_id]
        if epoch != meta.producer_epoch:
            return ErrorCode.invalid_producer_epoch
        if meta.state != TxnState.ONGOING or tp not in meta.partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    def transactional_id_of(self, pid: int) -> str | None:
        return self._by_producer.get(pid)
