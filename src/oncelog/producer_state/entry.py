"""What a partition remembers about one producer id.

The epoch, and the metadata of the last `MAX_CACHED_BATCHES` batches it appended (sequence
range, last offset), so a retried batch is recognised as a duplicate and answered with its
original offsets. Kafka keeps five because a client has at most five requests in flight per
connection (`max.in.flight.requests.per.connection <= 5` with idempotence).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MAX_CACHED_BATCHES = 5
NO_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MODULUS = 2**31


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    producer_epoch: int = NO_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=MAX_CACHED_BATCHES))
    last_timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1
    """Offset of this producer's first batch in its open transaction here, -1 if none."""

    def copy(self) -> ProducerStateEntry:
        return ProducerStateEntry(
            self.producer_id,
            self.producer_epoch,
            deque(self.batches, maxlen=MAX_CACHED_BATCHES),
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def update_epoch(self, epoch: int) -> None:
        """A new epoch starts a new sequence space: forget the old epoch's batches."""
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        self.update_epoch(epoch)
        self.batches.append(batch)
        self.last_timestamp = max(self.last_timestamp, batch.timestamp)


def in_sequence(last_seq: int, next_first_seq: int) -> bool:
    """True if `next_first_seq` directly follows `last_seq`, wrapping at int32 like clients."""
    return next_first_seq == (last_seq + 1) % SEQUENCE_MODULUS
