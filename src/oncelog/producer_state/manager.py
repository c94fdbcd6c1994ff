"""All producers' state on one partition: duplicate detection, staged updates, replay, expiry.

The leader validates through `prepare`/`update`; recovery and (later) followers rebuild the
same state with `replay`, batch by batch, so the rules live only in `append.py`.
State of a producer is kept `producer.id.expiration.ms` after its last batch (by batch
timestamp, as Kafka does) even if retention deleted its data, then dropped by
`remove_expired`.
"""

from __future__ import annotations

from collections.abc import Iterable

from oncelog.producer_state.append import ProducerAppendInfo
from oncelog.producer_state.entry import BatchMetadata, ProducerStateEntry
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition

DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000


class ProducerStateManager:
    def __init__(
        self, tp: TopicPartition, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS
    ) -> None:
        self.tp = tp
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
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
        """Apply a staged entry after its batches were appended."""
        self.producers[info.producer_id] = info.entry

    def replay(self, headers: Iterable[BatchHeader]) -> None:
        """Rebuild from stored batches (recovery): apply without validating."""
        for header in headers:
            if header.has_producer_id and not header.is_control:
                info = self.prepare(header.producer_id)
                info.stage(header)
                self.update(info)
            self.map_end_offset = max(self.map_end_offset, header.next_offset)

    def remove_expired(self, now_ms: int) -> int:
        """Drop producers idle longer than producer.id.expiration.ms; return how many."""
        expired = [
            pid
            for pid, entry in self.producers.items()
            if now_ms - entry.last_timestamp >= self.expiration_ms
        ]
        for pid in expired:
            del self.producers[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
        self.map_end_offset = 0
