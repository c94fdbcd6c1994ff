"""The in-process broker under the names the metrics tests first gave it; it lives in
tests/harness/in_process.py."""

from __future__ import annotations

from tests.harness.in_process import (
    CLUSTERED,
    FETCH_V,
    PRODUCE_V,
    InProcessBroker,
    Timer,
    batch,
    clustered_replicas,
    replica_state,
)

Broker = InProcessBroker

__all__ = [
    "CLUSTERED",
    "FETCH_V",
    "PRODUCE_V",
    "Broker",
    "Timer",
    "batch",
    "clustered_replicas",
    "replica_state",
]
