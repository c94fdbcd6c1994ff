"""KIP-368 re-authentication with `connections.max.reauth.ms`: SaslAuthenticate tells the
session lifetime, the client may log in again on the same connection (as the same user), and
a connection whose session ran out is closed at its next request."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from oncelog.client.connection import Connection, SaslLogin
from oncelog.errors import ErrorCode
from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.security.plain import client_message
from tests.integration.rawclient import (
    FETCH,
    METADATA,
    RawClient,
    decode_response,
    frame,
    header,
    metadata_body,
    request,
)
from tests.integration.secure_broker import SecureBroker, plain_jaas

HANDSHAKE, AUTHENTICATE = 17, 36
METADATA_FIELDS = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}
LIFETIME_MS = 1500


def body(api_key: int, version: int, **fields: object) -> bytes:
    return encode_entity(build(request_class(api_key, version), fields))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base: Path = tmp_path_factory.mktemp("sasl-reauth")
    proc = SecureBroker(
        base / "data",
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": plain_jaas({"alice": "a-pw", "bob": "b-pw"}),
            "connections.max.reauth.ms": str(LIFETIME_MS),
        },
    ).start()
    yield proc
    proc.kill()


def login(c: RawClient, user: str, password: str) -> int:
    """Handshake and authenticate; the session lifetime in ms."""
    shake = c.call(HANDSHAKE, 1, body(HANDSHAKE, 1, mechanism="PLAIN"))
    assert shake.error_code == ErrorCode.none
    auth = c.call(
        AUTHENTICATE, 2, body(AUTHENTICATE, 2, auth_bytes=client_message(user, password))
    )
    assert auth.error_code == ErrorCode.none, auth.error_message
    return int(auth.session_lifetime.total_seconds() * 1000)


def test_session_lifetime_and_reauthentication(broker: SecureBroker) -> None:
    with RawClient(broker.ports["SASL_PLAINTEXT"]) as c:
        assert login(c, "alice", "a-pw") == LIFETIME_MS
        c.call(METADATA, 12, metadata_body([]))
        time.sleep(LIFETIME_MS / 2000)
        assert login(c, "alice", "a-pw") == LIFETIME_MS  # again, before it runs out
        time.sleep(LIFETIME_MS / 2000)
        assert c.call(METADATA, 12, metadata_body([])).brokers  # the new session holds


def test_an_expired_session_is_closed(broker: SecureBroker) -> None:
    with RawClient(broker.ports["SASL_PLAINTEXT"]) as c:
        login(c, "alice", "a-pw")
        time.sleep(LIFETIME_MS / 1000 + 0.5)
        c.send(frame(header(METADATA, 12) + metadata_body([])))
        c.expect_closed()


def test_reauthentication_as_another_user_is_closed(broker: SecureBroker) -> None:
    with RawClient(broker.ports["SASL_PLAINTEXT"]) as c:
        login(c, "alice", "a-pw")
        c.call(HANDSHAKE, 1, body(HANDSHAKE, 1, mechanism="PLAIN"))
        token = client_message("bob", "b-pw")
        c.send(frame(header(AUTHENTICATE, 2) + body(AUTHENTICATE, 2, auth_bytes=token)))
        c.recv_frame()  # the answer, then the end
        c.expect_closed()


def test_librdkafka_keeps_working_past_the_lifetime(broker: SecureBroker) -> None:
    admin = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "a-pw",
        }
    )
    deadline = time.monotonic() + 3 * LIFETIME_MS / 1000
    while time.monotonic() < deadline:
        assert admin.list_topics(timeout=10).brokers
        time.sleep(0.3)


def long_fetch_body(topic: str, max_wait_ms: int) -> bytes:
    """Fetch v4 of an empty partition's end: the broker holds it `max_wait_ms`."""
    return body(
        FETCH,
        4,
        replica_id=-1,
        max_wait=max_wait_ms,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        topics=[
            {
                "topic": topic,
                "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}],
            }
        ],
    )


def test_a_request_sent_in_time_is_served_after_a_slow_one(broker: SecureBroker) -> None:
    """A request that arrived within the session is served even when it waited past the
    session's end behind a slow one (here a Fetch held longer than the lifetime; in a cluster
    an acks=all Produce waiting on a slow follower), and the client's re-authentication that
    follows it succeeds. Closing it cut librdkafka off in the middle of its re-authentication
    ("SASL PLAIN mechanism handshake failed: Local: Broker transport failure")."""
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    with RawClient(broker.ports["SASL_PLAINTEXT"]) as c:
        login(c, "alice", "a-pw")
        assert c.call(METADATA, 12, metadata_body([topic], auto_create=True)).topics
        wait_ms = LIFETIME_MS + 1000
        for _ in range(3):  # three sessions in a row, each outlived by its slow Fetch
            login(c, "alice", "a-pw")
            started = time.monotonic()
            c.send(request(FETCH, 4, long_fetch_body(topic, wait_ms), correlation_id=1))
            c.send(request(METADATA, 12, metadata_body([]), correlation_id=2))  # in time
            first, _ = decode_response(FETCH, 4, c.recv_frame())
            second, answer = decode_response(METADATA, 12, c.recv_frame())
            assert (first, second) == (1, 2)
            assert time.monotonic() - started >= LIFETIME_MS / 1000  # served past the end
            assert answer.brokers
    # one that arrives past the end is still closed
    with RawClient(broker.ports["SASL_PLAINTEXT"]) as c:
        login(c, "alice", "a-pw")
        time.sleep(LIFETIME_MS / 1000 + 0.3)
        c.send(request(METADATA, 12, metadata_body([])))
        c.expect_closed()


def test_the_tools_client_renews_its_session(broker: SecureBroker) -> None:
    """oncelog.client (the operator tools, the web console) renews its session on the same
    connection before the request that finds it due, at 85-95 % of the lifetime."""
    with Connection(
        "127.0.0.1", broker.ports["SASL_PLAINTEXT"], sasl=SaslLogin("PLAIN", "alice", "a-pw")
    ) as conn:
        deadline = time.monotonic() + 3.5 * LIFETIME_MS / 1000
        while time.monotonic() < deadline:
            assert conn.call(METADATA, (12, 12), METADATA_FIELDS).brokers
            time.sleep(0.1)
        assert conn.reauth.reauthentications >= 3
