"""The partitions this broker holds: topic lifecycle, appends and reads.

On a single node this broker leads every partition with leader epoch 0 and the in-sync
replica set is itself, so acks=all is satisfied by the local append. In a cluster
(`enable_cluster`) each partition has a `Partition` with its role from etcd's partition
state: only the leader takes client appends and reads; followers' fetches move the high
watermark (which acks=all waits for) and the ISR. Appends and high-watermark moves notify
a listener (the purgatory) with the partitions that changed.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, ParamSpec, TypeVar, cast, overload

from oncelog.broker.partition import Change, Partition, ReplicaView, Role
from oncelog.broker.produce_verification import ProduceVerification
from oncelog.broker.replica_listeners import ReplicaListeners
from oncelog.broker.replication_quota import (
    FOLLOWER_REPLICAS,
    LEADER_REPLICAS,
    ReplicationThrottle,
)
from oncelog.clock import Clock
from oncelog.config import BrokerConfig, LogConfig, validate_topic_configs, validate_topic_name
from oncelog.errors import (
    FencedLeaderEpoch,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    KafkaStorageError,
    NotEnoughReplicas,
    NotLeaderOrFollower,
    TopicAlreadyExists,
    UnknownLeaderEpoch,
    UnknownProducerId,
    UnknownTopicOrPartition,
)
from oncelog.metadata.image import MetadataImage, TopicImage
from oncelog.metadata.producer_ids import ProducerIdManager, ProducerIdPool, producer_id_source
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG
from oncelog.replication.follower import follower_high_watermark
from oncelog.storage.cleaner import CleanerSettings, LogCleaner
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker, FollowerAppendInfo
from oncelog.storage.log_manager import LogManager
from oncelog.storage.partition_log import AppendInfo, PartitionLog, ProducerSettings, ReadResult
from oncelog.storage.validator import ValidatedRecords, validate_produce_records
from oncelog.types import TopicPartition

#: `tuple.__new__(ReadResult, values)`: the NamedTuple without its Python-level `__new__`,
#: for the one a caught-up follower's fetch makes per partition (the defaults must be given).
_new_tuple = tuple.__new__

log = logging.getLogger(__name__)

P = ParamSpec("P")
T = TypeVar("T")
#: (partition, offset its high watermark must reach, leader epoch) of a coordinator record.
CoordinatorWrite = tuple[TopicPartition, int, int]

LEADER_EPOCH = 0
MAX_PARTITIONS_PER_TOPIC = 10_000


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str | None]


class ReplicaManager:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        *,
        producer_ids: ProducerIdManager | ProducerIdPool | None = None,
        listeners: ReplicaListeners | None = None,
    ) -> None:
        """`producer_ids`: shared with the transaction coordinator (`producer_id_source`
        when not given); `listeners`: what appends and state changes are told
        (`ReplicaListeners`, inert by default)."""
        self.config = config
        self.clock = clock
        listeners = listeners or ReplicaListeners()
        self.listeners = listeners
        self.metadata = MetadataImage.load_or_create(config.log_dirs[0], config.node_id)
        self.producer_tracker = ProducerTracker(config.get_int("producer.state.max.entries"))
        #: In a cluster (etcd.connect set) roles come from etcd, producer ids from its blocks.
        self.clustered = bool(config.get("etcd.connect"))
        self.logs = LogManager(
            config.log_dirs,
            clock,
            ProducerSettings(config.get_int("producer.id.expiration.ms"), self.producer_tracker),
            # A replicated log's high watermark is its own state (checkpointed), never the end.
            replication=self.clustered,
            flush=listeners.flush,
            rolled=listeners.segment_rolled,
            checkpoint_soon=listeners.checkpoint_soon,
            cleaner=LogCleaner(CleanerSettings.from_config(config), clock),
        )
        self.producer_ids = producer_ids or producer_id_source(config)
        self._log_configs: dict[str, LogConfig] = {}
        #: Dynamic broker configs in force ("" the cluster default, str(node id) this
        #: broker's own), over the static `config`; kept in the metadata image on a single
        #: node, in etcd in a cluster.
        self.dynamic_configs: dict[str, dict[str, str]] = (
            {} if self.clustered else dict(self.metadata.broker_configs)
        )
        self._effective: BrokerConfig | None = None
        self.verification = ProduceVerification(listeners.transactions, self.clustered)
        #: In a cluster: this broker's replica of each partition it holds (else empty).
        self.replicas_by_tp: dict[TopicPartition, Partition] = {}
        #: The coordinator writes of the run `writes_of` is in (None outside any).
        self._run_writes: list[CoordinatorWrite] | None = None
        # The metrics' two, looked up once: they run on every append.
        self._appended = listeners.appended
        self._replicated = listeners.replicated
        #: ISR changes committed for partitions led here (Kafka's IsrShrinksPerSec and
        #: IsrExpandsPerSec), read by the metrics.
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: Replication throttles (KIP-73): what this broker sends as leader and fetches as
        #: follower for the replicas out of the ISR its topics list.
        window = (
            config.get_int("replication.quota.window.num"),
            config.get_int("replication.quota.window.size.seconds") * 1000,
        )
        self.leader_throttle = ReplicationThrottle(clock, *window)
        self.follower_throttle = ReplicationThrottle(clock, *window)
        self._apply_throttles(None)

    def startup(self) -> None:
        self.logs.startup(self._log_config)
        for topic in self.metadata.topics.values():
            config = self._log_config(topic.name)
            assert config is not None
            if self.clustered:
                continue  # the logs on disk are loaded; etcd's assignment says what else
            for p in range(topic.partitions):
                self.logs.create(TopicPartition(topic.name, p), config)
        seen = [pid for _, plog in self.logs.partitions() for pid in plog.producer_state.producers]
        if seen:
            self.producer_ids.ensure_above(max(seen))

    def shutdown(self) -> None:
        self.logs.shutdown()

    def _log_config(self, topic: str) -> LogConfig | None:
        cached = self._log_configs.get(topic)
        if cached is not None:
            return cached
        image = self.metadata.topics.get(topic)
        if image is None:
            return None
        merged = {**self.topic_defaults(), **image.configs}
        config = LogConfig.from_topic_configs(merged)
        self._log_configs[topic] = config
        return config

    # -- dynamic configs -----------------------------------------------------------------------

    def effective_config(self) -> BrokerConfig:
        """The static config with the dynamic broker configs over it (default, then own)."""
        if self._effective is None:
            own = self.dynamic_configs.get(str(self.config.node_id), {})
            default = self.dynamic_configs.get("", {})
            raw = {**self.config.raw, **default, **own}
            self._effective = self.config if raw == dict(self.config.raw) else BrokerConfig(raw)
        return self._effective

    def topic_defaults(self) -> dict[str, str]:
        """The topic defaults in force (static and dynamic broker configs)."""
        return self.effective_config().topic_defaults()

    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """New dynamic configs of `entity` ("" the default, else a broker id): kept in the
        image and applied to every partition log at once."""
        if self.dynamic_configs.get(entity, {}) == dict(configs):
            return
        if configs:
            self.dynamic_configs[entity] = dict(configs)
        else:
            self.dynamic_configs.pop(entity, None)
        if not self.clustered:
            self.metadata.set_broker_configs(entity, configs)
        self._effective = None
        self._log_configs.clear()
        self._reapply_log_configs(None)
        log.info("dynamic broker configs of %r: %s", entity or "<default>", dict(configs))

    def alter_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """A single node's AlterConfigs: the topic's new overrides, persisted in the image
        and applied to its partition logs (from their next append, roll or cleaning)."""
        topic = self.metadata.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist")
        self.metadata.add_topic(replace(topic, configs=dict(configs)))
        self._log_configs.pop(name, None)
        self._reapply_log_configs(name)
        log.info("%s: configs set to %s", name, dict(configs))

    def _reapply_log_configs(self, topic: str | None) -> None:
        for tp, plog in self.logs.partitions():
            if topic is None or tp.topic == topic:
                config = self._log_config(tp.topic)
                if config is not None:
                    plog.config = config
        self._apply_throttles(topic)

    def _apply_throttles(self, topic: str | None) -> None:
        """The replication throttles' rates from the broker configs in force, and the
        throttled replicas of `topic` (None: of every topic) from its configs."""
        config = self.effective_config()
        self.leader_throttle.set_limit(config.get_int("leader.replication.throttled.rate"))
        self.follower_throttle.set_limit(config.get_int("follower.replication.throttled.rate"))
        node = self.config.node_id
        topics = self.metadata.topics
        names = list(topics) if topic is None else [topic]
        for name in names:
            image = topics.get(name)
            configs = image.configs if image is not None else {}
            self.leader_throttle.set_topic(name, configs.get(LEADER_REPLICAS, ""), node)
            self.follower_throttle.set_topic(name, configs.get(FOLLOWER_REPLICAS, ""), node)
        if topic is None:
            self.leader_throttle.forget_others(topics)
            self.follower_throttle.forget_others(topics)

    # -- topics ------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.metadata.topics.get(name)

    def partition_exists(self, tp: TopicPartition) -> bool:
        """Whether the cluster's metadata has `tp`, wherever its replicas live: a coordinator
        takes partitions into a transaction that other brokers host, as Kafka's does."""
        image = self.metadata.topics.get(tp.topic)
        return image is not None and 0 <= tp.partition < image.partitions

    def topic_by_id(self, topic_id: uuid.UUID) -> TopicImage | None:
        for topic in self.metadata.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def validate_topic(self, spec: TopicSpec) -> tuple[int, dict[str, str]]:
        """Check a CreateTopics entry; return (partitions, configs) it resolves to."""
        validate_topic_name(spec.name)
        if spec.name in self.metadata.topics:
            raise TopicAlreadyExists(f"Topic '{spec.name}' already exists.")
        partitions = self.config.num_partitions if spec.partitions == -1 else spec.partitions
        if not 0 < partitions <= MAX_PARTITIONS_PER_TOPIC:
            raise InvalidPartitions(f"Number of partitions must be 1..{MAX_PARTITIONS_PER_TOPIC}")
        if spec.replication_factor not in (-1, 1):
            raise InvalidReplicationFactor(
                f"Replication factor: {spec.replication_factor} larger than available brokers: 1."
            )
        return partitions, validate_topic_configs(spec.configs)

    def create_topic(self, spec: TopicSpec, *, internal: bool = False) -> TopicImage:
        partitions, configs = self.validate_topic(spec)
        image = TopicImage(spec.name, uuid.uuid4(), partitions, configs, internal)
        self.metadata.add_topic(image)
        config = self._log_config(spec.name)
        assert config is not None
        try:
            for p in range(partitions):
                self.logs.create(TopicPartition(spec.name, p), config)
        except OSError as exc:
            raise KafkaStorageError(f"cannot create partitions of {spec.name}: {exc}") from exc
        log.info("created topic %s with %d partitions", spec.name, partitions)
        return image

    def ensure_internal_topic(
        self, name: str, partitions: int, configs: Mapping[str, str]
    ) -> TopicImage:
        """An internal topic with `configs`: created if missing; an existing one (say, from a
        version with other defaults) takes the configs that differ, persisted and applied to
        its partition logs from their next append on."""
        topic = self.metadata.topics.get(name)
        if topic is None:
            return self.create_topic(TopicSpec(name, partitions, 1, configs), internal=True)
        changed = {k: v for k, v in configs.items() if topic.configs.get(k) != v}
        if not changed:
            return topic
        topic = replace(topic, configs={**topic.configs, **changed})
        self.metadata.add_topic(topic)
        self._log_configs.pop(name, None)
        config = self._log_config(name)
        assert config is not None
        for p in range(topic.partitions):
            plog = self.logs.get(TopicPartition(name, p))
            if plog is not None:
                plog.config = config
        log.info("%s: configs updated to %s", name, changed)
        return topic

    def maybe_auto_create(self, name: str) -> TopicImage | None:
        """Create a topic named in Metadata if auto.create.topics.enable allows it."""
        existing = self.metadata.topics.get(name)
        if existing is not None or not self.config.auto_create_topics:
            return existing
        return self.create_topic(TopicSpec(name, -1, -1, {}))

    def delete_topic(self, name: str) -> None:
        topic = self.metadata.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist")
        if topic.internal:
            raise InvalidRequest(f"Topic {name} is internal and cannot be deleted")
        self.metadata.remove_topic(name)
        self._log_configs.pop(name, None)
        for p in range(topic.partitions):
            self.logs.delete(TopicPartition(name, p))
        self.logs.checkpoint()
        log.info("deleted topic %s", name)

    def topic_configs(self, name: str) -> dict[str, str]:
        topic = self.metadata.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist")
        return dict(topic.configs)

    # -- data --------------------------------------------------------------------------------

    def partition(self, tp: TopicPartition) -> PartitionLog:
        plog = self.logs.get(tp)
        if plog is None:
            raise UnknownTopicOrPartition(f"This server does not host {tp}")
        return plog

    @overload
    def append(
        self,
        tp: TopicPartition,
        records: bytes | memoryview,
        origin: Literal[AppendOrigin.CLIENT, AppendOrigin.COORDINATOR] = AppendOrigin.CLIENT,
        *,
        acks_all: bool = False,
        verified: Collection[tuple[int, int, TopicPartition]] = (),
    ) -> AppendInfo: ...

    @overload
    def append(
        self, tp: TopicPartition, records: EndTxnMarker, origin: Literal[AppendOrigin.COORDINATOR]
    ) -> AppendInfo: ...

    @overload
    def append(
        self,
        tp: TopicPartition,
        records: bytes | bytearray | memoryview,
        origin: Literal[AppendOrigin.REPLICATION],
    ) -> FollowerAppendInfo: ...

    def append(
        self,
        tp: TopicPartition,
        records: bytes | bytearray | memoryview | EndTxnMarker,
        origin: AppendOrigin = AppendOrigin.CLIENT,
        *,
        acks_all: bool = False,
        verified: Collection[tuple[int, int, TopicPartition]] = (),
    ) -> AppendInfo | FollowerAppendInfo:
        """Every write to a partition of this broker (Kafka's `appendRecords` with its
        `AppendOrigin`); all or nothing. What follows a write happens here, once: the
        metrics, the leader's high watermark, and a coordinator write's place in the
        request's writes (`writes_of`). Waiting fetches are woken by the caller
        (`notify_appended`), once for all the partitions of its request.

        CLIENT: a producer's one batch, checked for KIP-890 verification (unless in
        `verified`), sequence and epoch. COORDINATOR: a coordinator's records (several
        batches, no sequence rules) or an `EndTxnMarker`. REPLICATION: a follower storing
        the leader's batches as they are. `acks_all`: a client's acks=all, refused
        (NOT_ENOUGH_REPLICAS, nothing written) while the ISR is smaller than
        min.insync.replicas, as a coordinator's records always are (Kafka's
        `Partition.appendRecordsToLeader`).
        """
        plog = self.partition(tp)
        if origin is AppendOrigin.REPLICATION:
            assert not isinstance(records, EndTxnMarker)
            return self._append_replicated(tp, plog, records)
        coordinator = origin is AppendOrigin.COORDINATOR
        leader_epoch = LEADER_EPOCH
        if isinstance(records, EndTxnMarker):
            assert coordinator
            leader_epoch = self.leader_epoch(tp)
            info = self._stored(tp, plog.append, records, leader_epoch, origin)
        else:
            if self.clustered:
                leader = self.cluster_partition(tp).check_leader()
                leader_epoch = leader.leader_epoch
                if (coordinator or acks_all) and leader.under_min_isr(
                    plog.config.min_insync_replicas
                ):
                    raise NotEnoughReplicas(
                        f"{tp}: ISR {sorted(leader.isr)} is smaller than min.insync.replicas "
                        f"{plog.config.min_insync_replicas}"
                    )
            elif acks_all and plog.config.min_insync_replicas > 1:  # the ISR is this broker
                raise NotEnoughReplicas(
                    f"{tp}: ISR [{self.config.node_id}] is smaller than min.insync.replicas "
                    f"{plog.config.min_insync_replicas}"
                )
            data = cast("bytes | memoryview", records)  # the overloads: no bytearray here
            validated = self._validated(plog, data, coordinator, verified)
            info = self._stored(tp, plog.append, validated, leader_epoch, origin)
            if not info.duplicate:
                self._appended(tp.topic, len(records), validated.record_count)
        if self.clustered:
            self.leader_appended(tp)
            if coordinator:
                self.note_coordinator_write((tp, info.last_offset + 1, leader_epoch))
        return info

    def writes_of(
        self, run: Callable[P, T], *args: P.args, **kwargs: P.kwargs
    ) -> tuple[T, list[CoordinatorWrite]]:
        """`run(*args, **kwargs)` and, in a cluster, the coordinator writes it made:
        (partition, offset its high watermark must reach, leader epoch). The dispatcher runs
        each handler so and holds the answer until they are replicated (Kafka's coordinators
        append with acks=all); a held answer's retry runs its step so. A write outside any
        run (a timer's) is nobody's to wait for."""
        outer = self._run_writes
        writes: list[CoordinatorWrite] = []
        self._run_writes = writes
        try:
            return run(*args, **kwargs), writes
        finally:
            self._run_writes = outer

    def note_coordinator_write(self, write: CoordinatorWrite) -> None:
        """Count `write` among the current run's (`writes_of`): also a record another
        request appended that this one's answer reads, not yet replicated."""
        writes = self._run_writes
        if writes is not None:
            writes.append(write)

    @staticmethod
    def _stored(
        tp: TopicPartition,
        write: Callable[[ValidatedRecords | EndTxnMarker, int, AppendOrigin], AppendInfo],
        records: ValidatedRecords | EndTxnMarker,
        leader_epoch: int,
        origin: AppendOrigin,
    ) -> AppendInfo:
        """The log's write; a disk's refusal is KAFKA_STORAGE_ERROR (the log took it back)."""
        try:
            return write(records, leader_epoch, origin)
        except OSError as exc:
            log.error("%s: append failed: %s", tp, exc)
            raise KafkaStorageError(f"{tp}: {exc}") from exc

    def _validated(
        self,
        plog: PartitionLog,
        records: bytes | memoryview,
        coordinator: bool,
        verified: Collection[tuple[int, int, TopicPartition]],
    ) -> ValidatedRecords:
        """The batches checked for a leader's append: framing, size, CRC and compression
        (`validate_produce_records`), and each producer id issued here; a client's
        transactional batch also verified with its coordinator (KIP-890)."""
        tp = plog.tp
        validated = validate_produce_records(
            records,
            plog.config.max_message_bytes,
            client=not coordinator,
            compacted=plog.config.compact and not coordinator,
        )
        for _, header in validated.batches:
            if header.attributes & TRANSACTIONAL_FLAG and not coordinator:  # no property call
                key = (header.producer_id, header.producer_epoch, tp)
                if key not in verified:
                    self.verification.check(plog, header.producer_id, header.producer_epoch)
            if header.producer_id >= self.producer_ids.allocated_below:
                raise UnknownProducerId(
                    f"{tp}: producer id {header.producer_id} was never issued by this cluster"
                )
        return validated

    def _append_replicated(
        self, tp: TopicPartition, plog: PartitionLog, records: bytes | bytearray | memoryview
    ) -> FollowerAppendInfo:
        """A follower's append of what its leader sent, counted in the metrics and, when the
        partition is throttled, in the follower's replication quota (in sync or not, as
        Kafka counts it)."""
        stored = plog.append(records, origin=AppendOrigin.REPLICATION)
        self._replicated(tp.topic, stored.valid_bytes)
        throttle = self.follower_throttle
        if throttle.applies(tp):
            throttle.record(stored.valid_bytes)
        return stored

    def follower_caught_up(self, tp: TopicPartition, leader_hw: int, leader_log_start: int) -> None:
        """A follower's fetch answer was applied: its high watermark follows the leader's
        (never past its own end), and so does its log start (DeleteRecords, retention),
        never past its high watermark (the rest comes with later fetches)."""
        plog = self.partition(tp)
        plog.set_high_watermark(follower_high_watermark(leader_hw, plog.log_end_offset))
        if leader_log_start > plog.log_start_offset:
            start = min(leader_log_start, plog.high_watermark)
            if start > plog.log_start_offset:
                plog.delete_records_before(start)

    def transactions_to_verify(
        self, tp: TopicPartition, records: bytes | memoryview
    ) -> tuple[int, int] | None:
        """In a cluster: (producer id, epoch) when this partition's transactional batch opens
        a transaction here whose coordinator is another broker (it must be asked first)."""
        plog = self.logs.get(tp)
        return None if plog is None else self.verification.to_verify(plog, records)

    def leader_appended(self, tp: TopicPartition) -> None:
        """The leader wrote to `tp` (a produce, a transaction marker): an ISR of the leader
        alone commits it at once; with followers in the ISR their fetches move the high
        watermark."""
        replica = self.replicas_by_tp.get(tp)
        if replica is not None:
            replica.maybe_advance_high_watermark()

    def notify_appended(self, tps: list[TopicPartition], *, wake_followers: bool = True) -> None:
        """`tps` moved (log end, high watermark or log start): wake what waits on them, and
        on the follower fetch sessions holding them. A high watermark that moved alone
        (`wake_followers=False`) only marks it in those sessions for their next fetch to
        tell: it cannot complete a follower's parked fetch, which waits for records."""
        if not tps:
            return
        sessions = self.listeners.fetch_touched(tps)
        self.listeners.wake([*tps, *sessions] if wake_followers else [*tps])

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool = True,
        read_committed: bool = False,
    ) -> ReadResult:
        """A consumer's read for a Fetch answer: a large span comes back as a FileRegion."""
        if self.clustered:
            self.cluster_partition(tp).check_leader()
        return self.partition(tp).read(
            offset, max_bytes, min_one=min_one, read_committed=read_committed, regions=True
        )

    def check_leader_epoch(self, tp: TopicPartition, current_leader_epoch: int) -> None:
        """KIP-320 fencing: a client's view of the leader epoch must match ours (-1 skips)."""
        if self.clustered:
            self.cluster_partition(tp).check_epoch(current_leader_epoch)
            return
        if current_leader_epoch < 0 or current_leader_epoch == LEADER_EPOCH:
            return
        error = FencedLeaderEpoch if current_leader_epoch < LEADER_EPOCH else UnknownLeaderEpoch
        raise error(f"{tp}: request epoch {current_leader_epoch}, leader epoch {LEADER_EPOCH}")

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The leader epoch this broker leads `tp` in (NOT_LEADER_OR_FOLLOWER otherwise)."""
        if not self.clustered:
            self.partition(tp)
            return LEADER_EPOCH
        return self.cluster_partition(tp).check_leader().leader_epoch

    def replicated_to(self, tp: TopicPartition, end: int, epoch: int) -> bool | None:
        """Whether this broker's high watermark of `tp` has reached `end` while it still leads
        `tp` in `epoch`; None when the leadership moved (what was written may be lost). A
        coordinator's answer that depends on its records waits on this."""
        replica = self.replicas_by_tp.get(tp)
        if replica is None or replica.leader is None or replica.leader_epoch != epoch:
            return None
        return replica.log.high_watermark >= end

    def writes_replicated(
        self, writes: Sequence[tuple[TopicPartition, int, int]]
    ) -> bool | None:
        """`replicated_to` of every (partition, end, epoch) in `writes`: True when all are
        replicated, False while one is not yet, None as soon as one's leadership moved."""
        for tp, end, epoch in writes:
            replicated = self.replicated_to(tp, end, epoch)
            if not replicated:
                return replicated
        return True

    # -- cluster -------------------------------------------------------------------------------

    def apply_topic(
        self,
        name: str,
        topic_id: uuid.UUID,
        replicas: tuple[tuple[int, ...], ...],
        configs: Mapping[str, str],
        internal: bool,
    ) -> list[TopicPartition]:
        """etcd's topic: keep it in the local image and open the logs of the partitions this
        broker is a replica of; return those partitions."""
        existing = self.metadata.topics.get(name)
        if existing is not None and existing.topic_id != topic_id:
            self.remove_topic(name)  # deleted and created again under the same name
            existing = None
        image = TopicImage(name, topic_id, len(replicas), dict(configs), internal)
        if existing != image:
            self.metadata.add_topic(image)
            self._log_configs.pop(name, None)
            self._apply_throttles(name)
        config = self._log_config(name)
        assert config is not None
        mine = []
        for p, assigned in enumerate(replicas):
            tp = TopicPartition(name, p)
            if self.config.node_id in assigned:
                plog = self.logs.get(tp)
                if plog is None:
                    plog = self.logs.create(tp, config)
                plog.config = config
                mine.append(tp)
        return mine

    def unassigned(
        self, name: str, replicas: tuple[tuple[int, ...], ...]
    ) -> list[TopicPartition]:
        """Partitions of `name` this broker holds a log of without being one of their
        replicas (reassigned elsewhere, or a stray from before)."""
        node = self.config.node_id
        return [
            tp
            for p, assigned in enumerate(replicas)
            if node not in assigned
            and (
                (tp := TopicPartition(name, p)) in self.replicas_by_tp
                or self.logs.get(tp) is not None
            )
        ]

    def drop_replica(self, tp: TopicPartition) -> None:
        """Stop holding `tp` here and delete its log (it moved to other brokers)."""
        self.replicas_by_tp.pop(tp, None)
        if self.logs.get(tp) is not None:
            self.logs.delete(tp)
            self.logs.checkpoint()
        log.info("%s: not a replica on broker %d any more; log deleted", tp, self.config.node_id)

    def remove_topic(self, name: str) -> None:
        """etcd deleted the topic: drop its replicas and logs here."""
        topic = self.metadata.remove_topic(name)
        self._log_configs.pop(name, None)
        self._apply_throttles(name)  # no longer throttled
        if topic is None:
            return
        for p in range(topic.partitions):
            tp = TopicPartition(name, p)
            self.replicas_by_tp.pop(tp, None)
            if self.logs.get(tp) is not None:
                self.logs.delete(tp)
        self.logs.checkpoint()
        log.info("deleted topic %s (etcd)", name)

    def cluster_partition(self, tp: TopicPartition) -> Partition:
        replica = self.replicas_by_tp.get(tp)
        if replica is None:
            if self.logs.get(tp) is None:
                raise UnknownTopicOrPartition(f"This server does not host {tp}")
            raise NotLeaderOrFollower(f"broker {self.config.node_id} has no state for {tp} yet")
        return replica

    def apply_partition_state(self, tp: TopicPartition, view: ReplicaView) -> Change:
        """Apply etcd's state of a partition this broker is a replica of (its log exists)."""
        replica = self.replicas_by_tp.get(tp)
        if replica is None:
            replica = self.replicas_by_tp[tp] = Partition(
                self.config.node_id, tp, self.partition(tp)
            )
            replica.log.enable_replication()
        led_isr = set(replica.view.isr) if replica.view and replica.role == Role.LEADER else None
        change = replica.apply_state(
            view, self.config.get_int("replica.lag.time.max.ms"), self.clock.monotonic_ms()
        )
        if change == Change.ISR_CHANGED and led_isr is not None and replica.role == Role.LEADER:
            self.isr_shrinks += bool(led_isr - set(view.isr))
            self.isr_expands += bool(set(view.isr) - led_isr)
        if change in (Change.BECAME_LEADER, Change.ISR_CHANGED):
            replica.maybe_advance_high_watermark()
        if change != Change.NOTHING:
            # As Kafka completes delayed fetches and produces of a partition whose state
            # changed: a waiting fetch answers a lost leadership now, and a follower session
            # looks at the partition again.
            self.notify_appended([tp])
            log.info(
                "%s: %s (leader %d, leader epoch %d, isr %s)",
                tp,
                change.value,
                view.leader,
                view.leader_epoch,
                list(view.isr),
            )
        return change

    def follower_fetch(
        self,
        replica_id: int,
        tp: TopicPartition,
        fetch_offset: int,
        current_leader_epoch: int,
        max_bytes: int,
        now_ms: int | None = None,
    ) -> ReadResult:
        """A follower's fetch: read past the high watermark, note the follower's position,
        then move the high watermark and maybe propose the follower back into the ISR.
        `now_ms`: the request's time (one clock read for all its partitions)."""
        replica = self.replicas_by_tp.get(tp) or self.cluster_partition(tp)
        leader = replica.check_leader(current_leader_epoch)
        if replica_id not in leader.followers:
            raise NotLeaderOrFollower(f"broker {replica_id} is not a replica of {tp}")
        plog = replica.log
        end = plog.log_end_offset
        # A throttled partition's replication counts against the leader's rate; over it, a
        # follower out of the ISR (a move's copy) is answered the offsets without records
        # until the rate has fallen back (Kafka's shouldLeaderThrottle).
        throttle = self.leader_throttle
        throttled = throttle.applies(tp)
        held = (
            throttled
            and replica_id not in leader.isr
            and plog.log_start_offset <= fetch_offset <= end
            and throttle.exceeded()
        )
        if (fetch_offset == end or held) and end >= plog.log_start_offset:
            # Caught up (a long poll parking, or its position after an append), or held back:
            # nothing to read, the answer is the offsets `read` would give.
            hw, start, lso = plog.high_watermark, plog.log_start_offset, plog.last_stable_offset
            result = _new_tuple(ReadResult, (b"", hw, start, end, lso, None))
        else:
            result = plog.read(fetch_offset, max_bytes, end, for_follower=True, regions=True)
            if throttled:
                throttle.record(len(result.records))
        if now_ms is None:
            now_ms = self.clock.monotonic_ms()
        leader.on_follower_fetch(replica_id, fetch_offset, end, now_ms)
        # The HW is the smallest end over the maximal ISR: with this member at or below it,
        # it cannot move (a re-read after an append, say); skip the scan.
        below = fetch_offset <= plog.high_watermark and replica_id in leader.maximal_isr
        if not below and replica.maybe_advance_high_watermark():
            self.notify_appended([tp], wake_followers=False)
        if replica_id not in leader.isr:
            expanded = leader.isr_to_expand(replica_id, plog.high_watermark)
            if expanded is not None:
                leader.isr_proposed(expanded)
                self.listeners.isr_change(replica, expanded)
        return result

    def maybe_shrink_isr(self) -> None:
        """Propose dropping followers that lag more than replica.lag.time.max.ms."""
        now = self.clock.monotonic_ms()
        for replica in self.replicas_by_tp.values():
            leader = replica.leader
            if replica.role != Role.LEADER or leader is None:
                continue
            shrunk = leader.isr_to_shrink(replica.log.log_end_offset, now)
            if shrunk is not None:
                log.info(
                    "%s: proposing ISR %s (was %s): followers lag more than %d ms",
                    replica.tp,
                    sorted(shrunk),
                    sorted(leader.isr),
                    leader.lag_time_max_ms,
                )
                leader.isr_proposed(shrunk)
                self.listeners.isr_change(replica, shrunk)

    def isr_change_done(self, tp: TopicPartition, view: ReplicaView | None) -> None:
        """The outcome of a proposed ISR change: the new state, or None when refused."""
        replica = self.replicas_by_tp.get(tp)
        if replica is None or replica.leader is None:
            return
        if view is None:
            replica.leader.isr_refused()
            return
        if view == replica.view:  # the watch brought it first (and committed it)
            return
        if self.apply_partition_state(tp, view) == Change.NOTHING and replica.leader is not None:
            replica.leader.isr_refused()  # a newer state was applied meanwhile

    # -- housekeeping ------------------------------------------------------------------------

    def apply_retention(self) -> int:
        return self.logs.apply_retention()
