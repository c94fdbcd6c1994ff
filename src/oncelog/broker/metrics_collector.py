"""Broker state as Prometheus gauges, read when the page is scraped.

Nothing here is kept up to date while the broker serves: every value is computed from the
replica manager, the coordinators and the cluster controller at `collect` time, which runs
on the event loop (the HTTP listener renders on it), so the state it reads is consistent.
One scrape costs a walk over the partitions, groups and transactions; no records are read.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from oncelog.broker.partition import Role
from oncelog.coordinator.group.state import GroupState
from oncelog.coordinator.txn.state import TxnState
from oncelog.errors import KafkaError
from oncelog.fileio import FileRegion
from oncelog.protocol.records.batch import HEADER_SIZE, parse_header
from oncelog.storage.partition_log import PartitionLog

if TYPE_CHECKING:
    from oncelog.broker.context import BrokerContext
    from oncelog.broker.metrics import BrokerMetrics

PARTITION = ["topic", "partition"]


def txn_state_name(state: TxnState) -> str:
    """Kafka's name of a transaction state (`PrepareCommit`)."""
    return "".join(part.capitalize() for part in state.name.split("_"))


class BrokerStateCollector(Collector):
    def __init__(self, broker: BrokerContext, metrics: BrokerMetrics) -> None:
        self.broker = broker
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        yield from self._partitions()
        yield from self._transactions()
        yield from self._groups()
        yield from self._replication()
        yield from self._fetch_sessions()

    # -- partitions ------------------------------------------------------------------------------

    def _partitions(self) -> Iterator[Metric]:
        replicas = self.broker.replicas
        now_ms = self.broker.clock.wall_ms()
        size = GaugeMetricFamily(
            "oncelog_log_size_bytes", "Bytes of a partition's log.", labels=PARTITION
        )
        segments = GaugeMetricFamily(
            "oncelog_log_segments", "Segments of a partition's log.", labels=PARTITION
        )
        start = GaugeMetricFamily(
            "oncelog_log_start_offset", "First offset of a partition's log.", labels=PARTITION
        )
        end = GaugeMetricFamily(
            "oncelog_log_end_offset",
            "Offset the next record of a partition's log gets.",
            labels=PARTITION,
        )
        hw = GaugeMetricFamily(
            "oncelog_partition_high_watermark",
            "High watermark: consumers read below it.",
            labels=PARTITION,
        )
        lso = GaugeMetricFamily(
            "oncelog_partition_last_stable_offset",
            "Last stable offset: read_committed consumers read below it.",
            labels=PARTITION,
        )
        lso_lag = GaugeMetricFamily(
            "oncelog_partition_last_stable_offset_lag",
            "High watermark minus last stable offset (held back by open transactions).",
            labels=PARTITION,
        )
        open_txns = GaugeMetricFamily(
            "oncelog_partition_open_transactions",
            "Transactions with data in the partition and no marker yet.",
            labels=PARTITION,
        )
        oldest = GaugeMetricFamily(
            "oncelog_partition_oldest_open_transaction_age_seconds",
            "Age of the partition's oldest open transaction, from the timestamp of its first "
            "batch (0 when none is open).",
            labels=PARTITION,
        )
        producers = GaugeMetricFamily(
            "oncelog_producer_state_entries",
            "Producer ids the partition keeps state for (idempotence and transactions).",
            labels=PARTITION,
        )
        for tp, plog in replicas.logs.partitions():
            labels = [tp.topic, str(tp.partition)]
            high = plog.high_watermark
            stable = plog.last_stable_offset
            size.add_metric(labels, plog.size_bytes)
            segments.add_metric(labels, len(plog.segments))
            start.add_metric(labels, plog.log_start_offset)
            end.add_metric(labels, plog.log_end_offset)
            hw.add_metric(labels, high)
            lso.add_metric(labels, stable)
            lso_lag.add_metric(labels, max(0, high - stable))
            ongoing = plog.producer_state.ongoing_transactions()
            open_txns.add_metric(labels, len(ongoing))
            age = 0.0
            if ongoing:
                pid, first = min(ongoing.items(), key=lambda item: item[1])
                opened = _transaction_start_ms(plog, pid, first)
                if opened is not None:
                    age = max(0.0, (now_ms - opened) / 1000)
            oldest.add_metric(labels, age)
            producers.add_metric(labels, len(plog.producer_state))
        yield from (size, segments, start, end, hw, lso, lso_lag, open_txns, oldest, producers)
        yield CounterMetricFamily(
            "oncelog_producer_state_evictions",
            "Producer entries evicted because producer.state.max.entries was reached.",
            value=replicas.producer_tracker.evicted,
        )

    # -- coordinators ----------------------------------------------------------------------------

    def _transactions(self) -> Iterator[Metric]:
        coordinator = self.broker.txns.coordinator
        counts = Counter(meta.state for meta in list(coordinator.transactions.values()))
        family = GaugeMetricFamily(
            "oncelog_transactions",
            "Transactional ids this broker coordinates, per transaction state.",
            labels=["state"],
        )
        for state in TxnState:
            family.add_metric([txn_state_name(state)], counts.get(state, 0))
        yield family

    def _groups(self) -> Iterator[Metric]:
        groups = list(self.broker.groups.coordinator.groups.values())
        counts = Counter(group.state for group in groups)
        states = GaugeMetricFamily(
            "oncelog_consumer_groups",
            "Consumer groups this broker coordinates, per group state.",
            labels=["state"],
        )
        for state in GroupState:
            states.add_metric([state.value], counts.get(state, 0))
        yield states
        committed = GaugeMetricFamily(
            "oncelog_consumer_group_committed_offset",
            "A group's committed offset of a partition.",
            labels=["group", *PARTITION],
        )
        lag = GaugeMetricFamily(
            "oncelog_consumer_group_lag",
            "High watermark minus the group's committed offset, for partitions this broker "
            "holds.",
            labels=["group", *PARTITION],
        )
        logs = self.broker.replicas.logs
        for group in groups:
            for tp, value in list(group.offsets.items()):
                labels = [group.group_id, tp.topic, str(tp.partition)]
                committed.add_metric(labels, value.offset)
                plog = logs.get(tp)
                if plog is not None:
                    lag.add_metric(labels, max(0, plog.high_watermark - value.offset))
        yield committed
        yield lag

    # -- replication and the controller --------------------------------------------------------

    def _replication(self) -> Iterator[Metric]:
        replicas = self.broker.replicas
        leaders = under = at_min = under_min = 0
        for replica in list(replicas.replicas_by_tp.values()):
            state = replica.leader
            if replica.role != Role.LEADER or state is None or replica.view is None:
                continue
            leaders += 1
            isr = len(state.isr)
            min_isr = replica.log.config.min_insync_replicas
            under += isr < len(replica.view.replicas)
            at_min += isr == min_isr
            under_min += isr < min_isr
        if not replicas.clustered:
            leaders = sum(1 for _ in replicas.logs.partitions())
        yield _gauge(
            "oncelog_partitions", "Partitions this broker holds a replica of.",
            sum(1 for _ in replicas.logs.partitions()),
        )
        yield _gauge("oncelog_leader_partitions", "Partitions this broker leads.", leaders)
        yield _gauge(
            "oncelog_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set.",
            under,
        )
        yield _gauge(
            "oncelog_at_min_isr_partitions",
            "Partitions led here whose ISR size equals min.insync.replicas (0 on a single "
            "node, which does not replicate).",
            at_min,
        )
        yield _gauge(
            "oncelog_under_min_isr_partitions",
            "Partitions led here whose ISR is smaller than min.insync.replicas.",
            under_min,
        )
        yield CounterMetricFamily(
            "oncelog_isr_shrinks",
            "ISR shrinks of partitions led here.",
            value=replicas.isr_shrinks,
        )
        yield CounterMetricFamily(
            "oncelog_isr_expands",
            "ISR expansions of partitions led here.",
            value=replicas.isr_expands,
        )
        controller = self.metrics.controller
        active = controller is None or controller.active
        yield _gauge(
            "oncelog_active_controller",
            "1 on the active controller (always on a single node), else 0.",
            int(active),
        )
        offline = 0
        if controller is not None and controller.active:
            offline = controller.offline_partition_count()
        yield _gauge(
            "oncelog_offline_partitions",
            "Partitions without a live leader (reported by the active controller).",
            offline,
        )
        moving = 0
        if controller is not None and controller.active:
            moving = sum(len(t.reassignments) for t in controller.topics.values())
        yield _gauge(
            "oncelog_reassigning_partitions",
            "Partitions being moved to other replicas (Kafka's ReassigningPartitions; "
            "reported by the active controller).",
            moving,
        )
        yield CounterMetricFamily(
            "oncelog_leader_elections",
            "Leader elections this broker made as the active controller.",
            value=controller.leader_elections if controller is not None else 0,
        )

    def _fetch_sessions(self) -> Iterator[Metric]:
        sessions = self.broker.fetch_sessions
        yield _gauge(
            "oncelog_fetch_sessions",
            "Incremental fetch sessions (KIP-227) this broker holds for followers and consumers.",
            len(sessions),
        )
        yield _gauge(
            "oncelog_fetch_session_partitions",
            "Partitions held in this broker's fetch sessions, all sessions together.",
            sessions.partitions_cached(),
        )
        yield CounterMetricFamily(
            "oncelog_fetch_session_evictions",
            "Fetch sessions that gave their slot to a new one "
            "(max.incremental.fetch.session.cache.slots).",
            value=sessions.evictions,
        )


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _transaction_start_ms(plog: PartitionLog, producer_id: int, first_offset: int) -> int | None:
    """Timestamp of the batch that opened a producer's transaction here: from the producer
    state when that batch is among its cached last five, else its header read from the log."""
    entry = plog.producer_state.entry(producer_id)
    if entry is not None:
        for batch in entry.batches:
            if batch.first_offset == first_offset:
                return batch.timestamp
    try:
        read = plog.read(first_offset, HEADER_SIZE, plog.log_end_offset, for_follower=True)
    except (KafkaError, OSError, ValueError):
        return None
    records = read.records
    if isinstance(records, FileRegion):
        records = records.read()
    data = bytes(records[:HEADER_SIZE])
    if len(data) < HEADER_SIZE:
        return None
    return parse_header(data, 0).base_timestamp
