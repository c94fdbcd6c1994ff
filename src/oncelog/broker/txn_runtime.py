"""Runs the sans-IO transaction coordinator inside the broker.

It owns `__transaction_state` (internal, created on first transactional use, replayed at
startup), appends each operation's records there before replaying them, writes the
COMMIT/ABORT markers of decided transactions to their partitions (locally: the same step a
multi-broker cluster does with WriteTxnMarkers) and persists their completion. At startup it
finishes every transaction a crash left decided but not completed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from oncelog import fault_points
from oncelog.broker.internal_topics import internal_topic_configs, read_entries
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group.records import partition_for
from oncelog.coordinator.txn import Marker, TransactionCoordinator, TxnSettings
from oncelog.coordinator.txn.coordinator import TxnRecord, TxnResult
from oncelog.coordinator.txn.records import decode_batches, encode_batch
from oncelog.errors import (
    ErrorCode,
    InvalidProducerEpoch,
    KafkaError,
    ProducerFenced,
    TransactionCoordinatorFenced,
)
from oncelog.storage.log_info import AppendInfo, AppendOrigin, EndTxnMarker
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

TXN_TOPIC = "__transaction_state"


def txn_coordinator_for(
    config: BrokerConfig, clock: Clock, next_producer_id: Callable[[], int]
) -> TransactionCoordinator:
    """The transaction coordinator's state machine with the broker's settings, made before
    the replica manager, which asks it to verify transactional produces (`CoordinatorChecks`)."""
    settings = TxnSettings(
        max_timeout_ms=config.get_int("transaction.max.timeout.ms"),
        id_expiration_ms=config.get_int("transactional.id.expiration.ms"),
    )
    return TransactionCoordinator(settings, clock, next_producer_id)


class CoordinatorChecks:
    """KIP-890's checks the replica manager asks of this broker's transaction coordinator
    (`TransactionChecks`)."""

    def __init__(self, coordinator: TransactionCoordinator, clustered: bool) -> None:
        self.coordinator = coordinator
        self.clustered = clustered

    def knows(self, producer_id: int) -> bool:
        return self.coordinator.transactional_id_of(producer_id) is not None

    def verify(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """In a cluster a producer whose coordinator is another broker is not checked here
        (the produce handler asked that broker)."""
        if self.clustered and not self.knows(producer_id):
            return ErrorCode.none
        return self.coordinator.verify_partition(producer_id, epoch, tp)


class TxnRuntime:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replicas: ReplicaManager,
        coordinator: TransactionCoordinator | None = None,
        *,
        on_offsets_marker: Callable[[Marker], None] | None = None,
        send_markers: Callable[[str, list[Marker], TopicPartition, int], None] | None = None,
    ) -> None:
        """`coordinator`: the state machine (`txn_coordinator_for`, made here when not
        given). `on_offsets_marker`: the group coordinator's, deciding a transaction's staged
        offsets when its marker is written. `send_markers`, in a cluster: once the
        transaction's partition of `__transaction_state` is replicated up to the given
        offset (so a failover cannot lose the Prepare* record: markers never precede a
        durable decision), send the markers to the partitions' leaders (WriteTxnMarkers)
        and call `markers_sent(txn_id, ok)`."""
        self.clock = clock
        self.replicas = replicas
        self.partitions = config.get_int("transaction.state.log.num.partitions")
        self.segment_bytes = config.get_int("transaction.state.log.segment.bytes")
        self.coordinator = coordinator or txn_coordinator_for(
            config, clock, replicas.producer_ids.next_id
        )
        #: Test fault injection (oncelog.testing.crash.after.prepare): die after Prepare*.
        self._crash_after_prepare = config.get("oncelog.testing.crash.after.prepare") is True
        self.on_offsets_marker = on_offsets_marker or _ignore_marker
        self.clustered = replicas.clustered
        self.send_markers = send_markers
        self._sending: set[str] = set()
        if self.clustered:
            self.coordinator.own_partitions(lambda txn_id: partition_for(txn_id, self.partitions))

    # -- startup -----------------------------------------------------------------------------

    def startup(self) -> None:
        """Replay `__transaction_state` and finish transactions left in Prepare*."""
        topic = self.replicas.topic(TXN_TOPIC)
        if topic is None:
            return
        self.partitions = topic.partitions
        self.ensure_topic()  # configs of an older version's topic brought up to date
        for p in range(topic.partitions):
            self._load(TopicPartition(TXN_TOPIC, p))
        for txn_id in self.coordinator.pending():
            log.info("completing transaction %s left prepared before the restart", txn_id)
            self._finish(txn_id)

    def _load(self, tp: TopicPartition) -> None:
        plog = self.replicas.partition(tp)
        for record in read_entries(plog, decode_batches, to_log_end=self.clustered):
            self.coordinator.replay(record)

    def on_leadership(self, tp: TopicPartition, leader: bool) -> None:
        """A cluster moved the leadership of a `__transaction_state` partition: load its
        transactions (and finish those left prepared) when this broker leads it now, with
        its leader epoch as the coordinator epoch; drop them otherwise."""
        if tp.topic != TXN_TOPIC:
            return
        topic = self.replicas.topic(TXN_TOPIC)
        if topic is not None:
            self.partitions = topic.partitions
        self.coordinator.unload(tp.partition)
        # Requests waiting on the partition's transactions try again: a deposed coordinator
        # answers them NOT_COORDINATOR now rather than when their wait runs out.
        self.replicas.notify_appended([tp])
        if not leader:
            return
        epoch = self.replicas.leader_epoch(tp)
        self._load(tp)
        self.coordinator.loaded(tp.partition, epoch)
        pending = [
            t for t in self.coordinator.pending() if self.coordinator.owns(t)
            and partition_for(t, self.partitions) == tp.partition
        ]
        log.info(
            "coordinating the transactions of %s (coordinator epoch %d, %d to finish)",
            tp,
            epoch,
            len(pending),
        )
        for txn_id in pending:
            self._finish(txn_id)

    def verify(self, producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
        """KIP-890's check (`CoordinatorChecks.verify`), for TxnOffsetCommit's partition."""
        return CoordinatorChecks(self.coordinator, self.clustered).verify(producer_id, epoch, tp)

    def answer_when_replicated(self, txn_id: str) -> None:
        """In a cluster, hold the answer of a request about `txn_id` until every record of
        its `__transaction_state` partition appended so far is replicated.

        The coordinator applies a record when it appends it, before followers have it, and
        a request that writes nothing (a retried AddPartitionsToTxn, a KIP-890 verification)
        is answered from that state. Were it answered at once, a failover could elect a
        follower without the record and the client would have been told of a transaction
        state the new coordinator never saw (Kafka keeps such a transition pending, answering
        CONCURRENT_TRANSACTIONS, until its append is replicated). The dispatcher holds the
        answer as it does for the request's own writes: until the high watermark covers the
        records, or closes the connection if the leadership moves first."""
        if not self.clustered:
            return
        tp = self.state_partition(txn_id)
        replica = self.replicas.replicas_by_tp.get(tp)
        if replica is None or replica.leader is None:
            return
        end = replica.log.log_end_offset
        if replica.log.high_watermark < end:
            self.replicas.note_coordinator_write((tp, end, replica.leader_epoch))

    def state_partition(self, txn_id: str) -> TopicPartition:
        """The partition of `__transaction_state` that holds `txn_id`'s records."""
        return TopicPartition(TXN_TOPIC, partition_for(txn_id, self.partitions))

    def ensure_topic(self) -> None:
        configs = internal_topic_configs(self.segment_bytes)
        self.replicas.ensure_internal_topic(TXN_TOPIC, self.partitions, configs)

    # -- operations --------------------------------------------------------------------------

    def run(self, result: TxnResult, txn_id: str | None = None) -> ErrorCode:
        """Persist and replay `result`'s records, finish the transaction it decided, and
        return the error to answer with. With `txn_id` (a client's request) the answer
        also waits until the state it was read from is replicated (`answer_when_replicated`).
        """
        if txn_id is not None:
            self.answer_when_replicated(txn_id)
        if result.records:
            try:
                self._persist(result.records)
            except KafkaError as exc:
                log.warning("cannot store transaction records: %s", exc)
                return ErrorCode.coordinator_not_available
            if (
                self._crash_after_prepare
                and not self.clustered  # a cluster crashes once Prepare* is replicated
                and any(meta is not None and meta.state.is_prepare for _, meta in result.records)
            ):
                fault_points.exit_now("txn.after-prepare")
        if result.complete is not None:
            self._finish(result.complete)
        return result.error

    def tick(self) -> None:
        """Abort timed-out transactions, expire idle transactional ids, and retry the
        markers of decided transactions whose markers could not all be written."""
        for result in self.coordinator.expire():
            if result.complete is not None:
                log.info("aborting transaction %s: transaction.timeout.ms passed", result.complete)
            self.run(result)
        for txn_id in self.coordinator.pending():
            if self.coordinator.owns(txn_id):
                self._finish(txn_id)

    def _finish(self, txn_id: str) -> None:
        """Write the markers of a decided transaction, then persist its completion. If a
        marker fails, the transaction stays Prepare* and `tick` writes them again (markers
        are idempotent): completing it would leave that partition's transaction open."""
        if txn_id in self._sending:
            return  # markers on their way to other brokers; `markers_sent` finishes it
        touched: list[TopicPartition] = []
        remote: list[Marker] = []
        failed = 0
        for marker in self.coordinator.markers(txn_id):
            if self._led_elsewhere(marker.tp):
                remote.append(marker)
                continue
            written = self._write_marker(marker)
            if written is None:
                failed += 1
            elif written:
                touched.append(marker.tp)
        self.replicas.notify_appended(touched)
        if failed:
            log.error("transaction %s: %d markers not written; retrying later", txn_id, failed)
            return
        if remote and self.send_markers is not None:
            self._sending.add(txn_id)
            state_tp = self.state_partition(txn_id)
            decided_below = self.replicas.partition(state_tp).log_end_offset
            self.send_markers(txn_id, remote, state_tp, decided_below)
            return
        self._complete(txn_id)

    def decision_replicated(self, txn_id: str) -> None:
        """Test fault injection in a cluster (oncelog.testing.crash.after.prepare): die once
        Prepare* is replicated, before any marker is sent."""
        if self._crash_after_prepare:
            fault_points.exit_now(f"txn.after-prepare ({txn_id})")

    def markers_sent(self, txn_id: str, ok: bool) -> None:
        """The other brokers' markers of `txn_id` were written (or not: retried later)."""
        self._sending.discard(txn_id)
        if not ok:
            log.warning("transaction %s: markers on other brokers not written; retrying", txn_id)
            return
        if txn_id in self.coordinator.pending() and self.coordinator.owns(txn_id):
            self._complete(txn_id)

    def _complete(self, txn_id: str) -> None:
        try:
            self._persist(self.coordinator.complete(txn_id))
        except KafkaError as exc:
            # The Prepare* record stays; the next start (or retry) completes it.
            log.error("cannot complete transaction %s: %s", txn_id, exc)

    def _led_elsewhere(self, tp: TopicPartition) -> bool:
        """In a cluster every marker goes by WriteTxnMarkers to the partition's leader, this
        broker included: its answer waits until the marker is replicated, so a transaction
        is never completed while a failover could still lose one of its markers."""
        return self.clustered

    def _write_marker(self, marker: Marker) -> bool | None:
        """True: written; False: nothing to write (partition gone, or fenced by a newer
        epoch); None: failed, to retry."""
        plog = self.replicas.logs.get(marker.tp)
        if plog is None:
            log.warning("transaction marker for %s skipped: partition is gone", marker.tp)
            return False
        try:
            self.write_marker(marker)
        except (ProducerFenced, InvalidProducerEpoch, TransactionCoordinatorFenced) as exc:
            # A newer epoch already ended the transaction here: nothing left to decide.
            log.warning("transaction marker for %s not needed: %s", marker.tp, exc)
            return False
        except KafkaError as exc:
            log.error("cannot write transaction marker to %s: %s", marker.tp, exc)
            return None
        return True

    def write_marker(self, marker: Marker) -> AppendInfo:
        """Append `marker` to its partition (origin COORDINATOR) and decide the offsets a
        TxnOffsetCommit staged under it: the one marker write, for this coordinator's own
        markers and for WriteTxnMarkers' alike. Raises the append's KafkaError (an older
        epoch is fenced: PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)."""
        end = EndTxnMarker(
            marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.commit
        )
        info = self.replicas.append(marker.tp, end, AppendOrigin.COORDINATOR)
        self.on_offsets_marker(marker)
        return info

    def _persist(self, records: list[TxnRecord]) -> None:
        if not self.clustered:
            self.ensure_topic()  # in a cluster FindCoordinator creates it, replicated
        by_partition: dict[int, list[TxnRecord]] = {}
        for record in records:
            by_partition.setdefault(partition_for(record[0], self.partitions), []).append(record)
        now = self.clock.wall_ms()
        appended = []
        for p, batch in by_partition.items():
            tp = TopicPartition(TXN_TOPIC, p)
            self.replicas.append(tp, encode_batch(batch, now), AppendOrigin.COORDINATOR)
            appended.append(tp)
            for record in batch:
                self.coordinator.replay(record)
        # Wake the followers' waiting fetches: the answer waits until they have the records,
        # and unwoken they would come only after replica.fetch.wait.max.ms.
        self.replicas.notify_appended(appended)


def _ignore_marker(_marker: Marker) -> None:
    pass
