"""Validation of one producer's batches against its state, staged on a copy.

`ProducerAppendInfo` checks each batch of a produce request in order against a copy of the
producer's entry; the partition applies the copy (`ProducerStateManager.update`) only after
the bytes were appended, so a failed append leaves the state untouched. Rules (Kafka's
ProducerAppendInfo, with KIP-360):

1. A lower epoch than the current one is fenced: INVALID_PRODUCER_EPOCH.
2. A new, higher epoch must start at sequence 0 (unless the producer is unknown).
3. In the same epoch, the first sequence must follow the last one (int32 wrap-around);
   otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.
4. A producer the partition knows nothing about (never seen, or its state expired or was
   removed with its data) is accepted at any sequence: that is what lets today's clients,
   which bump their epoch on errors, continue after expiry.
Duplicates are found before these checks (`ProducerStateManager.find_duplicate`).

Transactions: the first transactional batch of a producer on a partition opens its
transaction there (`current_txn_first_offset`); a non-transactional batch while one is open
is INVALID_TXN_STATE. A COMMIT or ABORT marker (`end_transaction`) closes it; a marker from an
older producer epoch is fenced, one from an older coordinator epoch too.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequenceNumber,
    ProducerFenced,
    TransactionCoordinatorFenced,
)
from oncelog.producer_state.entry import NO_EPOCH, ProducerStateEntry, in_sequence
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended on this partition by the marker at `last_offset`."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class ProducerAppendInfo:
    def __init__(self, tp: TopicPartition, current: ProducerStateEntry | None, producer_id: int):
        """`current` is staged on: pass a copy (`ProducerStateManager.prepare` decodes one)."""
        self.tp = tp
        self.producer_id = producer_id
        self.known = current is not None and current.producer_epoch != NO_EPOCH
        self.entry = current if current is not None else ProducerStateEntry(producer_id)
        #: The transaction a staged marker ends (`end_transaction`).
        self.completed: CompletedTxn | None = None

    def validate(self, header: BatchHeader, *, check_sequence: bool = True) -> None:
        """Raise the Kafka error for a batch that may not be appended; stage nothing."""
        epoch = header.producer_epoch
        entry = self.entry
        if self.known and epoch < entry.producer_epoch:
            raise InvalidProducerEpoch(
                f"{self.tp}: producer {self.producer_id} epoch {epoch} is older than the "
                f"current epoch {entry.producer_epoch}"
            )
        if entry.in_transaction and not header.is_transactional and epoch == entry.producer_epoch:
            raise InvalidTxnState(
                f"{self.tp}: producer {self.producer_id} wrote a non-transactional batch inside "
                "its open transaction"
            )
        if not check_sequence:
            return
        first_seq = header.base_sequence
        if epoch != entry.producer_epoch:
            if first_seq != 0 and self.known:
                raise OutOfOrderSequenceNumber(
                    f"{self.tp}: producer {self.producer_id} new epoch {epoch} must start at "
                    f"sequence 0, got {first_seq} (current epoch {entry.producer_epoch})"
                )
        elif not entry.is_empty and not in_sequence(entry.last_seq, first_seq):
            raise OutOfOrderSequenceNumber(
                f"{self.tp}: producer {self.producer_id} epoch {epoch}: expected sequence "
                f"{(entry.last_seq + 1) % 2**31}, got {first_seq}"
            )

    def append(self, header: BatchHeader, *, check_sequence: bool = True) -> None:
        """Validate and stage a batch whose offsets are already assigned."""
        self.validate(header, check_sequence=check_sequence)
        self.stage(header)

    def stage(self, header: BatchHeader) -> None:
        """Record an appended batch on the staged copy (also used when replaying the log)."""
        if header.is_transactional and not self.entry.in_transaction:
            self.entry.current_txn_first_offset = header.base_offset
        self.entry.add_batch(
            header.producer_epoch,
            header.base_sequence,
            header.last_offset_delta,
            header.last_offset,
            header.max_timestamp,
        )
        self.known = True

    def end_transaction(
        self, epoch: int, coordinator_epoch: int, commit: bool, marker_offset: int, *, check: bool
    ) -> CompletedTxn:
        """Stage a COMMIT/ABORT marker at `marker_offset`; with `check`, fence stale writers."""
        entry = self.entry
        if check and self.known and epoch < entry.producer_epoch:
            raise ProducerFenced(
                f"{self.tp}: marker for producer {self.producer_id} has epoch {epoch}, "
                f"older than {entry.producer_epoch}"
            )
        if check and coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"{self.tp}: marker from coordinator epoch {coordinator_epoch}, "
                f"already saw {entry.coordinator_epoch}"
            )
        first = entry.current_txn_first_offset if entry.in_transaction else marker_offset
        entry.update_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.current_txn_first_offset = -1
        self.known = True
        self.completed = CompletedTxn(self.producer_id, first, marker_offset, aborted=not commit)
        return self.completed
