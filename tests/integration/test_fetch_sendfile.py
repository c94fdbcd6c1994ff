"""Large Fetch answers leave their batches in the segment files and go out with sendfile over
plain TCP: real clients read every record back, a reader too slow to take a whole answer at
once gets the same bytes (the rest queued after a partial sendfile), and a request pipelined
behind such a Fetch is answered after it, intact."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition

from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.protocol.records.batch import compute_crc, iter_batches
from tests.broker_process import BrokerProcess
from tests.integration.helpers import (
    confluent_read,
    create_topic,
    produce_all,
    producer_for,
    wait_until,
)
from tests.integration.rawclient import (
    API_VERSIONS,
    FETCH,
    RawClient,
    api_versions_body,
    decode_response,
    request,
)

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 1500  # x ~1 KB: each partition's answer is well above the region threshold


def _fill(broker: BrokerProcess, topic: str) -> dict[int, list[bytes]]:
    create_topic(broker.bootstrap, topic, PARTITIONS)
    messages = [
        (b"k%d" % i, (b"%08d" % i) * 128, None) for i in range(PARTITIONS * PER_PARTITION)
    ]
    producer = producer_for(
        broker, **{"enable.idempotence": True, "linger.ms": 20, "batch.size": 65536}
    )
    acked = produce_all(producer, topic, messages, partition_of=lambda i: i % PARTITIONS)
    by_partition: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for rec in sorted(acked, key=lambda r: (r.partition, r.offset)):
        assert rec.value is not None
        by_partition[rec.partition].append(rec.value)
    return by_partition


def test_real_clients_read_large_fetches_whole(broker: BrokerProcess) -> None:
    sent = _fill(broker, "big")
    ends = {p: len(v) for p, v in sent.items()}
    got = confluent_read(broker.bootstrap, "big", ends, **{"fetch.max.bytes": 8 << 20})
    assert {p: [r.value for r in recs] for p, recs in got.items()} == sent

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 << 20,
        fetch_max_bytes=16 << 20,
        consumer_timeout_ms=5000,
    )
    try:
        parts = [KTopicPartition("big", p) for p in range(PARTITIONS)]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        read: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while sum(map(len, read.values())) < sum(ends.values()):
            assert time.monotonic() < deadline, {p: len(v) for p, v in read.items()}
            for tp, records in consumer.poll(timeout_ms=500).items():
                read[tp.partition].extend(r.value for r in records)
        assert read == sent
    finally:
        consumer.close()


def _fetch_body(topic: str, max_bytes: int) -> bytes:
    body: dict[str, Any] = {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                    for p in range(PARTITIONS)
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return encode_entity(build(request_class(FETCH, 12), body))


def _records(response: Any) -> dict[int, bytes]:
    assert response.error_code == 0
    out = {}
    for p in response.responses[0].partitions:
        assert p.error_code == 0
        out[int(p.partition_index)] = bytes(p.records or b"")
    return out


def test_a_slow_reader_gets_the_same_bytes_in_order(broker: BrokerProcess) -> None:
    _fill(broker, "slow")
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    with RawClient(port) as fast:
        expected = _records(fast.call(FETCH, 12, _fetch_body("slow", 8 << 20)))
    assert all(len(v) > 1_000_000 for v in expected.values())
    for data in expected.values():
        walked = list(iter_batches(data))
        assert sum(h.size for _, h in walked) == len(data)
        assert all(compute_crc(data, pos, h.size) == h.crc for pos, h in walked)

    # A small receive buffer, and nothing read for a while: the broker's sendfile stops
    # short and the rest of the answer waits, with the next answer behind it.
    with _slow_client(port) as slow:
        slow.send(
            request(FETCH, 12, _fetch_body("slow", 8 << 20), correlation_id=1)
            + request(API_VERSIONS, 3, api_versions_body(), correlation_id=2)
        )
        time.sleep(1.0)
        first = slow.recv_frame()
        assert struct.unpack_from(">i", first)[0] == 1
        _, fetched = decode_response(FETCH, 12, first)
        assert _records(fetched) == expected
        second = slow.recv_frame()
        got_id, versions = decode_response(API_VERSIONS, 3, second)
        assert got_id == 2 and versions.error_code == 0


def _slow_client(port: int) -> RawClient:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(30)
    sock.connect(("127.0.0.1", port))
    client = RawClient.__new__(RawClient)
    client.sock = sock
    return client


def test_an_answer_outlives_its_deleted_segments(broker: BrokerProcess) -> None:
    """The part of an answer still waiting for a slow reader is read from the segment files
    it was cut from, even after the topic was deleted (its files closed and removed)."""
    _fill(broker, "gone")
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    with RawClient(port) as fast:
        expected = _records(fast.call(FETCH, 12, _fetch_body("gone", 8 << 20)))
    with _slow_client(port) as slow:
        slow.send(request(FETCH, 12, _fetch_body("gone", 8 << 20), correlation_id=3))
        time.sleep(0.5)
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        admin.delete_topics(["gone"], operation_timeout=10)["gone"].result(10)
        wait_until(
            lambda: "gone" not in admin.list_topics(timeout=5).topics, 10, "topic deleted"
        )
        got_id, fetched = decode_response(FETCH, 12, slow.recv_frame())
        assert got_id == 3
        assert _records(fetched) == expected
        assert broker.proc.poll() is None


def test_fetch_max_bytes_caps_a_consumer_answer(
    broker_factory: type[BrokerProcess],
) -> None:
    """The broker's fetch.max.bytes bounds an answer whatever max_bytes the consumer asks
    for (KIP-74's whole-batch rule aside), and consumers still read everything."""
    broker = broker_factory(overrides={"fetch.max.bytes": "200000"}).start()
    sent = _fill(broker, "capped")
    port = int(broker.bootstrap.rsplit(":", 1)[1])
    with RawClient(port) as client:
        answer = _records(client.call(FETCH, 12, _fetch_body("capped", 8 << 20)))
    total = sum(map(len, answer.values()))
    assert 0 < total <= 200_000, {p: len(v) for p, v in answer.items()}
    ends = {p: len(v) for p, v in sent.items()}
    got = confluent_read(broker.bootstrap, "capped", ends)
    assert {p: [r.value for r in recs] for p, recs in got.items()} == sent
