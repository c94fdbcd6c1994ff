"""What clients can make the broker hold in requests it has not handled yet.

Kafka reads one request per connection at a time, and `queued.max.request.bytes` (its memory
pool) caps the request bytes of all connections. Requests only wait here when something holds
the connection's turn: a Fetch long-polling in front of them (as below), or a client that does
not read its answers. Each case sends that Fetch, then a stream of Produce requests on the
same connection, and checks while the Fetch waits what the broker holds (its RSS and the
`oncelog_request_memory_used_bytes` gauge), then that every request is answered in order
once the Fetch returns and that the log holds each batch exactly once.
"""

from __future__ import annotations

import datetime
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i32Timedelta, i64

from oncelog.protocol.codec import encode_entity
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from tests.broker_process import BrokerProcess
from tests.integration import helpers
from tests.integration.rawclient import (
    FETCH,
    PRODUCE,
    RawClient,
    decode_response,
    produce_body,
    request,
    status_kb,
)
from tests.integration.test_metrics import metrics_url, scrape, value
from tests.integration.test_startup import one_line, serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

MIB = 1 << 20
#: How long the Fetch in front of the Produce requests waits (its max_wait).
FETCH_WAIT_MS = 4000


def create_topic(proc: BrokerProcess) -> str:
    name = f"held-{uuid.uuid4().hex[:10]}"
    helpers.create_topic(proc.bootstrap, name, 1)
    return name


def fetch_body(topic: str, offset: int) -> bytes:
    """Fetch v4 at `offset` (the log end): it waits its whole max_wait for one byte."""
    entity = FetchRequest(
        replica_id=BrokerId(-1),
        max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=FETCH_WAIT_MS)),
        min_bytes=i32(1),
        max_bytes=i32(MIB),
        isolation_level=i8(0),
        topics=(
            FetchTopic(
                topic=TopicName(topic),
                partitions=(
                    FetchPartition(
                        partition=i32(0), fetch_offset=i64(offset), partition_max_bytes=i32(MIB)
                    ),
                ),
            ),
        ),
    )
    return encode_entity(entity)


def produce_request(topic: str, value_bytes: int, correlation_id: int) -> bytes:
    """One acks=1 Produce of one record of `value_bytes`."""
    now = int(time.time() * 1000)
    records = encode_record(offset_delta=0, key=None, value=b"v" * value_bytes)
    batch = build_batch(
        base_offset=0,
        records=records,
        record_count=1,
        last_offset_delta=0,
        base_timestamp=now,
        max_timestamp=now,
    )
    body = produce_body({topic: [(0, batch)]}, acks=1)
    return request(PRODUCE, 9, body, correlation_id)


class Pipeline:
    """A Fetch at the log end, then `count` Produce requests, written by a thread as fast as
    the broker takes them; the answers are read only when `answers` is called."""

    def __init__(self, proc: BrokerProcess, topic: str, count: int, value_bytes: int) -> None:
        self.client = RawClient(proc.port, timeout=30)
        self.sock = self.client.sock
        self.count = count
        data = request(FETCH, 4, fetch_body(topic, 0), 1) + b"".join(
            produce_request(topic, value_bytes, 2 + i) for i in range(count)
        )
        self.total = len(data)
        self.sent = 0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._send, args=(data,), daemon=True)
        self._thread.start()

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while self.sent < len(view):
                self.sent += self.sock.send(view[self.sent : self.sent + 64 * 1024])
        except OSError as exc:
            self.error = exc

    def answers(self) -> list[int]:
        """Read every answer in order; the Produce answers' error codes."""
        codes = []
        for correlation_id in range(1, self.count + 2):
            payload = self.client.recv_frame()
            api = FETCH if correlation_id == 1 else PRODUCE
            got, response = decode_response(api, 4 if api == FETCH else 9, payload)
            assert got == correlation_id
            if api == PRODUCE:
                codes.append(int(response.responses[0].partition_responses[0].error_code))
        self._thread.join(30)
        assert self.error is None and self.sent == self.total
        return codes

    def close(self) -> None:
        self.client.close()


def log_end(proc: BrokerProcess, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "ends"})
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])
    finally:
        consumer.close()


def rss_kb(proc: BrokerProcess) -> int:
    assert proc.proc is not None
    return status_kb(proc.proc.pid)


def settle(pipelines: list[Pipeline], seconds: float = 1.5) -> None:
    """Wait until the writers have stopped getting anywhere (the broker stopped reading)."""
    deadline = time.monotonic() + seconds
    last = -1
    while time.monotonic() < deadline:
        now = sum(p.sent for p in pipelines)
        if now == last:
            return
        last = now
        time.sleep(0.3)


def test_one_connection_holds_at_most_about_one_request_limit_behind_a_waiting_fetch(
    broker_factory: type[BrokerProcess],
) -> None:
    limit = 4 * MIB
    proc = broker_factory(
        "one",
        {"socket.request.max.bytes": str(limit), "http.listeners": "http://127.0.0.1:0"},
    ).start()
    topic = create_topic(proc)
    url = metrics_url(proc)
    rss_before = rss_kb(proc)
    count = 120  # 120 MB behind the Fetch: what an unbounded queue would read in
    pipeline = Pipeline(proc, topic, count, MIB - 1024)
    try:
        settle([pipeline])
        held = value(scrape(url), "oncelog_request_memory_used_bytes")
        grown_kb = rss_kb(proc) - rss_before
        assert pipeline.sent < pipeline.total, "the broker read every request while one waited"
        assert held is not None and 0 < held <= 2 * limit, held
        assert grown_kb < 40 * 1024, f"RSS grew {grown_kb} KiB"
        assert pipeline.answers() == [0] * count
    finally:
        pipeline.close()
    assert log_end(proc, topic) == count
    assert value(scrape(url), "oncelog_request_memory_used_bytes") == 0


def test_the_broker_budget_stops_connections_that_would_hold_more(
    broker_factory: type[BrokerProcess],
) -> None:
    request_max = 2 * MIB
    budget = 2 * MIB
    proc = broker_factory(
        "budget",
        {
            "socket.request.max.bytes": str(request_max),
            "queued.max.request.bytes": str(budget),
            "http.listeners": "http://127.0.0.1:0",
        },
    ).start()
    topic = create_topic(proc)
    url = metrics_url(proc)
    clients, count, frame = 10, 12, 200 * 1024
    # Each connection alone would queue 10 requests (2 MB) behind its Fetch: 20 MB in all.
    pipelines = [Pipeline(proc, topic, count, frame) for _ in range(clients)]
    try:
        settle(pipelines)
        samples = scrape(url)
        held = value(samples, "oncelog_request_memory_used_bytes")
        waiting = value(samples, "oncelog_connections_waiting_for_memory")
        # Not strict, as Kafka's pool: a connection reads while any budget is left, so each
        # may go past it by one read (here at most one 200 KB frame) before it stops.
        assert held is not None and budget <= held <= budget + clients * (frame + 64), held
        assert waiting is not None and waiting >= clients // 2, waiting
        # Read together, as a client reads its connections. One after the other, a connection
        # whose Fetch answer (up to 1 MiB of the others' records) outgrows the socket buffers
        # (with Kafka's socket.send.buffer.bytes of 100 KiB, say) would keep its queued
        # requests, and their share of the budget, until its turn to be read, while the one
        # read first waits for them.
        with ThreadPoolExecutor(clients) as pool:
            assert list(pool.map(Pipeline.answers, pipelines)) == [[0] * count] * clients
    finally:
        for pipeline in pipelines:
            pipeline.close()
    assert log_end(proc, topic) == clients * count
    samples = scrape(url)
    assert value(samples, "oncelog_request_memory_used_bytes") == 0
    assert value(samples, "oncelog_connections_waiting_for_memory") == 0


def test_half_sent_requests_never_hold_the_budget_against_each_other(
    broker_factory: type[BrokerProcess],
) -> None:
    """Kafka grants a request its whole size once the size is read and reads it to its end.
    Here ten connections each send half of a 1 MB Produce, which spends a 2 MiB budget on
    frames none of which is whole; then the rest. Were a half-read frame stopped for memory,
    no request would ever complete."""
    budget = 2 * MIB
    proc = broker_factory(
        "halves",
        {"socket.request.max.bytes": str(budget), "queued.max.request.bytes": str(budget)},
    ).start()
    topic = create_topic(proc)
    frames = [produce_request(topic, MIB - 1024, 1) for _ in range(10)]
    clients = [RawClient(proc.port, timeout=30) for _ in frames]
    try:
        for client, data in zip(clients, frames, strict=True):
            client.send(data[: len(data) // 2])
        time.sleep(0.5)
        for client, data in zip(clients, frames, strict=True):
            client.send(data[len(data) // 2 :])
        for client in clients:
            got, response = decode_response(PRODUCE, 9, client.recv_frame())
            assert got == 1
            assert response.responses[0].partition_responses[0].error_code == 0
    finally:
        for client in clients:
            client.close()
    assert log_end(proc, topic) == len(frames)


def test_a_budget_smaller_than_one_request_exits_2_with_one_line(tmp_path: Path) -> None:
    result = serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
        "--override", "queued.max.request.bytes=1000",
    )  # fmt: skip
    assert result.returncode == 2
    assert one_line(result) == (
        "oncelog: configuration error: "
        "queued.max.request.bytes must be larger or equal to socket.request.max.bytes"
    )
    assert not (tmp_path / "data").exists()
