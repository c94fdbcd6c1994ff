"""The broker's wiring diagram: what each part is told, read top to bottom.

Every listener is given at construction, so what an append, a state change or a marker
triggers is read here and nowhere else. The server (`server/app.py`) hands in what reaches
its event loop (`ServerHooks`); the in-process test harness and the benchmarks assemble the
same broker with inert hooks.

    metrics ─────────────┐ appended, replicated, flush
    fetch sessions ──────┤ fetch_touched
    producer ids ───┬────┤
    txn coordinator ┴────┤ CoordinatorChecks (KIP-890)
    server hooks ────────┤ wake, segment_rolled, checkpoint_soon, isr_change
                         ▼
                  replica manager ──▶ group runtime (wake, timers_changed)
                         │                  │ on_marker
                         └──────────────▶ txn runtime (send_markers)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from oncelog.broker.context import BrokerContext, Node
from oncelog.broker.fetch_session import FetchSessionCache
from oncelog.broker.group_runtime import GroupRuntime
from oncelog.broker.metrics import BrokerMetrics
from oncelog.broker.partition import Partition
from oncelog.broker.replica_listeners import ReplicaListeners
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.broker.txn_runtime import CoordinatorChecks, TxnRuntime, txn_coordinator_for
from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.txn import Marker
from oncelog.metadata.producer_ids import producer_id_source
from oncelog.types import TopicPartition


def _ignore(*_args: object) -> None:
    pass


@dataclass(frozen=True, slots=True)
class ServerHooks:
    """What the broker's parts tell the server (its event loop); inert by default."""

    wake: Callable[[list[Hashable]], None] = _ignore
    """Complete the waiting requests watching these keys (the purgatory)."""
    group_timers_changed: Callable[[], None] = _ignore
    """The group coordinator's next deadline may have moved earlier."""
    segment_rolled: Callable[[], None] = _ignore
    """A partition rolled a segment: fsync it in a worker soon."""
    checkpoint_soon: Callable[[], None] | None = None
    """Write the checkpoint files soon, off the loop (None: at once)."""
    isr_change: Callable[[Partition, frozenset[int]], None] = _ignore
    """In a cluster: write this ISR to etcd."""
    send_markers: Callable[[str, list[Marker], TopicPartition, int], None] | None = None
    """In a cluster: send a decided transaction's markers to the partitions' leaders."""


@dataclass(frozen=True, slots=True)
class BrokerCore:
    """The broker's state and coordinators, wired (`assemble`)."""

    config: BrokerConfig
    clock: Clock
    metrics: BrokerMetrics
    fetch_sessions: FetchSessionCache
    replicas: ReplicaManager
    groups: GroupRuntime
    txns: TxnRuntime

    def context(self, node: Node) -> BrokerContext:
        """The services the handlers see, once this broker's endpoints are known."""
        return BrokerContext(
            self.config,
            self.clock,
            self.replicas,
            node,
            self.groups,
            self.txns,
            self.fetch_sessions,
            metrics=self.metrics,
        )


def assemble(
    config: BrokerConfig,
    clock: Clock,
    hooks: ServerHooks | None = None,
    metrics: BrokerMetrics | None = None,
) -> BrokerCore:
    hooks = hooks or ServerHooks()
    metrics = metrics or BrokerMetrics()
    fetch_sessions = FetchSessionCache(config.get_int("max.incremental.fetch.session.cache.slots"))
    producer_ids = producer_id_source(config)
    txn_coordinator = txn_coordinator_for(config, clock, producer_ids.next_id)
    clustered = bool(config.get("etcd.connect"))
    replicas = ReplicaManager(
        config,
        clock,
        producer_ids=producer_ids,
        listeners=ReplicaListeners(
            wake=hooks.wake,
            fetch_touched=fetch_sessions.touched,
            isr_change=hooks.isr_change,
            appended=metrics.record_append,
            replicated=metrics.record_replicated,
            flush=metrics.time_flush,
            segment_rolled=hooks.segment_rolled,
            checkpoint_soon=hooks.checkpoint_soon,
            transactions=CoordinatorChecks(txn_coordinator, clustered),
        ),
    )
    groups = GroupRuntime(
        config, clock, replicas, wake=hooks.wake, timers_changed=hooks.group_timers_changed
    )
    txns = TxnRuntime(
        config,
        clock,
        replicas,
        txn_coordinator,
        on_offsets_marker=groups.on_marker,
        send_markers=hooks.send_markers,
    )
    return BrokerCore(config, clock, metrics, fetch_sessions, replicas, groups, txns)
