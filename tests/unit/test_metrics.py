"""The broker's Prometheus metrics, read back from the rendered page with prometheus-client's
parser: requests and errors per API and error name, latency (purgatory waits included),
bytes and messages per topic, duplicates, and one registry per broker."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from oncelog.broker.dispatcher import NoReply, Pending, _count_closes
from oncelog.broker.handlers import CloseConnection
from oncelog.broker.metrics import BrokerMetrics, api_name, error_label
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import FETCH_V, Broker, batch


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    yield b
    b.close()


def page_values(metrics: BrokerMetrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = generate_latest(metrics.registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_kafka_names_for_apis_and_errors() -> None:
    assert api_name(ApiKey.PRODUCE) == "Produce"
    assert api_name(ApiKey.ADD_PARTITIONS_TO_TXN) == "AddPartitionsToTxn"
    assert api_name(ApiKey.OFFSET_FOR_LEADER_EPOCH) == "OffsetForLeaderEpoch"
    assert api_name(9999) == "9999"
    assert error_label(ErrorCode.out_of_order_sequence_number) == "OUT_OF_ORDER_SEQUENCE_NUMBER"
    assert error_label(-12345) == "UNKNOWN_ERROR_CODE_-12345"


def test_every_nested_error_code_is_counted_once() -> None:
    metrics = BrokerMetrics()
    answer = {
        "throttle_time": 0,
        "responses": [
            {
                "name": "t",
                "partition_responses": [
                    {"index": 0, "error_code": ErrorCode.none},
                    {"index": 1, "error_code": ErrorCode.out_of_order_sequence_number},
                    {"index": 2, "error_code": ErrorCode.out_of_order_sequence_number},
                    {"index": 3, "error_code": ErrorCode.corrupt_message},
                ],
            }
        ],
    }
    metrics.record_response(ApiKey.PRODUCE, answer)
    values = page_values(metrics)
    errors = {
        dict(labels)["error"]: v
        for (name, labels), v in values.items()
        if name == "oncelog_request_errors_total"
    }
    assert errors == {"OUT_OF_ORDER_SEQUENCE_NUMBER": 2, "CORRUPT_MESSAGE": 1}
    assert values[("oncelog_requests_total", frozenset({("api", "Produce")}))] == 1


def test_each_broker_has_its_own_registry_and_the_global_one_is_untouched() -> None:
    first, second = BrokerMetrics(), BrokerMetrics()
    first.record_duplicate("t")
    first.record_duplicate("t")
    assert first.duplicate_batches == 2
    assert second.duplicate_batches == 0
    key = ("oncelog_duplicate_batches_total", frozenset({("topic", "t")}))
    assert page_values(first)[key] == 2
    assert key not in page_values(second)
    assert "oncelog_" not in generate_latest(REGISTRY).decode()


def test_produce_counts_requests_bytes_messages_duplicates_and_errors(broker: Broker) -> None:
    broker.create_topic("t")
    pid, epoch = broker.init_producer()
    first = batch([b"a", b"b", b"c"], producer_id=pid, epoch=epoch, sequence=0)
    assert broker.produce("t", 0, first).error_code == 0
    retried = broker.produce("t", 0, first)  # the same batch again: a duplicate
    assert retried.error_code == 0 and retried.base_offset == 0
    gap = batch([b"d"], producer_id=pid, epoch=epoch, sequence=7)
    assert broker.produce("t", 0, gap).error_code == ErrorCode.out_of_order_sequence_number
    missing = broker.produce("t", 5, batch([b"x"]))
    assert missing.error_code == ErrorCode.unknown_topic_or_partition

    assert broker.value("oncelog_requests_total", api="Produce") == 4
    assert broker.value("oncelog_requests_total", api="InitProducerId") == 1
    assert broker.value("oncelog_duplicate_batches_total", topic="t") == 1
    assert broker.metrics.duplicate_batches == 1
    # Only the first append wrote: the duplicate and the refused batches did not.
    assert broker.value("oncelog_bytes_in_total", topic="t") == len(first)
    assert broker.value("oncelog_messages_in_total", topic="t") == 3
    assert (
        broker.value(
            "oncelog_request_errors_total", api="Produce", error="OUT_OF_ORDER_SEQUENCE_NUMBER"
        )
        == 1
    )
    assert (
        broker.value(
            "oncelog_request_errors_total", api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION"
        )
        == 1
    )
    assert broker.value("oncelog_producer_state_entries", topic="t", partition="0") == 1


def test_latency_runs_from_arrival_to_framing(broker: Broker) -> None:
    broker.create_topic("t")
    broker.timer.now = 10.25
    broker.produce("t", 0, batch([b"a"]), received=10.0)  # waited 0.25 s before handling
    assert broker.value("oncelog_request_duration_seconds_count", api="Produce") == 1
    assert broker.value("oncelog_request_duration_seconds_sum", api="Produce") == 0.25
    assert broker.value("oncelog_request_duration_seconds_bucket", api="Produce", le="0.1") == 0
    assert broker.value("oncelog_request_duration_seconds_bucket", api="Produce", le="0.25") == 1


def test_a_long_poll_is_timed_until_its_answer_and_counts_bytes_out(broker: Broker) -> None:
    broker.create_topic("t")
    broker.timer.now = 50.0
    outcome, _ = broker.dispatch(ApiKey.FETCH, FETCH_V, broker.fetch_body("t", 0, max_wait_ms=500))
    assert isinstance(outcome, Pending)  # nothing to read yet: it waits in the purgatory
    assert broker.value("oncelog_requests_total", api="Fetch") is None  # not answered yet
    data = batch([b"hello", b"world"])
    broker.produce("t", 0, data)
    broker.timer.now = 50.4
    answer = broker.finish(ApiKey.FETCH, FETCH_V, outcome)
    assert bytes(answer.responses[0].partitions[0].records) != b""
    assert broker.value("oncelog_requests_total", api="Fetch") == 1
    assert broker.value("oncelog_request_duration_seconds_sum", api="Fetch") == pytest.approx(0.4)
    assert broker.value("oncelog_request_duration_seconds_bucket", api="Fetch", le="0.25") == 0
    assert broker.value("oncelog_request_duration_seconds_bucket", api="Fetch", le="0.5") == 1
    assert broker.value("oncelog_bytes_out_total", topic="t") == len(data)
    assert broker.value("oncelog_replication_bytes_out_total", topic="t") is None


def test_a_fetch_error_is_counted_by_its_kafka_name(broker: Broker) -> None:
    broker.create_topic("t")
    answer = broker.call(ApiKey.FETCH, FETCH_V, broker.fetch_body("t", 99))
    assert answer.responses[0].partitions[0].error_code == ErrorCode.offset_out_of_range
    assert (
        broker.value("oncelog_request_errors_total", api="Fetch", error="OFFSET_OUT_OF_RANGE")
        == 1
    )
    assert broker.value("oncelog_bytes_out_total", topic="t") is None


def test_acks_zero_is_counted_though_nothing_is_answered(broker: Broker) -> None:
    broker.create_topic("t")
    outcome, _ = broker.dispatch(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": 0,
            "timeout": timedelta(seconds=1),
            "topic_data": [
                {"name": "t", "partition_data": [{"index": 0, "records": batch([b"a"])}]}
            ],
        },
    )
    assert isinstance(outcome, NoReply)
    assert broker.value("oncelog_requests_total", api="Produce") == 1
    assert broker.value("oncelog_messages_in_total", topic="t") == 1


def test_fsyncs_are_timed(broker: Broker) -> None:
    broker.create_topic("t")
    broker.produce("t", 0, batch([b"a"]))
    before = broker.value("oncelog_log_flush_duration_seconds_count") or 0
    broker.replicas.partition(TopicPartition("t", 0)).flush()
    assert broker.value("oncelog_log_flush_duration_seconds_count") == before + 1


def test_open_connections_come_from_the_server(broker: Broker) -> None:
    assert broker.value("oncelog_open_connections") == 0
    broker.metrics.count_connections(lambda: 3)
    assert broker.value("oncelog_open_connections") == 3


def test_a_wait_that_ends_by_closing_the_connection_is_counted(broker: Broker) -> None:
    """An answer held for coordinator replication may end in a closed connection instead of
    a response: the request still counts, with its latency."""
    delayed = Delayed(lambda force: CloseConnection("not replicated") if force else None, 0, ())
    broker.timer.now = 1.0
    _count_closes(delayed, ApiKey.JOIN_GROUP, 0.5, broker.metrics)
    assert delayed.try_complete(False) is None
    assert broker.value("oncelog_requests_total", api="JoinGroup") is None
    assert isinstance(delayed.try_complete(True), CloseConnection)
    assert broker.value("oncelog_requests_total", api="JoinGroup") == 1
    assert broker.value("oncelog_request_duration_seconds_sum", api="JoinGroup") == 0.5
