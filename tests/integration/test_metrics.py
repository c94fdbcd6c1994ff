"""The broker's /metrics page over its HTTP listener (http.listeners on port 0), read with
urllib as a Prometheus scraper would and parsed whole by prometheus-client's parser.

A real retry: confluent-kafka's idempotent producer talks through a proxy (the broker
advertises it) that drops the first Produce response and closes the connection, so
librdkafka sends the same batch again and the broker answers it as a duplicate. A real
error: a raw Produce to a partition that does not exist. Both counters move on the page."""

from __future__ import annotations

import re
import time
import urllib.request
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from oncelog.client.connection import Connection
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from oncelog.protocol.registry import ApiKey
from tests.broker_process import BrokerProcess
from tests.integration.proxy import DroppingProxy

pytestmark = pytest.mark.integration

TOPIC = "metered"
MESSAGES = 20

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def metrics_url(broker: BrokerProcess) -> str:
    match = re.search(r", console (http://127\.0\.0\.1:\d+/)$", broker.ready_line)
    assert match, broker.ready_line
    return match.group(1) + "metrics"


def scrape(url: str) -> Samples:
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):  # the whole page must parse
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, frozenset(labels.items())))


def produce_to_missing_partition(bootstrap: str) -> int:
    host, port = bootstrap.split(":")
    now = int(time.time() * 1000)
    batch = build_batch(
        base_offset=0,
        records=encode_record(offset_delta=0, key=None, value=b"lost"),
        record_count=1,
        last_offset_delta=0,
        base_timestamp=now,
        max_timestamp=now,
    )
    with Connection(host, int(port)) as conn:
        answer = conn.call(
            ApiKey.PRODUCE,
            (3, 9),
            {
                "transactional_id": None,
                "acks": 1,
                "timeout": timedelta(seconds=5),
                "topic_data": [
                    {"name": TOPIC, "partition_data": [{"index": 7, "records": batch}]}
                ],
            },
        )
    return int(answer.responses[0].partition_responses[0].error_code)


def test_metrics_page_counts_a_retried_duplicate_and_an_error_code(
    broker_factory: type[BrokerProcess],
) -> None:
    with DroppingProxy(drop_share=1.0, seed=14, close_after_drop=True, max_drops=1) as proxy:
        broker = broker_factory(
            "data",
            {
                "http.listeners": "http://127.0.0.1:0",
                "advertised.listeners": f"PLAINTEXT://{proxy.address}",
            },
        ).start()
        proxy.start(broker.port)
        url = metrics_url(broker)
        before = scrape(url)
        assert value(before, "oncelog_active_controller") == 1
        assert value(before, "oncelog_duplicate_batches_total", topic=TOPIC) is None

        admin = AdminClient({"bootstrap.servers": proxy.address})
        admin.create_topics([NewTopic(TOPIC, num_partitions=1)])[TOPIC].result(timeout=30)
        producer = Producer(
            {
                "bootstrap.servers": proxy.address,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 50,
                "retry.backoff.ms": 50,
                "reconnect.backoff.ms": 20,
                "reconnect.backoff.max.ms": 200,
            }
        )
        delivered: list[int] = []
        for i in range(MESSAGES):
            producer.produce(
                TOPIC,
                value=f"m{i}".encode(),
                partition=0,
                on_delivery=lambda err, msg: delivered.append(0 if err is None else 1),
            )
        assert producer.flush(60) == 0
        stats = proxy.snapshot()
        assert stats.closed_after_drop == 1, stats  # one response lost, its connection closed
        assert delivered == [0] * MESSAGES

        code = produce_to_missing_partition(broker.bootstrap)
        assert code == 3  # UNKNOWN_TOPIC_OR_PARTITION

        after = scrape(url)
    assert (value(after, "oncelog_duplicate_batches_total", topic=TOPIC) or 0) >= 1
    assert (
        value(
            after,
            "oncelog_request_errors_total",
            api="Produce",
            error="UNKNOWN_TOPIC_OR_PARTITION",
        )
        == 1
    )
    # Every message was written once: the retried batch added nothing.
    assert value(after, "oncelog_messages_in_total", topic=TOPIC) == MESSAGES
    assert value(after, "oncelog_log_end_offset", topic=TOPIC, partition="0") == MESSAGES
    assert value(after, "oncelog_partition_high_watermark", topic=TOPIC, partition="0") == MESSAGES
    assert (value(after, "oncelog_bytes_in_total", topic=TOPIC) or 0) > 0
    produce_requests = value(after, "oncelog_requests_total", api="Produce") or 0
    assert produce_requests >= 3  # the first send, its retry, the raw one
    assert value(after, "oncelog_request_duration_seconds_count", api="Produce") == (
        produce_requests
    )
    assert (value(after, "oncelog_requests_total", api="ApiVersions") or 0) >= 2
    assert value(after, "oncelog_producer_state_entries", topic=TOPIC, partition="0") == 1
    assert (value(after, "oncelog_open_connections") or 0) >= 1
    assert value(after, "oncelog_under_replicated_partitions") == 0
    assert value(after, "oncelog_offline_partitions") == 0
