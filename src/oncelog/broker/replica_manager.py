"""The partitions this broker leads: topic lifecycle, appends and reads.

On a single node this broker leads every partition with leader epoch 0 and the in-sync
replica set is itself, so acks=all is satisfied by the local append. Appends notify a
listener (the fetch purgatory) with the partitions that grew.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from oncelog.clock import Clock
from oncelog.config import BrokerConfig, LogConfig, validate_topic_configs, validate_topic_name
from oncelog.errors import (
    ErrorCode,
    FencedLeaderEpoch,
    InvalidPartitions,
    InvalidProducerEpoch,
    InvalidProducerIdMapping,
    InvalidReplicationFactor,
    InvalidRequest,
    InvalidTxnState,
    KafkaStorageError,
    TopicAlreadyExists,
    UnknownLeaderEpoch,
    UnknownProducerId,
    UnknownTopicOrPartition,
)
from oncelog.metadata.image import MetadataImage, TopicImage
from oncelog.metadata.producer_ids import PRODUCER_ID_FILE, ProducerIdManager
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.storage.cleaner import CleanerSettings, CleanJob, CleanResult, LogCleaner
from oncelog.storage.log_manager import LogManager
from oncelog.storage.partition_log import AppendInfo, PartitionLog, ProducerSettings, ReadResult
from oncelog.storage.validator import validate_produce_records
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

LEADER_EPOCH = 0
MAX_PARTITIONS_PER_TOPIC = 10_000


@dataclass(frozen=True, slots=True)
class TopicSpec:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str | None]


class ReplicaManager:
    def __init__(self, config: BrokerConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.metadata = MetadataImage.load_or_create(config.log_dirs[0], config.node_id)
        self.producer_tracker = ProducerTracker(config.get_int("producer.state.max.entries"))
        self.logs = LogManager(
            config.log_dirs,
            clock,
            ProducerSettings(config.get_int("producer.id.expiration.ms"), self.producer_tracker),
        )
        self.producer_ids = ProducerIdManager(config.log_dirs[0] / PRODUCER_ID_FILE)
        self.cleaner = LogCleaner(CleanerSettings.from_config(config), clock)
        self._log_configs: dict[str, LogConfig] = {}
        #: Set by the transaction runtime (KIP-890 verification); none: no transactions.
        self.txn_verifier: Callable[[int, int, TopicPartition], ErrorCode] = _no_transactions
        self.append_listener: Callable[[list[TopicPartition]], None] = lambda _: None

    def startup(self) -> None:
        self.logs.startup(self._log_config)
        for topic in self.metadata.topics.values():
            config = self._log_config(topic.name)
            assert config is not None
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
        merged = {**self.config.topic_defaults(), **image.configs}
        config = LogConfig.from_topic_configs(merged)
        self._log_configs[topic] = config
        return config

    # -- topics ------------------------------------------------------------------------------

    def topic(self, name: str) -> TopicImage | None:
        return self.metadata.topics.get(name)

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

    def append(
        self, tp: TopicPartition, records: bytes, *, coordinator: bool = False
    ) -> AppendInfo:
        """Validate and append one partition's produce data; all or nothing.

        `coordinator`: the writer is a coordinator of this broker (Kafka's coordinator
        origin), which verified the producer itself: no KIP-890 check, no sequence rules,
        and several batches are allowed (a client's data must be one batch).
        """
        plog = self.partition(tp)
        validated = validate_produce_records(
            records,
            plog.config.max_message_bytes,
            client=not coordinator,
            compacted=plog.config.compact and not coordinator,
        )
        for _, header in validated.batches:
            if header.is_transactional and not coordinator:
                self._verify_transactional(tp, header.producer_id, header.producer_epoch)
            if header.producer_id >= self.producer_ids.allocated_below:
                raise UnknownProducerId(
                    f"{tp}: producer id {header.producer_id} was never issued by this cluster"
                )
        try:
            return plog.append(validated, LEADER_EPOCH, check_sequence=not coordinator)
        except OSError as exc:
            log.error("%s: append failed: %s", tp, exc)
            raise KafkaStorageError(f"{tp}: {exc}") from exc

    def _verify_transactional(self, tp: TopicPartition, producer_id: int, epoch: int) -> None:
        """KIP-890's late-produce defence: transactional data is accepted only for a
        partition the coordinator has in the producer's open transaction."""
        code = self.txn_verifier(producer_id, epoch, tp)
        if code == ErrorCode.none:
            return
        message = f"{tp}: producer {producer_id} epoch {epoch} has no open transaction here"
        if code == ErrorCode.invalid_producer_epoch:
            raise InvalidProducerEpoch(message)
        if code == ErrorCode.invalid_producer_id_mapping:
            raise InvalidProducerIdMapping(message)
        raise InvalidTxnState(message)

    def notify_appended(self, tps: list[TopicPartition]) -> None:
        if tps:
            self.append_listener(tps)

    def read(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool = True,
        read_committed: bool = False,
    ) -> ReadResult:
        return self.partition(tp).read(
            offset, max_bytes, min_one=min_one, read_committed=read_committed
        )

    def check_leader_epoch(self, tp: TopicPartition, current_leader_epoch: int) -> None:
        """KIP-320 fencing: a client's view of the leader epoch must match ours (-1 skips)."""
        if current_leader_epoch < 0 or current_leader_epoch == LEADER_EPOCH:
            return
        error = FencedLeaderEpoch if current_leader_epoch < LEADER_EPOCH else UnknownLeaderEpoch
        raise error(f"{tp}: request epoch {current_leader_epoch}, leader epoch {LEADER_EPOCH}")

    # -- housekeeping ------------------------------------------------------------------------

    def apply_retention(self) -> int:
        return self.logs.apply_retention()

    # -- log cleaner: the server runs `clean_segments` in a worker, these two on its loop --------

    def next_clean_job(self) -> tuple[PartitionLog, CleanJob] | None:
        """The next cleaning round to run, if a compacted partition needs one."""
        if not self.cleaner.settings.enable:
            return None
        return self.cleaner.grab_filthiest(plog for _, plog in self.logs.partitions())

    def finish_clean(self, plog: PartitionLog, job: CleanJob, result: CleanResult) -> None:
        """Swap a finished round in, unless its partition was deleted or replaced meanwhile.

        A swap that fails half-way (a disk error) leaves the files for the next load to
        complete; the partition is reloaded from them now, as a start would.
        """
        current = self.logs.get(job.tp)
        try:
            if self.cleaner.finish(current if current is plog else None, job, result):
                self.logs.checkpoint()
        except OSError as exc:
            log.error(
                "%s: swapping cleaned segments failed: %s; reloading the partition", job.tp, exc
            )
            self.logs.reload(job.tp)

    def clean_failed(self, job: CleanJob, exc: BaseException) -> None:
        self.cleaner.failed(job, exc)


def _no_transactions(producer_id: int, epoch: int, tp: TopicPartition) -> ErrorCode:
    return ErrorCode.invalid_txn_state
