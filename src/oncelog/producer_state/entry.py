"""What a partition remembers about one producer id.

The epoch, and the metadata of the last `MAX_CACHED_BATCHES` batches it appended (sequence
range, last offset), so a retried batch is recognised as a duplicate and answered with its
original offsets. Kafka keeps five because a client has at most five requests in flight per
connection (`max.in.flight.requests.per.connection <= 5` with idempotence).

A broker keeps one such entry per (partition, producer id), up to `producer.state.max.entries`
(500,000) of them, so their memory matters: stored, an entry is one fixed-size record of
`RECORD_SIZE` bytes (`RECORD`) in the tracker's table rather than a graph of Python objects.
The five batches are packed newest first, unused places zeroed, so two entries are equal
exactly when their records are. A batch's last sequence is not stored: it always follows
from its first sequence and offset delta, as `BatchHeader.last_sequence` computes it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import overload

MAX_CACHED_BATCHES = 5
NO_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MODULUS = 2**31

BATCH = struct.Struct("<iiqq")
"""One cached batch: first sequence, offset delta, last offset, max timestamp."""
BATCHES_SIZE = MAX_CACHED_BATCHES * BATCH.size
_NO_BATCHES = bytes(BATCHES_SIZE)
_KEEP = (MAX_CACHED_BATCHES - 1) * BATCH.size
RECORD = struct.Struct(f"<qhqiqB{BATCHES_SIZE}s")
"""A stored entry: producer id, epoch, last timestamp, coordinator epoch, first offset of
the open transaction, number of batches, the batches (newest first)."""
RECORD_SIZE = RECORD.size
BATCHES_AT = RECORD_SIZE - BATCHES_SIZE
_PID = struct.Struct("<q")
RECORD_KEY = struct.Struct("<qh20xB")
"""The start of a record: producer id, epoch, number of batches."""
_INT32 = struct.Struct("<i")
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1
_EXPIRY = struct.Struct("<qhqiq")
_UNPACK_BATCHES = [struct.Struct("<" + "iiqq" * n).unpack_from for n in range(6)]


def last_sequence(first_seq: int, offset_delta: int) -> int:
    """A batch's last sequence, wrapping at int32 like clients (BatchHeader.last_sequence)."""
    if first_seq == NO_SEQUENCE:
        return NO_SEQUENCE
    return (first_seq + offset_delta) % SEQUENCE_MODULUS


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


class ProducerStateEntry:
    """One producer's state, decoded from its record: the staged copy `ProducerAppendInfo`
    changes, or a copy handed to readers. Changing it never changes the stored state."""

    __slots__ = (
        "_batches",
        "_count",
        "coordinator_epoch",
        "current_txn_first_offset",
        "last_timestamp",
        "producer_epoch",
        "producer_id",
    )

    def __init__(
        self,
        producer_id: int,
        producer_epoch: int = NO_EPOCH,
        batches: Iterable[BatchMetadata] = (),
        last_timestamp: int = -1,
        coordinator_epoch: int = -1,
        current_txn_first_offset: int = -1,
    ) -> None:
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_timestamp = last_timestamp
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset
        """Offset of this producer's first batch in its open transaction here, -1 if none."""
        self._count = 0
        self._batches = _NO_BATCHES
        for batch in batches:  # as a deque(maxlen=5) would: the last five are kept
            if batch.last_seq != last_sequence(batch.first_seq, batch.offset_delta):
                raise ValueError(
                    f"producer {producer_id}: batch {batch} has a last sequence that does not "
                    "follow from its first sequence and offset delta"
                )
            self._push(batch.first_seq, batch.offset_delta, batch.last_offset, batch.timestamp)

    @classmethod
    def from_record(cls, buf: bytes | bytearray, offset: int = 0) -> ProducerStateEntry:
        entry = cls.__new__(cls)
        (
            entry.producer_id,
            entry.producer_epoch,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.current_txn_first_offset,
            entry._count,
            entry._batches,
        ) = RECORD.unpack_from(buf, offset)
        return entry

    def to_record(self) -> bytes:
        return RECORD.pack(
            self.producer_id,
            self.producer_epoch,
            self.last_timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
            self._count,
            self._batches,
        )

    def copy(self) -> ProducerStateEntry:
        entry = ProducerStateEntry.__new__(ProducerStateEntry)
        entry.producer_id = self.producer_id
        entry.producer_epoch = self.producer_epoch
        entry.last_timestamp = self.last_timestamp
        entry.coordinator_epoch = self.coordinator_epoch
        entry.current_txn_first_offset = self.current_txn_first_offset
        entry._count = self._count
        entry._batches = self._batches
        return entry

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return self.to_record() == other.to_record()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the dataclass it replaced

    def __repr__(self) -> str:
        return (
            f"ProducerStateEntry(producer_id={self.producer_id}, "
            f"producer_epoch={self.producer_epoch}, batches={list(self.batches)}, "
            f"last_timestamp={self.last_timestamp}, coordinator_epoch={self.coordinator_epoch}, "
            f"current_txn_first_offset={self.current_txn_first_offset})"
        )

    @property
    def batches(self) -> tuple[BatchMetadata, ...]:
        """The cached batches, oldest first."""
        fields = _UNPACK_BATCHES[self._count](self._batches)
        return tuple(_batch(fields, i) for i in range(len(fields) - 4, -1, -4))

    def batch_fields(self) -> list[int]:
        """`batches` as plain ints, five per batch (first seq, last seq, last offset, offset
        delta, timestamp), oldest first: what a snapshot writes, without building objects."""
        fields = _UNPACK_BATCHES[self._count](self._batches)
        out: list[int] = []
        for i in range(len(fields) - 4, -1, -4):
            first_seq, offset_delta = fields[i], fields[i + 1]
            last_seq = NO_SEQUENCE
            if first_seq != NO_SEQUENCE:
                last_seq = (first_seq + offset_delta) % SEQUENCE_MODULUS
            out += (first_seq, last_seq, fields[i + 2], offset_delta, fields[i + 3])
        return out

    @property
    def in_transaction(self) -> bool:
        return self.current_txn_first_offset >= 0

    @property
    def is_empty(self) -> bool:
        return not self._count

    @property
    def last_seq(self) -> int:
        if not self._count:
            return NO_SEQUENCE
        first_seq, offset_delta, _, _ = BATCH.unpack_from(self._batches)
        return last_sequence(first_seq, offset_delta)

    @property
    def last_offset(self) -> int:
        return BATCH.unpack_from(self._batches)[2] if self._count else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this epoch and sequence range, if any."""
        if epoch != self.producer_epoch:
            return None
        return _find_batch(self._batches, 0, self._count, first_seq, last_seq)

    def update_epoch(self, epoch: int) -> None:
        """A new epoch starts a new sequence space: forget the old epoch's batches."""
        if epoch != self.producer_epoch:
            self._count = 0
            self._batches = _NO_BATCHES
            self.producer_epoch = epoch

    def add_batch(
        self, epoch: int, first_seq: int, offset_delta: int, last_offset: int, timestamp: int
    ) -> None:
        """Cache an appended batch (its last sequence follows from first_seq + offset_delta),
        dropping the oldest beyond five."""
        batch = BATCH.pack(first_seq, offset_delta, last_offset, timestamp)
        if epoch != self.producer_epoch:  # update_epoch, inline: once per appended batch
            self.producer_epoch = epoch
            self._count = 1
            self._batches = batch + _NO_BATCHES[BATCH.size :]
        else:
            self._batches = batch + self._batches[:_KEEP]
            if self._count < MAX_CACHED_BATCHES:
                self._count += 1
        self.last_timestamp = max(self.last_timestamp, timestamp)

    def _push(self, first_seq: int, offset_delta: int, last_offset: int, timestamp: int) -> None:
        self._batches = (
            BATCH.pack(first_seq, offset_delta, last_offset, timestamp) + self._batches[:_KEEP]
        )
        if self._count < MAX_CACHED_BATCHES:
            self._count += 1


def _batch(fields: tuple[int, ...], i: int) -> BatchMetadata:
    first_seq, offset_delta, last_offset, timestamp = fields[i : i + 4]
    return BatchMetadata(
        first_seq, last_sequence(first_seq, offset_delta), last_offset, offset_delta, timestamp
    )


def _find_batch(
    buf: bytes | bytearray, at: int, count: int, first_seq: int, last_seq: int
) -> BatchMetadata | None:
    """Among `count` packed batches at `at` (newest first), the oldest with this sequence
    range, as the deque scan it replaced found it."""
    fields = _UNPACK_BATCHES[count](buf, at)
    for i in range(len(fields) - 4, -1, -4):
        if fields[i] == first_seq and last_sequence(first_seq, fields[i + 1]) == last_seq:
            return _batch(fields, i)
    return None


def find_duplicate_in(
    records: bytearray, at: int, count: int, first_seq: int, offset_delta: int
) -> BatchMetadata | None:
    """`_find_batch` on the `count` batches of a stored record at `at`, for a batch with this
    first sequence and offset delta, without decoding them: the first sequence is searched
    for as bytes, so a batch that is no retry costs one search."""
    if not _INT32_MIN <= first_seq <= _INT32_MAX:
        return None
    needle = _INT32.pack(first_seq)
    # From the end: the oldest match first, as the deque scan it replaced.
    found = records.rfind(needle, at, at + count * BATCH.size)
    if found < 0:
        return None
    last_seq = last_sequence(first_seq, offset_delta)
    while found >= 0:
        if not (found - at) % BATCH.size:
            _, stored_delta, last_offset, timestamp = BATCH.unpack_from(records, found)
            if last_sequence(first_seq, stored_delta) == last_seq:
                return BatchMetadata(first_seq, last_seq, last_offset, stored_delta, timestamp)
        found = records.rfind(needle, at, found + len(needle) - 1)
    return None


def expiry_fields_at(records: bytes | bytearray, offset: int) -> tuple[int, int, int]:
    """(producer id, last timestamp, first offset of the open transaction) of a record."""
    pid, _, last_timestamp, _, txn_first_offset = _EXPIRY.unpack_from(records, offset)
    return pid, last_timestamp, txn_first_offset


class PackedEntries(Sequence[ProducerStateEntry]):
    """Records copied one after another; each entry is decoded when read."""

    __slots__ = ("_data",)

    def __init__(self, data: bytes) -> None:
        self._data = data

    def __len__(self) -> int:
        return len(self._data) // RECORD_SIZE

    @overload
    def __getitem__(self, index: int) -> ProducerStateEntry: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[ProducerStateEntry]: ...

    def __getitem__(self, index: int | slice) -> ProducerStateEntry | Sequence[ProducerStateEntry]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = len(self)
        if not -n <= index < n:
            raise IndexError(index)
        return ProducerStateEntry.from_record(self._data, (index % n) * RECORD_SIZE)

    def __iter__(self) -> Iterator[ProducerStateEntry]:
        data = self._data
        for offset in range(0, len(data), RECORD_SIZE):
            yield ProducerStateEntry.from_record(data, offset)


def producer_id_at(records: bytes | bytearray, offset: int) -> int:
    """The producer id of the record at `offset`."""
    pid: int = _PID.unpack_from(records, offset)[0]
    return pid


def in_sequence(last_seq: int, next_first_seq: int) -> bool:
    """True if `next_first_seq` directly follows `last_seq`, wrapping at int32 like clients."""
    return next_first_seq == (last_seq + 1) % SEQUENCE_MODULUS
