"""KIP-368 re-authentication with `connections.max.reauth.ms`: SaslAuthenticate tells the
session lifetime, the client may log in again on the same connection (as the same user), and
a connection whose session ran out is closed at its next request."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from oncelog.errors import ErrorCode
from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.security.plain import client_message
from tests.integration.rawclient import METADATA, RawClient, frame, header, metadata_body
from tests.integration.secure_broker import SecureBroker, plain_jaas

HANDSHAKE, AUTHENTICATE = 17, 36
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
