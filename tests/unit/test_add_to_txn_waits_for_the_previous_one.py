"""A producer's next transaction waits for its last one's completion instead of being told
CONCURRENT_TRANSACTIONS (which librdkafka retries only after 20 ms, the others after
retry.backoff.ms): AddPartitionsToTxn, AddOffsetsToTxn and InitProducerId are held until the
completion is stored, then answered as a retry would be, once their own record is
replicated."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.assembly import ServerHooks
from oncelog.broker.dispatcher import Pending, Reply
from oncelog.coordinator.txn.state import TxnState
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import CLUSTERED, Broker, replica_state

TXN = TopicPartition("__transaction_state", 0)
DATA = TopicPartition("data", 0)
ADD_PARTITIONS_V = 3
ADD_OFFSETS_V = 3
END_TXN_V = 3


class Cluster:
    """One broker of a cluster leading the transaction log and `data`, whose markers to the
    partitions' leaders are held here until the test says they were written."""

    def __init__(self, root: Path) -> None:
        self.sent: list[str] = []
        hooks = ServerHooks(send_markers=lambda txn_id, *_: self.sent.append(txn_id))
        self.broker = Broker(
            root, hooks, **CLUSTERED, **{"transaction.state.log.num.partitions": "1"}
        )
        broker = self.broker
        broker.lead("__transaction_state", internal=True)
        broker.lead("data")
        # The followers are out of the ISR: the leader alone commits, answers come at once.
        broker.replicas.apply_partition_state(TXN, replica_state((1,), 1))
        broker.txns.on_leadership(TXN, True)
        broker.replicas.producer_ids.add_block(1000, 1000)
        self.woken: list[object] = []
        broker.wake_listeners.append(self.woken.extend)
        self.pid, self.epoch = broker.init_producer("tx")

    def add_partitions(self) -> Any:
        return self.broker.add_partitions("tx", self.pid, self.epoch, "data")

    def add_offsets(self) -> Any:
        outcome, _ = self.broker.dispatch(
            ApiKey.ADD_OFFSETS_TO_TXN,
            ADD_OFFSETS_V,
            {
                "transactional_id": "tx",
                "producer_id": self.pid,
                "producer_epoch": self.epoch,
                "group_id": "g",
            },
        )
        return outcome

    def commit(self) -> None:
        """A transaction on `data`, committed: answered once PrepareCommit is stored, with its
        markers still on their way."""
        added = self.add_partitions()
        assert isinstance(added, Reply)
        answer = self.broker.call(
            ApiKey.END_TXN,
            END_TXN_V,
            {
                "transactional_id": "tx",
                "producer_id": self.pid,
                "producer_epoch": self.epoch,
                "committed": True,
            },
        )
        assert answer.error_code == 0
        assert self.state() == TxnState.PREPARE_COMMIT
        assert self.sent == ["tx"]

    def state(self) -> TxnState:
        return self.broker.txns.coordinator.transactions["tx"].state

    def markers_written(self) -> None:
        self.woken.clear()
        self.broker.txns.markers_sent("tx", True)
        assert self.state() == TxnState.COMPLETE_COMMIT
        assert TXN in self.woken  # the completion wakes what waits on the transaction

    def answer(self, api_key: int, version: int, pending: Pending) -> Any:
        response = pending.delayed.try_complete(False)
        assert response is not None
        return self.broker.decode(api_key, version, pending.finish(response))


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.broker.close()


def _codes(answer: Any) -> list[int]:
    return [
        p.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for p in t.results_by_partition
    ]


def test_add_partitions_waits_for_the_markers_and_then_opens_the_next_transaction(
    cluster: Cluster,
) -> None:
    cluster.commit()
    held = cluster.add_partitions()
    assert isinstance(held, Pending)  # not CONCURRENT_TRANSACTIONS
    assert held.delayed.keys == (TXN,)
    assert held.delayed.try_complete(False) is None  # still completing
    assert cluster.state() == TxnState.PREPARE_COMMIT

    cluster.markers_written()
    answer = cluster.answer(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, held)
    assert _codes(answer) == [ErrorCode.none]
    meta = cluster.broker.txns.coordinator.transactions["tx"]
    assert meta.state == TxnState.ONGOING and meta.partitions == frozenset({DATA})


def test_a_wait_that_runs_out_answers_concurrent_transactions(cluster: Cluster) -> None:
    cluster.commit()
    held = cluster.add_partitions()
    assert isinstance(held, Pending)
    answer = cluster.broker.finish(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, held)
    assert _codes(answer) == [ErrorCode.concurrent_transactions]  # the client retries
    assert cluster.state() == TxnState.PREPARE_COMMIT  # nothing was written


def test_the_released_answer_waits_until_its_record_is_replicated(cluster: Cluster) -> None:
    cluster.commit()
    held = cluster.add_partitions()
    assert isinstance(held, Pending)
    # The followers are back in the ISR: the Ongoing record needs them now.
    cluster.broker.replicas.apply_partition_state(TXN, replica_state((1, 2, 3), 2))
    cluster.markers_written()
    assert held.delayed.try_complete(False) is None
    assert cluster.state() == TxnState.ONGOING  # written, not yet replicated

    cluster.broker.replicas.apply_partition_state(TXN, replica_state((1,), 3))
    answer = cluster.answer(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, held)
    assert _codes(answer) == [ErrorCode.none]


def test_add_offsets_waits_for_the_markers_too(cluster: Cluster) -> None:
    cluster.commit()
    held = cluster.add_offsets()
    assert isinstance(held, Pending)
    assert held.delayed.try_complete(False) is None
    cluster.markers_written()
    answer = cluster.answer(ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_V, held)
    assert answer.error_code == ErrorCode.none
    offsets = cluster.broker.txns.coordinator.transactions["tx"].partitions
    assert {tp.topic for tp in offsets} == {"__consumer_offsets"}


def test_a_deposed_coordinator_answers_the_waiting_request_not_coordinator(
    cluster: Cluster,
) -> None:
    cluster.commit()
    held = cluster.add_partitions()
    assert isinstance(held, Pending)
    cluster.woken.clear()
    cluster.broker.txns.on_leadership(TXN, False)
    assert TXN in cluster.woken  # tried again at once, not when its wait runs out
    answer = cluster.answer(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, held)
    assert _codes(answer) == [ErrorCode.not_coordinator]


def test_an_answer_that_needs_no_wait_is_given_at_once(cluster: Cluster) -> None:
    assert isinstance(cluster.add_partitions(), Reply)
    assert isinstance(cluster.add_offsets(), Reply)


def _init_producer(broker: Broker) -> Any:
    outcome, _ = broker.dispatch(
        ApiKey.INIT_PRODUCER_ID,
        4,
        {
            "transactional_id": "tx",
            "transaction_timeout": timedelta(seconds=60),
            "producer_id": -1,
            "producer_epoch": -1,
        },
    )
    return outcome


def test_a_restarted_producer_waits_while_its_open_transaction_is_aborted(
    cluster: Cluster,
) -> None:
    assert isinstance(cluster.add_partitions(), Reply)  # a transaction left open
    held = _init_producer(cluster.broker)  # a new instance fences it: abort, then a new epoch
    assert isinstance(held, Pending)
    assert cluster.state() == TxnState.PREPARE_ABORT
    assert held.delayed.try_complete(False) is None
    cluster.broker.txns.markers_sent("tx", True)
    answer = cluster.answer(ApiKey.INIT_PRODUCER_ID, 4, held)
    assert answer.error_code == ErrorCode.none
    # One bump fenced the old instance's transaction, the second is the new session's.
    assert (answer.producer_id, answer.producer_epoch) == (cluster.pid, cluster.epoch + 2)
    assert cluster.state() == TxnState.EMPTY


def test_a_single_broker_fences_and_answers_in_one_round(tmp_path: Path) -> None:
    broker = Broker(tmp_path)
    try:
        broker.create_topic("data")
        pid, epoch = broker.init_producer("tx")
        outcome = broker.add_partitions("tx", pid, epoch, "data")
        assert isinstance(outcome, Reply)
        added = broker.decode(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTITIONS_V, outcome.data)
        assert _codes(added) == [ErrorCode.none]
        # Its markers are written locally while the request is handled: no
        # CONCURRENT_TRANSACTIONS round for the client to retry.
        outcome = _init_producer(broker)
        assert isinstance(outcome, Reply)
        answer = broker.decode(ApiKey.INIT_PRODUCER_ID, 4, outcome.data)
        assert (answer.error_code, answer.producer_epoch) == (ErrorCode.none, epoch + 2)
    finally:
        broker.close()


def test_a_retried_end_txn_waits_for_its_decision_to_complete(cluster: Cluster) -> None:
    cluster.commit()
    outcome, _ = cluster.broker.dispatch(
        ApiKey.END_TXN,
        END_TXN_V,
        {
            "transactional_id": "tx",
            "producer_id": cluster.pid,
            "producer_epoch": cluster.epoch,
            "committed": True,
        },
    )
    assert isinstance(outcome, Pending)  # the same decision, still completing
    assert outcome.delayed.try_complete(False) is None
    cluster.markers_written()
    answer = cluster.answer(ApiKey.END_TXN, END_TXN_V, outcome)
    assert answer.error_code == ErrorCode.none  # the retry of a completed commit
