"""The data APIs' handlers on the in-process broker: records produced are fetched back, and
their offsets listed, deleted below a point, looked up by leader epoch and by producer."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.delete_records.v2.response import DeleteRecordsResponse
from kio.schema.describe_producers.v0.response import DescribeProducersResponse
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.offset_for_leader_epoch.v4.response import OffsetForLeaderEpochResponse
from kio.schema.produce.v9.response import ProduceResponse

from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from tests.harness.in_process import InProcessBroker, batch, build_broker, covers

TOPIC = "orders"
EARLIEST, LATEST = -2, -1


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = build_broker(tmp_path)
    b.create_topic(TOPIC)
    yield b
    b.close()


def produce(broker: InProcessBroker, records: bytes, topic: str = TOPIC) -> ProduceResponse:
    return broker.ask(
        ProduceResponse,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": timedelta(seconds=5),
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )


def list_offset(broker: InProcessBroker, timestamp: int, topic: str = TOPIC) -> tuple[int, int]:
    answer = broker.ask(
        ListOffsetsResponse,
        {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "timestamp": timestamp}]}
            ],
        },
    )
    partition = answer.topics[0].partitions[0]
    return int(partition.error_code), int(partition.offset)


@covers(ApiKey.PRODUCE)
def test_produce_appends_at_the_log_end(broker: InProcessBroker) -> None:
    first = produce(broker, batch([b"a", b"b"])).responses[0].partition_responses[0]
    second = produce(broker, batch([b"c"])).responses[0].partition_responses[0]
    assert (first.error_code, first.base_offset) == (ErrorCode.none, 0)
    assert (second.error_code, second.base_offset) == (ErrorCode.none, 2)


@covers(ApiKey.PRODUCE)
def test_produce_to_an_unknown_topic(broker: InProcessBroker) -> None:
    answer = produce(broker, batch([b"a"]), "nowhere")
    assert answer.responses[0].partition_responses[0].error_code == (
        ErrorCode.unknown_topic_or_partition
    )


@covers(ApiKey.FETCH)
def test_fetch_reads_what_was_produced(broker: InProcessBroker) -> None:
    produce(broker, batch([b"a", b"b"]))
    answer = broker.ask(FetchResponse, broker.fetch_body(TOPIC, 0))
    assert answer.error_code == ErrorCode.none
    partition = answer.responses[0].partitions[0]
    assert (partition.error_code, partition.high_watermark) == (ErrorCode.none, 2)
    assert partition.records is not None and b"a" in bytes(partition.records)
    past = broker.ask(FetchResponse, broker.fetch_body(TOPIC, 5))
    assert past.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range


@covers(ApiKey.LIST_OFFSETS)
def test_list_offsets_earliest_and_latest(broker: InProcessBroker) -> None:
    produce(broker, batch([b"a", b"b", b"c"]))
    assert list_offset(broker, EARLIEST) == (ErrorCode.none, 0)
    assert list_offset(broker, LATEST) == (ErrorCode.none, 3)
    assert list_offset(broker, LATEST, "nowhere")[0] == ErrorCode.unknown_topic_or_partition


@covers(ApiKey.DELETE_RECORDS)
def test_delete_records_moves_the_log_start(broker: InProcessBroker) -> None:
    produce(broker, batch([b"a", b"b", b"c"]))
    answer = broker.ask(
        DeleteRecordsResponse,
        {
            "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 2}]}],
            "timeout": timedelta(seconds=5),
        },
    )
    partition = answer.topics[0].partitions[0]
    assert (partition.error_code, partition.low_watermark) == (ErrorCode.none, 2)
    assert list_offset(broker, EARLIEST) == (ErrorCode.none, 2)


@covers(ApiKey.OFFSET_FOR_LEADER_EPOCH)
def test_offset_for_leader_epoch_ends_at_the_log_end(broker: InProcessBroker) -> None:
    produce(broker, batch([b"a", b"b"]))

    def ask(topic: str) -> tuple[int, int, int]:
        answer = broker.ask(
            OffsetForLeaderEpochResponse,
            {
                "replica_id": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}
                        ],
                    }
                ],
            },
        )
        p = answer.topics[0].partitions[0]
        return int(p.error_code), int(p.leader_epoch), int(p.end_offset)

    assert ask(TOPIC) == (ErrorCode.none, 0, 2)
    assert ask("nowhere")[0] == ErrorCode.unknown_topic_or_partition


@covers(ApiKey.DESCRIBE_PRODUCERS)
def test_describe_producers_names_an_idempotent_producer(broker: InProcessBroker) -> None:
    pid, epoch = broker.init_producer()
    produced = produce(broker, batch([b"a"], producer_id=pid, epoch=epoch, sequence=0))
    assert produced.responses[0].partition_responses[0].error_code == ErrorCode.none
    answer = broker.ask(
        DescribeProducersResponse, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]}
    )
    partition = answer.topics[0].partitions[0]
    assert partition.error_code == ErrorCode.none
    assert [(p.producer_id, p.last_sequence) for p in partition.active_producers] == [(pid, 0)]
