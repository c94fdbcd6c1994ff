"""The web console's pure parts: http.listeners parsing, the JSON shaping of client answers,
the metrics summary, the consumer-assignment decoder, and the app's answers that need no
broker (/metrics, request validation, the authentication and authorization hooks)."""

from __future__ import annotations

import asyncio
import base64
import struct
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry, Counter

from oncelog.client.admin import ProducerInfo, TransactionListing
from oncelog.client.describe_transactions import TopicData, TransactionState
from oncelog.client.overview import (
    BrokerInfo,
    ClusterInfo,
    GroupDescription,
    GroupListing,
    GroupMember,
    PartitionInfo,
    PartitionOffsets,
    consumer_assignment,
)
from oncelog.client.reassignments import OngoingMove
from oncelog.console import views
from oncelog.console.app import AbortRequest, ApiError, ConsoleSettings, make_app
from oncelog.console.listener import HttpListener, HttpListenerError, parse
from oncelog.server.app import bind_address
from oncelog.server.startup import StartupError
from oncelog.types import TopicPartition


def test_http_listeners_parse() -> None:
    assert parse([]) is None
    assert parse([""]) is None
    assert parse(["http://127.0.0.1:9644"]) == HttpListener("127.0.0.1", 9644)
    assert parse(["HTTP://localhost:0/"]) == HttpListener("localhost", 0)
    assert parse(["http://[::1]:80"]) == HttpListener("::1", 80)
    assert parse(["http://:8080"]) == HttpListener("0.0.0.0", 8080)
    assert parse(["https://127.0.0.1:9645"]) == HttpListener("127.0.0.1", 9645, tls=True)
    for bad in ("127.0.0.1:9644", "ftp://127.0.0.1:1", "http://h"):
        with pytest.raises(HttpListenerError, match="http://HOST:PORT"):
            parse([bad])
    with pytest.raises(HttpListenerError, match="port 99999 is out of range 0-65535"):
        parse(["http://h:99999"])


def test_http_listener_url() -> None:
    assert HttpListener("0.0.0.0", 0).url(9644) == "http://127.0.0.1:9644/"
    assert HttpListener("::1", 80).url() == "http://[::1]:80/"
    assert HttpListener("127.0.0.1", 9644).url() == "http://127.0.0.1:9644/"
    assert HttpListener("localhost", 1, tls=True).url() == "https://localhost:1/"


def test_bind_a_taken_port_is_one_line() -> None:
    first = bind_address("127.0.0.1", 0, "first")
    first.listen()
    try:
        port = first.getsockname()[1]
        listener = HttpListener("127.0.0.1", port)
        with pytest.raises(StartupError) as info:
            bind_address(listener.host, port, listener.url().rstrip("/"))
        assert str(info.value).startswith(f"cannot listen on http://127.0.0.1:{port}: ")
        assert "\n" not in str(info.value)
    finally:
        first.close()


def assignment(version: int, topics: dict[str, list[int]], user_data: bytes = b"") -> bytes:
    out = struct.pack(">hi", version, len(topics))
    for name, parts in topics.items():
        out += struct.pack(">h", len(name)) + name.encode() + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out + struct.pack(">i", len(user_data)) + user_data


def test_consumer_assignment() -> None:
    data = assignment(1, {"b": [1, 0], "a": [2]}, b"xy")
    assert consumer_assignment(data) == (
        TopicPartition("a", 2),
        TopicPartition("b", 0),
        TopicPartition("b", 1),
    )
    assert consumer_assignment(b"") == ()
    assert consumer_assignment(data[:9]) == ()  # truncated in a topic name


def test_cluster_marks_the_controller() -> None:
    info = ClusterInfo("abc", 2, (BrokerInfo(1, "h", 1, None), BrokerInfo(2, "h", 2, "r")))
    shaped = views.cluster(info)
    assert shaped["cluster_id"] == "abc"
    assert [b["controller"] for b in shaped["brokers"]] == [False, True]


def test_topics_group_partitions_and_offsets() -> None:
    tp0, tp1, internal = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("__x", 0)
    parts = [
        PartitionInfo(tp1, 1, 3, (1, 2), (1,), 0),
        PartitionInfo(tp0, 1, 0, (1,), (1,), 0),
        PartitionInfo(internal, -1, 0, (1,), (), 5),
    ]
    offsets = {tp0: PartitionOffsets(0, 10, 7), tp1: PartitionOffsets(2, 4, 4)}
    shaped = views.topics(parts, offsets)
    assert [t["name"] for t in shaped] == ["__x", "t"]
    assert shaped[0]["internal"] and shaped[0]["partitions"][0]["error"] == (
        "LEADER_NOT_AVAILABLE (5)"
    )
    assert shaped[0]["partitions"][0]["high_watermark"] is None
    t = shaped[1]["partitions"]
    assert [p["partition"] for p in t] == [0, 1]
    assert (t[0]["log_start_offset"], t[0]["high_watermark"], t[0]["last_stable_offset"]) == (
        0,
        10,
        7,
    )
    assert t[1]["replicas"] == [1, 2] and t[1]["isr"] == [1] and t[1]["leader_epoch"] == 3
    assert t[1]["adding"] == [] and t[1]["removing"] == []


def test_a_moving_partition_shows_what_it_adds_and_removes() -> None:
    tp = TopicPartition("t", 0)
    parts = [PartitionInfo(tp, 1, 0, (2, 3, 1), (1, 2), 0)]
    moves = {tp: OngoingMove((2, 3, 1), (3,), (1,))}
    shaped = views.topics(parts, {}, moves)
    assert shaped[0]["partitions"][0]["adding"] == [3]
    assert shaped[0]["partitions"][0]["removing"] == [1]


def producer(pid: int, start: int, last_ms: int, tp: TopicPartition | None = None) -> ProducerInfo:
    return ProducerInfo(tp or TopicPartition("t", 0), pid, 0, 4, last_ms, -1, start)


def test_producers_age_only_for_open_transactions() -> None:
    shaped = views.producers([producer(7, 3, 1_000), producer(2, -1, 500)], now_ms=4_000)
    assert [p["producer_id"] for p in shaped] == [2, 7]
    assert shaped[0]["txn_start_offset"] is None and shaped[0]["txn_age_ms"] is None
    assert shaped[1]["txn_start_offset"] == 3 and shaped[1]["txn_age_ms"] == 3_000


def test_transactions_keep_open_ones() -> None:
    listings = [
        TransactionListing("b", 1, 5, "Ongoing"),
        TransactionListing("a", 1, 4, "CompleteCommit"),
        TransactionListing("c", 1, 6, "PrepareAbort"),
    ]
    states = {
        "b": TransactionState(0, "b", "Ongoing", 60_000, 1_000, 5, 2, (TopicData("t", (1, 0)),))
    }
    shaped = views.transactions(listings, states, [producer(9, 0, 0)], 5_000, 1_000)
    assert [t["transactional_id"] for t in shaped["open"]] == ["b", "c"]
    b, c = shaped["open"]
    assert b["age_ms"] == 4_000 and b["partitions"] == ["t-0", "t-1"] and b["producer_epoch"] == 2
    assert c["age_ms"] is None and c["partitions"] == []
    assert shaped["hanging"][0]["producer_id"] == 9
    assert shaped["max_transaction_timeout_ms"] == 1_000


def test_group_lag() -> None:
    a0, a1, b0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)
    member = GroupMember("m-1", None, "client", "/127.0.0.1", (a0, a1))
    description = GroupDescription("g", "Stable", "consumer", "range", (member,))
    listing = GroupListing("g", "consumer", "Stable", 1)
    shaped = views.group(listing, description, {a0: 3, b0: 1}, {a0: 10, a1: 5, b0: 1})
    rows = {(r["topic"], r["partition"]): r for r in shaped["partitions"]}
    assert rows[("a", 0)]["lag"] == 7 and rows[("a", 0)]["member_id"] == "m-1"
    assert rows[("a", 1)]["committed_offset"] is None and rows[("a", 1)]["lag"] is None
    assert rows[("b", 0)]["lag"] == 0 and rows[("b", 0)]["member_id"] is None
    assert shaped["total_lag"] == 7
    assert shaped["members"][0]["assignment"] == ["a-0", "a-1"]
    empty = views.group(GroupListing("e", "consumer", "Empty", 1), None, {}, {})
    assert empty["total_lag"] is None and empty["state"] == "Empty"


def test_metric_summary() -> None:
    registry = CollectorRegistry()
    messages = Counter("oncelog_messages_in", "m", ["topic"], registry=registry)
    bytes_in = Counter("oncelog_bytes_in", "b", ["topic"], registry=registry)
    errors = Counter("oncelog_request_errors", "e", ["api", "error"], registry=registry)
    Counter("oncelog_replication_bytes_out", "r", registry=registry).inc(99)
    messages.labels("a").inc(3)
    messages.labels("b").inc(4)
    bytes_in.labels("a").inc(100)
    errors.labels("Produce", "NOT_LEADER_OR_FOLLOWER").inc(2)
    errors.labels("Fetch", "NOT_LEADER_OR_FOLLOWER").inc(1)
    errors.labels("Fetch", "OFFSET_OUT_OF_RANGE").inc(5)
    totals = views.summarize(views.metric_samples(registry))
    assert totals == {
        "messages_in": 7.0,
        "bytes_in": 100.0,
        "errors": {"NOT_LEADER_OR_FOLLOWER": 3.0, "OFFSET_OUT_OF_RANGE": 5.0},
    }


def test_abort_request_parse() -> None:
    ok = {"topic": "t", "partition": 1, "producer_id": 2, "start_offset": 3}
    assert AbortRequest.parse(ok) == AbortRequest("t", 1, 2, 3)
    bad: list[Any] = [
        [],
        {**ok, "topic": ""},
        {**ok, "partition": "1"},
        {**ok, "producer_id": True},
        {**ok, "start_offset": -1},
    ]
    for body in bad:
        with pytest.raises(ApiError) as info:
            AbortRequest.parse(body)
        assert info.value.status == 400


async def _with_client(settings: ConsoleSettings, check: Any) -> None:
    async with TestClient(TestServer(make_app(settings))) as client:
        await check(client)


def test_metrics_endpoint_renders_the_registry() -> None:
    registry = CollectorRegistry()
    Counter("oncelog_messages_in", "m", registry=registry).inc(42)

    async def check(client: TestClient[Any, Any]) -> None:
        response = await client.get("/metrics")
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        assert "oncelog_messages_in_total 42.0" in await response.text()
        summary = await (await client.get("/api/metrics")).json()
        assert summary["totals"]["messages_in"] == 42.0
        page = await client.get("/")
        assert "<title>oncelog console</title>" in await page.text()
        assert (await client.get("/static/console.js")).status == 200
        assert (await client.get("/static/../app.py")).status == 404
        assert (await client.get("/static/app.py")).status == 404

    asyncio.run(_with_client(ConsoleSettings("127.0.0.1:1", registry=registry), check))


def test_abort_checks_before_reaching_the_cluster() -> None:
    """Content type, the authorization hook and the body are checked first; the bootstrap
    address is a closed port, so anything that got further would answer 502."""
    body = {"topic": "t", "partition": 0, "producer_id": 1, "start_offset": 0}

    async def check(client: TestClient[Any, Any]) -> None:
        form = await client.post("/api/transactions/abort", data="topic=t")
        assert form.status == 415
        bad = await client.post("/api/transactions/abort", json={"topic": "t"})
        assert bad.status == 400 and "partition" in (await bad.json())["error"]
        bad_threshold = await client.get("/api/transactions?max_transaction_timeout_ms=x")
        assert bad_threshold.status == 400
        assert (await client.get("/api/transactions?max_transaction_timeout_ms=-1")).status == 400
        unreachable = await client.post("/api/transactions/abort", json=body)
        assert unreachable.status == 502
        assert "cannot connect to 127.0.0.1:1" in (await unreachable.json())["error"]

    asyncio.run(_with_client(ConsoleSettings("127.0.0.1:1"), check))

    async def forbidden(client: TestClient[Any, Any]) -> None:
        response = await client.post("/api/transactions/abort", json=body)
        assert response.status == 403
        assert (await client.get("/api/whoami")).status == 200

    settings = ConsoleSettings("127.0.0.1:1", may_abort=lambda user: user == "admin")
    asyncio.run(_with_client(settings, forbidden))


def test_authentication_hook() -> None:
    async def authenticate(request: web.Request) -> str | None:
        return "alice" if request.headers.get("Authorization") == "Bearer t0ken" else None

    async def check(client: TestClient[Any, Any]) -> None:
        refused = await client.get("/api/whoami")
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"].startswith("Basic")
        assert (await client.get("/metrics")).status == 401
        ok = await client.get("/api/whoami", headers={"Authorization": "Bearer t0ken"})
        assert await ok.json() == {"user": "alice", "may_abort": False}

    settings = ConsoleSettings(
        "127.0.0.1:1", authenticate=authenticate, may_abort=lambda user: user == "admin"
    )
    asyncio.run(_with_client(settings, check))


def test_parse_basic() -> None:
    from oncelog.console.auth import parse_basic

    token = base64.b64encode(b"alice:pa:ss").decode()
    assert parse_basic(f"Basic {token}") == ("alice", "pa:ss")
    assert parse_basic(f"basic  {token}") == ("alice", "pa:ss")
    assert parse_basic("Bearer abc") is None
    assert parse_basic("Basic") is None
    assert parse_basic("Basic !!!") is None
    assert parse_basic("Basic " + base64.b64encode(b"no-colon").decode()) is None
    assert parse_basic("Basic " + base64.b64encode(b":pw").decode()) is None
    assert parse_basic("Basic " + base64.b64encode(b"\xff:x").decode()) is None


def test_quotas_one_row_per_entity_users_first_defaults_last() -> None:
    rows = views.quotas(
        [
            ((("client-id", None),), {"request_percentage": 50.0}),
            ((("user", "alice"),), {"producer_byte_rate": 1024.0}),
            ((("client-id", "app"), ("user", None)), {"consumer_byte_rate": 2048.0}),
            ((("client-id", "app"),), {"producer_byte_rate": 10.0}),
        ]
    )
    assert [(r["user"], r["client_id"]) for r in rows] == [
        ("alice", None),
        ("<default>", "app"),
        (None, "app"),
        (None, "<default>"),
    ]
    assert rows[0] == {
        "user": "alice",
        "client_id": None,
        "producer_byte_rate": 1024.0,
        "consumer_byte_rate": None,
        "request_percentage": None,
    }
