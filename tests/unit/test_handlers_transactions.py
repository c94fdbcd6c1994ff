"""The transaction APIs' handlers on the in-process broker: a producer id, a transaction on a
topic and a group's offsets, committed or aborted, and described and listed meanwhile; a
marker written by WriteTxnMarkers."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.add_offsets_to_txn.v3.response import AddOffsetsToTxnResponse
from kio.schema.add_partitions_to_txn.v3.response import AddPartitionsToTxnResponse
from kio.schema.describe_transactions.v0.response import DescribeTransactionsResponse
from kio.schema.end_txn.v3.response import EndTxnResponse
from kio.schema.init_producer_id.v4.response import InitProducerIdResponse
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.list_transactions.v1.response import ListTransactionsResponse
from kio.schema.offset_fetch.v7.response import OffsetFetchResponse
from kio.schema.txn_offset_commit.v3.response import TxnOffsetCommitResponse
from kio.schema.write_txn_markers.v1.response import WriteTxnMarkersResponse

from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from tests.harness.in_process import InProcessBroker, batch, build_broker, covers

TXN = "tx-1"
TOPIC = "orders"
GROUP = "g1"
LATEST = -1
READ_COMMITTED = 1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = build_broker(tmp_path)
    b.create_topic(TOPIC)
    yield b
    b.close()


def init(broker: InProcessBroker, txn_id: str | None = TXN) -> InitProducerIdResponse:
    return broker.ask(
        InitProducerIdResponse,
        {
            "transactional_id": txn_id,
            "transaction_timeout": timedelta(seconds=60),
            "producer_id": -1,
            "producer_epoch": -1,
        },
        wait=True,
    )


def add_partitions(broker: InProcessBroker, pid: int, epoch: int, topic: str = TOPIC) -> int:
    answer = broker.ask(
        AddPartitionsToTxnResponse,
        {
            "v3_and_below_transactional_id": TXN,
            "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic, "partitions": [0]}],
        },
        wait=True,
    )
    (topic_result,) = answer.results_by_topic_v3_and_below
    return int(topic_result.results_by_partition[0].partition_error_code)


def end(broker: InProcessBroker, pid: int, epoch: int, committed: bool) -> EndTxnResponse:
    return broker.ask(
        EndTxnResponse,
        {
            "transactional_id": TXN,
            "producer_id": pid,
            "producer_epoch": epoch,
            "committed": committed,
        },
        wait=True,
    )


def last_stable_offset(broker: InProcessBroker) -> int:
    answer = broker.ask(
        ListOffsetsResponse,
        {
            "replica_id": -1,
            "isolation_level": READ_COMMITTED,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": LATEST}]}
            ],
        },
    )
    return int(answer.topics[0].partitions[0].offset)


def describe(broker: InProcessBroker) -> str:
    answer = broker.ask(DescribeTransactionsResponse, {"transactional_ids": [TXN]})
    (state,) = answer.transaction_states
    assert state.error_code == ErrorCode.none, state
    return state.transaction_state


@covers(ApiKey.INIT_PRODUCER_ID)
def test_init_producer_id_transactional_and_idempotent(broker: InProcessBroker) -> None:
    first = init(broker)
    assert first.error_code == ErrorCode.none
    assert (first.producer_id >= 0, first.producer_epoch) == (True, 0)
    again = init(broker)
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
    idempotent = init(broker, None)
    assert idempotent.error_code == ErrorCode.none
    assert idempotent.producer_id not in (-1, first.producer_id)


@covers(ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.END_TXN, ApiKey.DESCRIBE_TRANSACTIONS)
def test_a_committed_transaction_is_read_committed(broker: InProcessBroker) -> None:
    ids = init(broker)
    pid, epoch = ids.producer_id, ids.producer_epoch
    assert add_partitions(broker, pid, epoch) == ErrorCode.none
    assert describe(broker) == "Ongoing"
    records = batch([b"a", b"b"], producer_id=pid, epoch=epoch, sequence=0, transactional=True)
    produced = broker.produce(TOPIC, 0, records, transactional_id=TXN)
    assert produced.error_code == ErrorCode.none
    assert last_stable_offset(broker) == 0  # held back by the open transaction
    assert end(broker, pid, epoch, True).error_code == ErrorCode.none
    assert last_stable_offset(broker) == 3  # two records and the commit marker
    assert describe(broker) == "CompleteCommit"


@covers(ApiKey.ADD_PARTITIONS_TO_TXN)
def test_add_partitions_of_an_unknown_topic(broker: InProcessBroker) -> None:
    ids = init(broker)
    code = add_partitions(broker, ids.producer_id, ids.producer_epoch, "nowhere")
    assert code == ErrorCode.unknown_topic_or_partition


@covers(ApiKey.END_TXN)
def test_end_txn_with_a_stale_epoch_is_fenced(broker: InProcessBroker) -> None:
    ids = init(broker)
    init(broker)  # bumps the epoch
    answer = end(broker, ids.producer_id, ids.producer_epoch, False)
    assert answer.error_code == ErrorCode.producer_fenced


@covers(ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.TXN_OFFSET_COMMIT)
def test_transactional_offsets_count_once_committed(broker: InProcessBroker) -> None:
    ids = init(broker)
    pid, epoch = ids.producer_id, ids.producer_epoch
    added = broker.ask(
        AddOffsetsToTxnResponse,
        {"transactional_id": TXN, "producer_id": pid, "producer_epoch": epoch, "group_id": GROUP},
        wait=True,
    )
    assert added.error_code == ErrorCode.none
    committed = broker.ask(
        TxnOffsetCommitResponse,
        {
            "transactional_id": TXN,
            "group_id": GROUP,
            "producer_id": pid,
            "producer_epoch": epoch,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": TOPIC,
                    "partitions": [
                        {"partition_index": 0, "committed_offset": 5, "committed_metadata": ""}
                    ],
                }
            ],
        },
        wait=True,
    )
    assert committed.topics[0].partitions[0].error_code == ErrorCode.none

    def offset() -> int:
        answer = broker.ask(
            OffsetFetchResponse,
            {"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]},
        )
        return int(answer.topics[0].partitions[0].committed_offset)

    assert offset() == -1
    assert end(broker, pid, epoch, True).error_code == ErrorCode.none
    assert offset() == 5


@covers(ApiKey.LIST_TRANSACTIONS)
def test_list_transactions_filters_by_state(broker: InProcessBroker) -> None:
    ids = init(broker)
    add_partitions(broker, ids.producer_id, ids.producer_epoch)

    def listed(*states: str) -> list[str]:
        answer = broker.ask(
            ListTransactionsResponse,
            {"state_filters": list(states), "producer_id_filters": [], "duration_filter": -1},
        )
        assert answer.error_code == ErrorCode.none
        return [t.transactional_id for t in answer.transaction_states]

    assert listed() == [TXN]
    assert listed("Ongoing") == [TXN]
    assert listed("CompleteAbort") == []


@covers(ApiKey.WRITE_TXN_MARKERS)
def test_write_txn_markers_ends_a_producers_transaction(broker: InProcessBroker) -> None:
    """The markers a coordinator sends (here: an abort of an open transaction's data)."""
    ids = init(broker)
    pid = ids.producer_id
    add_partitions(broker, pid, ids.producer_epoch)
    records = batch([b"x"], producer_id=pid, epoch=0, sequence=0, transactional=True)
    assert broker.produce(TOPIC, 0, records, transactional_id=TXN).error_code == ErrorCode.none
    assert last_stable_offset(broker) == 0
    answer = broker.ask(
        WriteTxnMarkersResponse,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
        wait=True,
    )
    (marker,) = answer.markers
    assert marker.producer_id == pid
    assert marker.topics[0].partitions[0].error_code == ErrorCode.none
    assert last_stable_offset(broker) == 2
