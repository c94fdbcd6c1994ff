"""All producers' state on one partition: duplicate detection, staged updates, replay, expiry.

The leader validates through `prepare`/`update`; recovery and (later) followers rebuild the
same state with `replay`, batch by batch, so the rules live only in `append.py`.
State of a producer is kept `producer.id.expiration.ms` after its last batch (by batch
timestamp, as Kafka does) even if retention deleted its data, then dropped by
`remove_expired`.
"""

from __future__ import annotations

import logging
import struct
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from oncelog.fileio import CorruptFileError
from oncelog.producer_state import snapshot
from oncelog.producer_state.append import CompletedTxn, ProducerAppendInfo
from oncelog.producer_state.entry import (
    BATCH,
    BATCHES_AT,
    BATCHES_SIZE,
    MAX_CACHED_BATCHES,
    NO_EPOCH,
    RECORD_KEY,
    RECORD_SIZE,
    SEQUENCE_MODULUS,
    BatchMetadata,
    PackedEntries,
    ProducerStateEntry,
    expiry_fields_at,
    find_duplicate_in,
    producer_id_at,
)
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOTS_KEPT = 3
_MIN_TABLE = 8
_DELETED = -1
_U64 = 2**64 - 1
_pid_at = struct.Struct("<q").unpack_from
_NEXT = struct.Struct("<qhqiqBii")
"""A record's fields up to its newest batch's first sequence and offset delta."""
_LAST_TIMESTAMP = struct.Struct("<q")
_LAST_TIMESTAMP_AT = 10
_INT32 = struct.Struct("<i")
#: The C helper's `next_in_line` / `append_next` on the packed record (None: not built, the
#: Python methods below run; `tests/property` holds the two to each other).
_c_next_in_line = getattr(_speedups, "next_in_line", None)
_c_append_next = getattr(_speedups, "append_next", None)


class ProducerStateManager:
    """The producers of one partition: a map producer id -> slot of its record in the
    tracker's table, open-addressed in an `array` (0: empty cell, -1: deleted), probed as
    CPython's dict probes, so an entry costs a few bytes here and no Python object."""

    def __init__(
        self,
        tp: TopicPartition,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        tracker: ProducerTracker | None = None,
        high_watermark: Callable[[], int | None] | None = None,
    ) -> None:
        """`high_watermark`: the log's high watermark while it is replicated, None while it
        is not (a single broker's: a marker decides its transaction at once)."""
        self.tp = tp
        self.expiration_ms = expiration_ms
        self.tracker = tracker if tracker is not None else ProducerTracker()
        self._records = self.tracker.records
        self._table = array("i", bytes(4 * _MIN_TABLE))
        self._used = 0
        """Cells that are not empty (live or deleted): probing needs some empty ones."""
        self._len = 0
        self.producers: Mapping[int, ProducerStateEntry] = _Producers(self)
        """Read-only: producer id -> a copy of its entry."""
        self._ongoing: dict[int, int] = {}
        """producer id -> first offset of its open transaction on this partition."""
        self._unreplicated: dict[int, int] = {}
        """first offset -> marker offset of each transaction whose marker is written here
        but may not be below the high watermark yet (Kafka's unreplicatedTxns)."""
        self._high_watermark = high_watermark or _not_replicated
        """Transactions whose marker it passed are forgotten as each new one is noted."""
        self.map_end_offset = 0
        """Offset up to which the state reflects the log (exclusive)."""

    def __len__(self) -> int:
        return self._len

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        """A copy of the producer's entry, if any."""
        slot = self._slot(producer_id)
        if not slot:
            return None
        return ProducerStateEntry.from_record(self._records, slot * RECORD_SIZE)

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch a retried batch duplicates (same producer, epoch, sequences)."""
        pid = header.producer_id
        table = self._table
        records = self._records
        slot = table[pid & (len(table) - 1)]  # the first probe of `_slot`, mostly a hit
        if not slot:
            return None
        if slot > 0:
            stored_pid, epoch, count = RECORD_KEY.unpack_from(records, slot * RECORD_SIZE)
        if slot < 0 or stored_pid != pid:
            slot = self._slot(pid)
            if not slot:
                return None
            stored_pid, epoch, count = RECORD_KEY.unpack_from(records, slot * RECORD_SIZE)
        if epoch != header.producer_epoch:
            return None
        return find_duplicate_in(
            records,
            slot * RECORD_SIZE + BATCHES_AT,
            count,
            header.base_sequence,
            header.last_offset_delta,  # the last sequence follows, as in BatchHeader
        )

    def next_in_line(self, header: BatchHeader) -> int:
        if _c_next_in_line is not None:
            return int(
                _c_next_in_line(
                    self._records,
                    self._table,
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.attributes & TRANSACTIONAL_FLAG,
                )
            )
        return self.next_in_line_python(header)

    def next_in_line_python(self, header: BatchHeader) -> int:
        """The slot of the producer's record when `header` is simply its next batch, else 0.

        The common case of every Produce, checked on the stored record without decoding it:
        a known producer, the same epoch, the first sequence right after its last one, and
        the batch keeps its transaction state (a transactional batch inside its open
        transaction, or a plain one outside). Every rule of `ProducerAppendInfo` passes then
        and the batch cannot be a retry (the five cached batches are consecutive sequences
        ending at the last one; a cached batch that starts at the same sequence anyway, as
        state that did not come from in-order appends could hold, sends the batch the long
        way). For anything else (0) the caller takes `find_duplicate`, `prepare` and
        `update`, which stay the rules. After the bytes are written, `append_next` records
        the batch.
        """
        table = self._table
        records = self._records
        pid = header.producer_id
        slot = table[pid & (len(table) - 1)]
        if slot <= 0:
            return 0
        at = slot * RECORD_SIZE
        stored_pid, epoch, _, _, txn_first_offset, count, first_seq, delta = _NEXT.unpack_from(
            records, at
        )
        if (
            stored_pid != pid
            or epoch != header.producer_epoch
            or epoch == NO_EPOCH
            or not count
            or first_seq < 0
            or header.base_sequence != (first_seq + delta + 1) % SEQUENCE_MODULUS
            or (txn_first_offset >= 0) != bool(header.attributes & TRANSACTIONAL_FLAG)
        ):
            return 0
        batches = at + BATCHES_AT
        needle = _INT32.pack(header.base_sequence)
        if records.find(needle, batches, batches + count * BATCH.size) >= 0:
            return 0
        return slot

    def append_next(self, slot: int, header: BatchHeader, base_offset: int) -> None:
        """Record a batch `next_in_line` accepted, appended at `base_offset` (as `stage` and
        `update` would)."""
        if _c_append_next is not None:
            _c_append_next(
                self._records,
                slot,
                header.base_sequence,
                header.last_offset_delta,
                base_offset,
                header.max_timestamp,
            )
            self.tracker.touch(slot)
            return
        self.append_next_python(slot, header, base_offset)

    def append_next_python(self, slot: int, header: BatchHeader, base_offset: int) -> None:
        """`append_next` in Python: the reference for the C helper, and its fallback."""
        records = self._records
        at = slot * RECORD_SIZE
        (last_timestamp,) = _LAST_TIMESTAMP.unpack_from(records, at + _LAST_TIMESTAMP_AT)
        batches = at + BATCHES_AT
        count = records[batches - 1]
        # Newest first: the four newest move one place on, the oldest falls off.
        records[batches + BATCH.size : batches + BATCHES_SIZE] = records[
            batches : batches + BATCHES_SIZE - BATCH.size
        ]
        BATCH.pack_into(
            records,
            batches,
            header.base_sequence,
            header.last_offset_delta,
            base_offset + header.last_offset_delta,
            header.max_timestamp,
        )
        if header.max_timestamp > last_timestamp:
            _LAST_TIMESTAMP.pack_into(records, at + _LAST_TIMESTAMP_AT, header.max_timestamp)
        if count < MAX_CACHED_BATCHES:
            records[batches - 1] = count + 1
        self.tracker.touch(slot)

    def prepare(self, producer_id: int) -> ProducerAppendInfo:
        return ProducerAppendInfo(self.tp, self.entry(producer_id), producer_id)

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply a staged entry after its batches (or marker) were appended."""
        entry = info.entry
        if entry.in_transaction:
            self._ongoing[info.producer_id] = entry.current_txn_first_offset
        elif (
            self._ongoing.pop(info.producer_id, None) is not None
            and info.completed
            and (hw := self._high_watermark()) is not None  # else decided by its marker
        ):
            self._unreplicated[info.completed.first_offset] = info.completed.last_offset
            self._forget_replicated(hw)
        self._store(info.producer_id, entry)

    def _store(self, producer_id: int, entry: ProducerStateEntry) -> None:
        record = entry.to_record()  # first: a value that does not fit changes nothing
        slot = self._slot(producer_id)
        if slot:
            self._records[slot * RECORD_SIZE : (slot + 1) * RECORD_SIZE] = record
        else:
            slot = self.tracker.allocate(self)
            self._records[slot * RECORD_SIZE : (slot + 1) * RECORD_SIZE] = record
            self._insert(producer_id, slot)
        self.tracker.touch(slot)

    def first_unstable_offset(self, high_watermark: int | None = None) -> int | None:
        """First offset of the earliest transaction not yet decided here (the LSO bound), if
        any: open ones, and with `high_watermark` those whose marker is not below it yet, as
        Kafka's: a read_committed reader must not see a transaction as decided before its
        marker is replicated (a load to the high watermark would read its data without the
        marker). Without it (a log read to its end), open ones only."""
        first = min(self._ongoing.values()) if self._ongoing else None
        if high_watermark is None or not self._unreplicated:
            return first
        self._forget_replicated(high_watermark)
        pending = min(self._unreplicated, default=None)
        if pending is None:
            return first
        return pending if first is None else min(first, pending)

    def _forget_replicated(self, high_watermark: int) -> None:
        unreplicated = self._unreplicated
        for start in [s for s, marker in unreplicated.items() if marker < high_watermark]:
            del unreplicated[start]

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset, of every open transaction on this partition."""
        return dict(self._ongoing)

    def evict(self, producer_id: int) -> bool:
        """Drop one producer's state (called by the tracker when over its cap); a producer
        with an open transaction is kept, since its LSO bound must survive."""
        if producer_id in self._ongoing:
            return False
        slot = self._remove(producer_id)
        if slot:
            self.tracker.release(slot)
        return True

    def replay_data(self, headers: Iterable[BatchHeader]) -> None:
        """`replay` of batches without transaction markers (a follower's fetched batches;
        a control batch the leader's cleaner emptied may be among them): a data batch that
        is simply its producer's next one (`next_in_line`) is recorded as the leader
        recorded it (`append_next`), as the rules would record it too (`stage` is what
        `append` does after validating); any other batch goes through `replay`."""
        for header in headers:
            if header.producer_id >= 0 and not header.attributes & CONTROL_FLAG:
                slot = self.next_in_line(header)
                if slot:
                    self.append_next(slot, header, header.base_offset)
                    end = header.base_offset + header.last_offset_delta + 1
                    if end > self.map_end_offset:  # noqa: PLR1730  # max() costs ~7x this
                        self.map_end_offset = end
                    continue
            self.replay((header,))

    def replay(
        self,
        headers: Iterable[BatchHeader],
        read_marker: Callable[[BatchHeader], tuple[bool, int]] | None = None,
    ) -> list[CompletedTxn]:
        """Rebuild from stored batches (recovery): apply without validating.

        `read_marker(header)` gives (is COMMIT, coordinator epoch) of a control batch; the
        transactions its markers complete are returned. A control batch without records is a
        marker the cleaner emptied (its transaction was cleaned away): nothing to end, as in
        Kafka.
        """
        completed: list[CompletedTxn] = []
        for header in headers:
            if header.has_producer_id and not (header.is_control and not header.record_count):
                info = self.prepare(header.producer_id)
                if not header.is_control:
                    info.stage(header)
                elif read_marker is not None:
                    commit, coordinator_epoch = read_marker(header)
                    completed.append(
                        info.end_transaction(
                            header.producer_epoch,
                            coordinator_epoch,
                            commit,
                            header.base_offset,
                            check=False,
                        )
                    )
                self.update(info)
            self.map_end_offset = max(self.map_end_offset, header.next_offset)
        return completed

    def remove_expired(self, now_ms: int) -> int:
        """Drop producers idle longer than producer.id.expiration.ms; return how many."""
        records = self._records
        expired = []
        for slot in self._slots():
            pid, last_timestamp, txn_first_offset = expiry_fields_at(records, slot * RECORD_SIZE)
            if now_ms - last_timestamp >= self.expiration_ms and txn_first_offset < 0:
                expired.append(pid)
        for pid in expired:
            self.tracker.release(self._remove(pid))
        return len(expired)

    def clear(self) -> None:
        for slot in self._slots():
            self.tracker.release(slot)
        self._table = array("i", bytes(4 * _MIN_TABLE))
        self._used = self._len = 0
        self._ongoing.clear()
        self._unreplicated.clear()
        self.map_end_offset = 0

    # -- snapshots ---------------------------------------------------------------------------

    def take_snapshot(self, directory: Path) -> None:
        """Write the state as of `map_end_offset` (segment roll, clean shutdown)."""
        if self.map_end_offset in snapshot.list_snapshots(directory):
            return
        snapshot.write(directory, self.map_end_offset, self._entries())
        snapshot.delete_older(directory, SNAPSHOTS_KEPT)

    def frozen_entries(self) -> Sequence[ProducerStateEntry]:
        """The entries as of `map_end_offset`, for a snapshot written elsewhere (a worker
        thread) while appends go on: a copy of their records, decoded as it is read."""
        records = self._records
        return PackedEntries(
            b"".join([records[s * RECORD_SIZE : (s + 1) * RECORD_SIZE] for s in self._slots()])
        )

    def load_snapshot(self, directory: Path, log_end_offset: int) -> int | None:
        """Load the newest valid snapshot not beyond `log_end_offset`; return its offset.

        Snapshots beyond the log end (the log was truncated) and damaged ones are deleted,
        with a warning, and an older one is tried. None means: rebuild from the segments.
        """
        self.clear()
        snapshot.delete_after(directory, log_end_offset)
        for offset in reversed(snapshot.list_snapshots(directory)):
            path = snapshot.snapshot_path(directory, offset)
            try:
                snap_offset, entries = snapshot.decode(path.read_bytes())
            except (OSError, CorruptFileError) as exc:
                log.warning("%s: skipping damaged producer snapshot %s: %s", self.tp, path, exc)
                path.unlink(missing_ok=True)
                continue
            self._ongoing = {
                e.producer_id: e.current_txn_first_offset for e in entries if e.in_transaction
            }
            for e in entries:
                self._store(e.producer_id, e)
            self.map_end_offset = snap_offset
            return snap_offset
        return None

    # -- the producer id -> slot map -------------------------------------------------------

    def _slot(self, producer_id: int) -> int:
        """Slot of the producer's record, 0 if it has none."""
        cell = self._cell(producer_id)
        return self._table[cell] if cell >= 0 else 0

    def _cell(self, producer_id: int) -> int:
        """Index of the producer's cell in the table, -1 if it has none."""
        table = self._table
        mask = len(table) - 1
        perturb = producer_id & _U64
        i = perturb & mask
        records = self._records
        while True:
            slot = table[i]
            if slot > 0:
                if _pid_at(records, slot * RECORD_SIZE)[0] == producer_id:
                    return i
            elif not slot:
                return -1
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask

    def _insert(self, producer_id: int, slot: int) -> None:
        """Map a producer that has no slot yet."""
        table = self._table
        mask = len(table) - 1
        perturb = producer_id & _U64
        i = perturb & mask
        while table[i] > 0:
            perturb >>= 5
            i = (i * 5 + perturb + 1) & mask
        if not table[i]:
            self._used += 1
        table[i] = slot
        self._len += 1
        if self._used * 3 >= len(table) * 2:
            self._rebuild()

    def _remove(self, producer_id: int) -> int:
        """Unmap a producer; its slot (0 if it had none), for the tracker to release."""
        cell = self._cell(producer_id)
        if cell < 0:
            return 0
        slot = self._table[cell]
        self._table[cell] = _DELETED
        self._len -= 1
        return slot

    def _rebuild(self) -> None:
        """A table at most half full of live cells, without deleted ones."""
        size = _MIN_TABLE
        while size < 2 * self._len:
            size *= 2
        slots = list(self._slots())
        self._table = array("i", bytes(4 * size))
        self._used = self._len = 0
        records = self._records
        for slot in slots:
            self._insert(producer_id_at(records, slot * RECORD_SIZE), slot)

    def _slots(self) -> list[int]:
        return [slot for slot in self._table if slot > 0]

    def _entries(self) -> Iterator[ProducerStateEntry]:
        records = self._records
        for slot in self._slots():
            yield ProducerStateEntry.from_record(records, slot * RECORD_SIZE)


class _Producers(Mapping[int, ProducerStateEntry]):
    """`ProducerStateManager.producers`: read-only, each entry decoded when asked for."""

    __slots__ = ("_manager",)

    def __init__(self, manager: ProducerStateManager) -> None:
        self._manager = manager

    def __getitem__(self, producer_id: int) -> ProducerStateEntry:
        entry = self._manager.entry(producer_id)
        if entry is None:
            raise KeyError(producer_id)
        return entry

    def __contains__(self, producer_id: object) -> bool:
        return isinstance(producer_id, int) and bool(self._manager._slot(producer_id))

    def __iter__(self) -> Iterator[int]:
        records = self._manager._records
        return iter([producer_id_at(records, s * RECORD_SIZE) for s in self._manager._slots()])

    def __len__(self) -> int:
        return len(self._manager)

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def _not_replicated() -> int | None:
    return None
