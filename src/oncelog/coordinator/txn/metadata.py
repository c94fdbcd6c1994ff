"""What the coordinator knows about one transactional id (one `__transaction_state` value)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from oncelog.coordinator.txn.state import TxnState, check_transition
from oncelog.types import TopicPartition


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = field(default_factory=frozenset)
    last_update_ms: int = -1
    start_ms: int = -1

    def to(self, state: TxnState, now_ms: int, **changes: object) -> TxnMetadata:
        """The next version of this metadata, in `state` (checked against the table)."""
        check_transition(self.state, state)
        return replace(self, state=state, last_update_ms=now_ms, **changes)  # type: ignore[arg-type]
