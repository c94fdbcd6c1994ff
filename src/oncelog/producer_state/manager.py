"""All producers' state on one partition: duplicate detection, staged updates, replay, expiry.

The leader validates through `prepare`/`update`; recovery and (later) followers rebuild the
same state with `replay`, batch by batch, so the rules live only in `append.py`.
State of a producer is kept `producer.id.expiration.ms` after its last batch (by batch
timestamp, as Kafka does) even if retention deleted its data, then dropped by
`remove_expired`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from oncelog.fileio import CorruptFileError
from oncelog.producer_state import snapshot
from oncelog.producer_state.append import CompletedTxn, ProducerAppendInfo
from oncelog.producer_state.entry import BatchMetadata, ProducerStateEntry
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
SNAPSHOTS_KEPT = 3


class ProducerStateManager:
    def __init__(
        self,
        tp: TopicPartition,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        tracker: ProducerTracker | None = None,
    ) -> None:
        self.tp = tp
        self.expiration_ms = expiration_ms
        self.tracker = tracker if tracker is not None else ProducerTracker()
        self.producers: dict[int, ProducerStateEntry] = {}
        self._ongoing: dict[int, int] = {}
        """producer id -> first offset of its open transaction on this partition."""
        self.map_end_offset = 0
        """Offset up to which the state reflects the log (exclusive)."""

    def __len__(self) -> int:
        return len(self.producers)

    def entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """The cached batch a retried batch duplicates (same producer, epoch, sequences)."""
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None
        return entry.find_duplicate(
            header.producer_epoch, header.base_sequence, header.last_sequence
        )

    def prepare(self, producer_id: int) -> ProducerAppendInfo:
        return ProducerAppendInfo(self.tp, self.producers.get(producer_id), producer_id)

    def update(self, info: ProducerAppendInfo) -> None:
        """Apply a staged entry after its batches (or marker) were appended."""
        entry = info.entry
        self.producers[info.producer_id] = entry
        if entry.in_transaction:
            self._ongoing[info.producer_id] = entry.current_txn_first_offset
        else:
            self._ongoing.pop(info.producer_id, None)
        self.tracker.touch(self, info.producer_id)

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction here (the LSO bound), if any."""
        return min(self._ongoing.values()) if self._ongoing else None

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset, of every open transaction on this partition."""
        return dict(self._ongoing)

    def evict(self, producer_id: int) -> bool:
        """Drop one producer's state (called by the tracker when over its cap); a producer
        with an open transaction is kept, since its LSO bound must survive."""
        if producer_id in self._ongoing:
            return False
        self.producers.pop(producer_id, None)
        return True

    def replay(
        self,
        headers: Iterable[BatchHeader],
        read_marker: Callable[[BatchHeader], tuple[bool, int]] | None = None,
    ) -> list[CompletedTxn]:
        """Rebuild from stored batches (recovery): apply without validating.

        `read_marker(header)` gives (is COMMIT, coordinator epoch) of a control batch; the
        transactions its markers complete are returned.
        """
        completed: list[CompletedTxn] = []
        for header in headers:
            if header.has_producer_id:
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
        expired = [
            pid
            for pid, entry in self.producers.items()
            if now_ms - entry.last_timestamp >= self.expiration_ms and not entry.in_transaction
        ]
        for pid in expired:
            del self.producers[pid]
            self.tracker.forget(self.tp, pid)
        return len(expired)

    def clear(self) -> None:
        for pid in self.producers:
            self.tracker.forget(self.tp, pid)
        self.producers.clear()
        self._ongoing.clear()
        self.map_end_offset = 0

    # -- snapshots ---------------------------------------------------------------------------

    def take_snapshot(self, directory: Path) -> None:
        """Write the state as of `map_end_offset` (segment roll, clean shutdown)."""
        if self.map_end_offset in snapshot.list_snapshots(directory):
            return
        snapshot.write(directory, self.map_end_offset, self.producers.values())
        snapshot.delete_older(directory, SNAPSHOTS_KEPT)

    def frozen_entries(self) -> list[ProducerStateEntry]:
        """The entries as of `map_end_offset`, for a snapshot written elsewhere (a worker
        thread) while appends go on: `update` replaces an entry, never changes it in place
        (`prepare` stages a copy), so a list of the current ones stays as it was."""
        return list(self.producers.values())

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
            self.producers = {e.producer_id: e for e in entries}
            self._ongoing = {
                e.producer_id: e.current_txn_first_offset for e in entries if e.in_transaction
            }
            for pid in self.producers:
                self.tracker.touch(self, pid)
            self.map_end_offset = snap_offset
            return snap_offset
        return None
