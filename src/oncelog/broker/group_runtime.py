"""Runs the sans-IO group coordinator inside the broker.

It owns the `__consumer_offsets` topic (created internal at startup, replayed to rebuild
groups and offsets), appends the records each coordinator operation returns through the
ordinary partition log before replaying them, and turns `Waiter`s into purgatory `Delayed`s
that wake when the coordinator fills them. The server runs `tick` at `next_deadline`.
Transactional offsets are appended as their producer's transactional batches; the
transaction runtime calls `on_marker` after writing a marker to an offsets partition, and a
replayed marker does the same, so pending offsets are decided the same way live and at load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Any

from oncelog.broker.handlers import CloseConnection
from oncelog.broker.internal_topics import OFFSETS_TOPIC, internal_topic_configs, read_entries
from oncelog.broker.purgatory import Delayed
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.clock import Clock
from oncelog.config import BrokerConfig
from oncelog.coordinator.group import GroupCoordinator, GroupSettings, Result, Waiter
from oncelog.coordinator.group.records import (
    GroupRecord,
    TxnEnd,
    decode_entries,
    encode_batch,
)
from oncelog.coordinator.txn import Marker
from oncelog.errors import ErrorCode, KafkaError
from oncelog.storage.log_info import AppendOrigin
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)



#: Append errors a transactional offset commit's producer should see as they are.
_PRODUCER_ERRORS = frozenset(
    {
        ErrorCode.invalid_producer_epoch,
        ErrorCode.producer_fenced,
        ErrorCode.invalid_txn_state,
        ErrorCode.invalid_producer_id_mapping,
    }
)


def group_key(group_id: str) -> Hashable:
    """The purgatory key that waiters of one group watch."""
    return ("group", group_id)


class GroupRuntime:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        replicas: ReplicaManager,
        *,
        wake: Callable[[list[Hashable]], None] | None = None,
        timers_changed: Callable[[], None] | None = None,
    ) -> None:
        """`wake`: complete the purgatory's operations watching these keys (the server's);
        `timers_changed`: the coordinator's next deadline may have moved earlier."""
        self.clock = clock
        self.replicas = replicas
        self.segment_bytes = config.get_int("offsets.topic.segment.bytes")
        settings = GroupSettings(
            partitions=config.get_int("offsets.topic.num.partitions"),
            initial_rebalance_delay_ms=config.get_int("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=config.get_int("group.min.session.timeout.ms"),
            max_session_timeout_ms=config.get_int("group.max.session.timeout.ms"),
            max_metadata_bytes=config.get_int("offset.metadata.max.bytes"),
        )
        self.coordinator = GroupCoordinator(settings, clock)
        self.clustered = replicas.clustered
        if self.clustered:
            # Each broker coordinates the groups of the offsets partitions it leads.
            self.coordinator.own_partitions()
        testing_ms = config.get_int("oncelog.testing.offsets.retention.ms")
        self.retention_ms = (
            testing_ms if testing_ms >= 0 else config.get_int("offsets.retention.minutes") * 60_000
        )
        self.wake = wake or _ignore
        self.timers_changed = timers_changed or _nothing

    # -- startup -----------------------------------------------------------------------------

    def startup(self) -> None:
        """Create `__consumer_offsets` if needed, then replay every partition of it."""
        partitions = self.coordinator.settings.partitions
        configs = internal_topic_configs(self.segment_bytes)
        topic = self.replicas.ensure_internal_topic(OFFSETS_TOPIC, partitions, configs)
        if topic.partitions != partitions:
            log.warning(
                "%s has %d partitions, offsets.topic.num.partitions is %d; using %d",
                OFFSETS_TOPIC,
                topic.partitions,
                partitions,
                topic.partitions,
            )
            self.coordinator.settings = replace(
                self.coordinator.settings, partitions=topic.partitions
            )
        count = 0
        for p in range(topic.partitions):
            count += self._load(TopicPartition(OFFSETS_TOPIC, p))
        if count:
            log.info(
                "loaded %d groups from %d records of %s",
                len(self.coordinator.groups),
                count,
                OFFSETS_TOPIC,
            )

    def on_leadership(self, tp: TopicPartition, leader: bool) -> None:
        """A cluster moved the leadership of an offsets partition: load its groups when this
        broker became its leader (the coordinator of its groups), drop them otherwise."""
        if tp.topic != OFFSETS_TOPIC:
            return
        topic = self.replicas.topic(OFFSETS_TOPIC)
        if topic is not None and topic.partitions != self.coordinator.settings.partitions:
            self.coordinator.settings = replace(
                self.coordinator.settings, partitions=topic.partitions
            )
        self.coordinator.unload(tp.partition)
        if leader:
            count = self._load(tp)
            self.coordinator.loaded(tp.partition)
            log.info("coordinating the groups of %s (%d records loaded)", tp, count)
        self.after_operation()

    def _load(self, tp: TopicPartition) -> int:
        count = 0
        plog = self.replicas.partition(tp)
        for entry in read_entries(plog, decode_entries, to_log_end=self.clustered):
            if isinstance(entry, TxnEnd):
                self.coordinator.complete_txn_offsets(entry.producer_id, tp.partition, entry.commit)
            else:
                self.coordinator.replay(entry)
                count += 1
        self.coordinator.take_woken()
        return count

    # -- operations --------------------------------------------------------------------------

    def complete(self, result: Result) -> Any:
        """Persist the records of `result`, replay them, and return its response (or the
        failure response if the append failed)."""
        response = result.response
        if result.records:
            try:
                self._persist(result.records)
            except KafkaError as exc:
                log.warning("cannot store group records: %s", exc)
                code = (
                    exc.code
                    if exc.code in _PRODUCER_ERRORS
                    else ErrorCode.coordinator_not_available
                )
                response = result.fail(code) if result.fail is not None else response
        self.after_operation()
        return response

    def respond(
        self,
        result: Result,
        group_id: str,
        wait_ms: int,
        shape: Callable[[Any], Any],
        replicated: bool = False,
    ) -> Any:
        """`complete` and shape the reply; a Waiter not yet filled becomes a Delayed.

        `replicated` (SyncGroup): in a cluster the filled reply also waits until the group's
        `__consumer_offsets` partition is replicated up to where it ended when the reply was
        filled, as Kafka answers every member only once the assignment's append is
        replicated. The leader's request wrote the record, but the other members' waiting
        requests are completed by it; answered at once, a failover before the followers have
        the record would leave them with an assignment the new coordinator never saw. When
        the leadership moves first (or the wait runs out) the connection is closed instead,
        and the member finds the new coordinator and joins again."""
        response = self.complete(result)
        if not isinstance(response, Waiter):
            if replicated:
                self._hold_until_replicated(group_id, response)
            return shape(response)
        waiter = response
        if waiter.result is not None:
            if replicated:
                self._hold_until_replicated(group_id, waiter.result)
            return shape(waiter.result)
        seen: list[tuple[TopicPartition, int, int] | None] = []

        def attempt(force: bool) -> Any:
            if waiter.result is None:
                return shape(waiter.fallback) if force else None
            if not replicated:
                return shape(waiter.result)
            if not seen:
                seen.append(self._unreplicated_end(group_id))
            point = seen[0]
            if point is not None:
                there = self.replicas.replicated_to(*point)
                if there is None:
                    return CloseConnection(f"{point[0]}: leadership moved before replication")
                if not there:
                    if force:
                        return CloseConnection(f"{point[0]}: group records not replicated")
                    return None
            return shape(waiter.result)

        deadline = self.clock.monotonic_ms() + wait_ms
        keys: tuple[Hashable, ...] = (group_key(group_id),)
        if replicated and self.clustered:
            # A high-watermark move of the offsets partition wakes the wait too.
            keys += (self._offsets_partition(group_id),)
        return Delayed(attempt, deadline, keys)

    def _hold_until_replicated(self, group_id: str, reply: Any) -> None:
        """A successful reply read from state another request wrote (a member syncing after
        its leader): the dispatcher holds it as it holds a request's own writes."""
        if isinstance(reply, dict) and reply.get("error_code", 0) != 0:
            return
        point = self._unreplicated_end(group_id)
        if point is not None:
            self.replicas.note_coordinator_write(point)

    def _offsets_partition(self, group_id: str) -> TopicPartition:
        return TopicPartition(OFFSETS_TOPIC, self.coordinator.partition_for(group_id))

    def _unreplicated_end(self, group_id: str) -> tuple[TopicPartition, int, int] | None:
        """(partition, log end, leader epoch) of the group's offsets partition when, in a
        cluster, its high watermark is behind its end; None when nothing is to wait for."""
        if not self.clustered:
            return None
        tp = self._offsets_partition(group_id)
        replica = self.replicas.replicas_by_tp.get(tp)
        if replica is None or replica.leader is None:
            return None
        end = replica.log.log_end_offset
        if replica.log.high_watermark >= end:
            return None
        return tp, end, replica.leader_epoch

    def tick(self) -> None:
        records = self.coordinator.tick()
        if records:
            try:
                self._persist(records)
            except KafkaError as exc:
                log.warning("cannot store group records: %s", exc)
        self.after_operation()

    def expire_offsets(self) -> int:
        """Delete offsets (and emptied groups) past the retention; returns how many records."""
        records = self.coordinator.expire_offsets(self.clock.wall_ms(), self.retention_ms)
        if records:
            try:
                self._persist(records)
            except KafkaError as exc:
                log.warning("cannot store expired offsets: %s", exc)
                return 0
            self.after_operation()
        return len(records)

    def on_marker(self, marker: Marker) -> None:
        """A transaction marker was written: decide its producer's offsets if it landed on
        an offsets partition."""
        if marker.tp.topic != OFFSETS_TOPIC:
            return
        self.coordinator.complete_txn_offsets(
            marker.producer_id, marker.tp.partition, marker.commit
        )
        self.after_operation()

    def after_operation(self) -> None:
        woken = self.coordinator.take_woken()
        if woken:
            self.wake([group_key(g) for g in woken])
        self.timers_changed()

    def _persist(self, records: list[GroupRecord]) -> None:
        """Append `records` (one batch per partition and producer) and replay them."""
        batches: dict[tuple[int, int, int], list[GroupRecord]] = {}
        for record in records:
            p = self.coordinator.partition_for(record.key.group_id)
            batches.setdefault((p, record.producer_id, record.producer_epoch), []).append(record)
        now = self.clock.wall_ms()
        appended = []
        for (p, producer_id, epoch), batch in batches.items():
            tp = TopicPartition(OFFSETS_TOPIC, p)
            data = encode_batch(batch, now, producer_id, epoch)
            self.replicas.append(tp, data, AppendOrigin.COORDINATOR)
            appended.append(tp)
            for record in batch:
                self.coordinator.replay(record)
        self.replicas.notify_appended(appended)


def _ignore(_keys: list[Hashable]) -> None:
    pass


def _nothing() -> None:
    pass
