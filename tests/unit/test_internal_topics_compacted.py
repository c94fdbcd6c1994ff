"""The internal topics are compacted: every coordinator record has a key, and what expires
(offsets and groups, KIP-211; idle transactional ids) leaves a tombstone under the same key,
so that after compaction the live state is all that remains."""

from __future__ import annotations

from pathlib import Path

from oncelog.broker.internal_topics import internal_topic_configs
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.clock import ManualClock
from oncelog.config import INTERNAL_SEGMENT_BYTES, BrokerConfig, LogConfig
from oncelog.coordinator.group import records as group_records
from oncelog.coordinator.txn import records as txn_records
from oncelog.protocol.records.batch import HEADER_SIZE
from oncelog.protocol.records.record import record_keys_and_values
from oncelog.storage.validator import validate_produce_records
from oncelog.types import TopicPartition
from tests.unit.test_group_coordinator import TP, G
from tests.unit.test_group_coordinator import Harness as GroupHarness
from tests.unit.test_group_offset_retention import RETENTION, TP1, commit
from tests.unit.test_txn_coordinator import Harness as TxnHarness

TP0 = TopicPartition("__consumer_offsets", 0)


def keys_and_values(batch: bytes) -> list[tuple[bytes | None, bytes | None]]:
    # Compacted-topic validation: a record without a key would be refused.
    validated = validate_produce_records(batch, 1 << 30, compacted=True)
    return record_keys_and_values(batch[HEADER_SIZE:], validated.record_count)


def test_internal_topics_are_created_compacted() -> None:
    config = LogConfig.from_topic_configs(internal_topic_configs(INTERNAL_SEGMENT_BYTES))
    assert config.compact and config.segment_bytes == INTERNAL_SEGMENT_BYTES


def test_an_older_internal_topic_takes_the_current_configs(tmp_path: Path) -> None:
    """A data dir from a version that made 100 MiB internal segments gets the configured size
    at start, persisted, and its partition logs roll by it from then on."""
    broker = BrokerConfig.load(None, [("log.dirs", str(tmp_path))])
    clock = ManualClock()
    replicas = ReplicaManager(broker, clock)
    replicas.startup()
    old = {"cleanup.policy": "compact", "retention.ms": "-1", "segment.bytes": "104857600"}
    replicas.ensure_internal_topic("__consumer_offsets", 2, old)
    replicas.shutdown()

    replicas = ReplicaManager(broker, clock)
    replicas.startup()
    assert replicas.logs.get(TP0).config.segment_bytes == 104857600  # type: ignore[union-attr]
    topic = replicas.ensure_internal_topic("__consumer_offsets", 2, internal_topic_configs(4096))
    assert topic.configs["segment.bytes"] == "4096" and topic.partitions == 2
    assert replicas.logs.get(TP0).config.segment_bytes == 4096  # type: ignore[union-attr]
    replicas.shutdown()

    replicas = ReplicaManager(broker, clock)
    replicas.startup()
    assert replicas.logs.get(TP0).config.segment_bytes == 4096  # type: ignore[union-attr]
    replicas.shutdown()


def test_expired_offsets_and_group_leave_tombstones_under_their_keys() -> None:
    h = GroupHarness()
    commit(h, {TP: 1, TP1: 2})
    group_id = G
    h.clock.advance(RETENTION)
    expired = h.coordinator.expire_offsets(h.clock.wall_ms(), RETENTION)
    wire = keys_and_values(group_records.encode_batch(expired, h.clock.wall_ms()))
    assert [v for _, v in wire] == [None, None, None]
    assert [k for k, _ in wire] == [
        group_records.encode_key(group_records.OffsetKey(group_id, TP.topic, TP.partition)),
        group_records.encode_key(group_records.OffsetKey(group_id, TP1.topic, TP1.partition)),
        group_records.encode_key(group_records.GroupKey(group_id)),
    ]


def test_expired_transactional_id_leaves_a_tombstone_under_its_key() -> None:
    h = TxnHarness(expiration_ms=10_000)
    h.init("idle")
    live_batch = txn_records.encode_batch(h.log[-1:], 0)
    ((live_key, live_value),) = keys_and_values(live_batch)
    assert live_value is not None
    h.clock.advance(10_000)
    (result,) = h.coordinator.expire()
    wire = keys_and_values(txn_records.encode_batch(result.records, h.clock.wall_ms()))
    assert wire == [(live_key, None)]
    assert txn_records.decode_batches(txn_records.encode_batch(result.records, 0))[0] == [
        ("idle", None)
    ]
