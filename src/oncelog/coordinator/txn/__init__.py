"""The transaction coordinator: transactional ids, epochs, two-phase commit."""

from oncelog.coordinator.txn.coordinator import (
    Marker,
    TransactionCoordinator,
    TxnSettings,
)
from oncelog.coordinator.txn.metadata import TxnMetadata
from oncelog.coordinator.txn.state import TxnState

__all__ = ["Marker", "TransactionCoordinator", "TxnMetadata", "TxnSettings", "TxnState"]
