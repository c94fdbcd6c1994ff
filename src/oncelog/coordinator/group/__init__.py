"""The classic consumer-group coordinator (JoinGroup/SyncGroup/Heartbeat, offsets)."""

from oncelog.coordinator.group.coordinator import GroupCoordinator, GroupSettings, Result, Waiter
from oncelog.coordinator.group.records import partition_for
from oncelog.coordinator.group.state import GroupState, IllegalGroupStateTransition

__all__ = [
    "GroupCoordinator",
    "GroupSettings",
    "GroupState",
    "IllegalGroupStateTransition",
    "Result",
    "Waiter",
    "partition_for",
]
