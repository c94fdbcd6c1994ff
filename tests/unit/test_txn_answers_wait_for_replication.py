"""In a cluster, a transaction coordinator's answer waits until the state it was read from is
replicated, not only its own writes: a retried AddPartitionsToTxn that writes nothing must not
tell the producer "added" while the record that added them is on the leader alone (a failover
to a follower would then forget it, and the producer's EndTxn would meet a coordinator that
never saw the transaction)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from oncelog.broker.dispatcher import Pending, Reply
from oncelog.broker.partition import ReplicaView
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import CLUSTERED, Broker, replica_state

TXN = TopicPartition("__transaction_state", 0)
ADD_PARTITIONS_V = 3


#: InitProducerId v4 of transactional id "tx", a new producer.
INIT_TX = {
    "transactional_id": "tx",
    "transaction_timeout": timedelta(seconds=60),
    "producer_id": -1,
    "producer_epoch": -1,
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(tmp_path, **CLUSTERED, **{"transaction.state.log.num.partitions": "1"})
    broker.lead("__transaction_state", internal=True)
    broker.lead("data")
    broker.txns.on_leadership(TXN, True)
    broker.replicas.producer_ids.add_block(1000, 1000)  # what the server reserves in etcd
    try:
        yield broker
    finally:
        broker.close()


def _add_partitions(broker: Broker, pid: int, epoch: int) -> object:
    return broker.add_partitions("tx", pid, epoch, "data")


def test_a_retried_add_partitions_waits_for_the_first_ones_record(broker: Broker) -> None:
    outcome, _ = broker.dispatch(ApiKey.INIT_PRODUCER_ID, 4, INIT_TX)
    assert isinstance(outcome, Pending)  # its record waits for the followers
    meta = broker.txns.coordinator.transactions["tx"]
    pid, epoch = meta.producer_id, meta.producer_epoch

    first = _add_partitions(broker, pid, epoch)
    assert isinstance(first, Pending)  # writes the Ongoing record, held until replicated
    assert TopicPartition("data", 0) in broker.txns.coordinator.transactions["tx"].partitions
    # The retry writes nothing; it was answered at once from the unreplicated state before.
    retry = _add_partitions(broker, pid, epoch)
    assert isinstance(retry, Pending)
    assert broker.replicas.partition(TXN).high_watermark < broker.replicas.partition(
        TXN
    ).log_end_offset

    # Once the followers leave the ISR, the leader alone commits everything: the held answer
    # is given, and a request now is answered at once.
    broker.replicas.apply_partition_state(TXN, replica_state((1,), 1))
    answer = broker.finish(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, retry)
    codes = [
        p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]
    assert codes == [0]
    assert isinstance(_add_partitions(broker, pid, epoch), Reply)


def test_init_producer_id_before_the_first_producer_id_block_is_a_retriable_error(
    tmp_path: Path,
) -> None:
    broker = Broker(tmp_path, **CLUSTERED, **{"transaction.state.log.num.partitions": "1"})
    try:
        broker.replicas.apply_topic("__transaction_state", uuid.uuid4(), ((1,),), {}, True)
        broker.replicas.apply_partition_state(TXN, ReplicaView(1, 0, (1,), 0, (1,), 1))
        broker.txns.on_leadership(TXN, True)
        answer = broker.call(ApiKey.INIT_PRODUCER_ID, 4, INIT_TX)
        assert answer.error_code == 14  # COORDINATOR_LOAD_IN_PROGRESS: the client retries
    finally:
        broker.close()


def test_a_coordinator_record_wakes_the_fetches_waiting_on_its_partition(broker: Broker) -> None:
    """The answer waits for the followers, so their waiting fetches must hear of the record
    at once: unwoken they would come only after replica.fetch.wait.max.ms (500 ms per
    coordinator answer, a second per transaction)."""
    woken: list[object] = []
    broker.wake_listeners.append(woken.extend)
    outcome, _ = broker.dispatch(ApiKey.INIT_PRODUCER_ID, 4, INIT_TX)
    assert isinstance(outcome, Pending)
    assert TXN in woken
