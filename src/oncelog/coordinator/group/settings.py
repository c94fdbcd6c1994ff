"""The group coordinator's settings, shared by its membership and offset managers.

The broker replaces them as a whole (`GroupCoordinator.settings = ...`) when the number of
`__consumer_offsets` partitions it finds differs from the configured one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupSettings:
    partitions: int = 50
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    max_metadata_bytes: int = 4096
