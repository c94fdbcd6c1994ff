"""WriteTxnMarkers when the disk refuses a marker: that partition answers KAFKA_STORAGE_ERROR
(the sender retries), the request's other partitions are written and answered, and nothing
escapes the handler (an escaping error closed the whole request before). A marker on a
partition whose ISR is its leader alone commits at once."""

from __future__ import annotations

import errno
import uuid
from pathlib import Path

import pytest

from oncelog.broker.dispatcher import Reply
from oncelog.broker.partition import ReplicaView
from oncelog.coordinator.txn import Marker
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition
from tests.storage.test_transactions import produce, txn_batch
from tests.storage.util import validated
from tests.unit.metrics_broker import Broker


def test_a_marker_the_disk_refuses_is_a_storage_error_for_that_partition_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker = Broker(tmp_path)
    try:
        broker.create_topic("t", partitions=2)
        logs = {p: broker.replicas.partition(TopicPartition("t", p)) for p in (0, 1)}
        for plog in logs.values():
            produce(plog, 7, 0, 0)  # producer 7's transaction open on both partitions

        def full(*args: object) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(logs[0].active.txn_index, "append", full)
        decided: list[Marker] = []
        broker.txns.on_offsets_marker = decided.append
        answer = broker.call(
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": 7,
                        "producer_epoch": 0,
                        "transaction_result": False,  # ABORT: needs the .txnindex entry
                        "topics": [{"name": "t", "partition_indexes": [0, 1]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
        codes = {p.partition_index: p.error_code for p in answer.markers[0].topics[0].partitions}
        assert codes == {0: ErrorCode.kafka_storage_error, 1: ErrorCode.none}
        assert [m.tp for m in decided] == [TopicPartition("t", 1)]
        assert logs[0].last_stable_offset == 0  # still open: retried later
        assert logs[1].last_stable_offset == 3
    finally:
        broker.close()


def test_a_marker_on_a_partition_led_alone_commits_at_once(tmp_path: Path) -> None:
    """In a cluster a replication factor 1 partition (ISR: its leader) has no follower whose
    fetch would move the high watermark: the marker's append must (as a produce's does), or
    the coordinator waits for an answer that never comes and the producer's next
    transaction with it."""
    broker = Broker(tmp_path, **{"etcd.connect": "http://127.0.0.1:2379", "node.id": "1"})
    try:
        tp = TopicPartition("t", 0)
        broker.replicas.apply_topic("t", uuid.uuid4(), ((1,),), {}, False)
        broker.replicas.apply_partition_state(tp, ReplicaView(1, 0, (1,), 0, (1,), 1))
        plog = broker.replicas.partition(tp)
        plog.append(validated(txn_batch(7, 0, 0)), 0)
        broker.replicas.leader_appended(tp)  # what the produce path does
        assert plog.high_watermark == 2
        outcome, _ = broker.dispatch(
            ApiKey.WRITE_TXN_MARKERS,
            1,
            {
                "markers": [
                    {
                        "producer_id": 7,
                        "producer_epoch": 0,
                        "transaction_result": True,
                        "topics": [{"name": "t", "partition_indexes": [0]}],
                        "coordinator_epoch": 0,
                    }
                ]
            },
        )
        assert plog.high_watermark == plog.log_end_offset == 3
        assert plog.last_stable_offset == 3
        assert isinstance(outcome, Reply)  # answered at once, not waiting for the HW
    finally:
        broker.close()
