"""What a SASL listener does with clients that do not follow the exchange: Kafka's answers
(UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED, ILLEGAL_SASL_STATE) or a closed
connection, and the broker keeps serving (a fresh client logs in afterwards). Also the v0
handshake's unframed tokens, which old clients send."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from oncelog.errors import ErrorCode
from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.security.plain import client_message
from oncelog.security.scram import ScramClient
from tests.integration.rawclient import (
    API_VERSIONS,
    METADATA,
    PRODUCE,
    RawClient,
    api_versions_body,
    frame,
    header,
    metadata_body,
    produce_body,
)
from tests.integration.secure_broker import SecureBroker, plain_jaas

HANDSHAKE = 17
AUTHENTICATE = 36


def body(api_key: int, version: int, **fields: object) -> bytes:
    return encode_entity(build(request_class(api_key, version), fields))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base: Path = tmp_path_factory.mktemp("sasl-frames")
    proc = SecureBroker(
        base / "data",
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "sasl.jaas.config": plain_jaas({"alice": "alice-pw"}),
            "offsets.topic.num.partitions": "1",
        },
    ).start()
    yield proc
    proc.kill()


def client(broker: SecureBroker) -> RawClient:
    return RawClient(broker.ports["SASL_PLAINTEXT"])


def still_serves(broker: SecureBroker) -> None:
    admin = AdminClient(
        {
            "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": "alice",
            "sasl.password": "alice-pw",
        }
    )
    assert 1 in admin.list_topics(timeout=10).brokers
    assert broker.alive()


def handshake(c: RawClient, mechanism: str, version: int = 1) -> Any:
    return c.call(HANDSHAKE, version, body(HANDSHAKE, version, mechanism=mechanism))


def test_plain_login_then_requests(broker: SecureBroker) -> None:
    with client(broker) as c:
        versions = c.call(API_VERSIONS, 3, api_versions_body())
        keys = {k.api_key for k in versions.api_keys}
        assert {HANDSHAKE, AUTHENTICATE, 50, 51} <= keys
        shake = handshake(c, "PLAIN")
        assert shake.error_code == ErrorCode.none
        assert list(shake.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        token = client_message("alice", "alice-pw")
        auth = c.call(AUTHENTICATE, 2, body(AUTHENTICATE, 2, auth_bytes=token))
        assert auth.error_code == ErrorCode.none and auth.session_lifetime.total_seconds() == 0
        meta = c.call(METADATA, 12, metadata_body([]))
        assert [b.port for b in meta.brokers] == [broker.ports["SASL_PLAINTEXT"]]
        again = handshake(c, "PLAIN")
        assert again.error_code == ErrorCode.illegal_sasl_state


def test_v0_handshake_takes_raw_tokens(broker: SecureBroker) -> None:
    with client(broker) as c:
        assert handshake(c, "SCRAM-SHA-256", version=0).error_code == ErrorCode.none
        scram = ScramClient("SCRAM-SHA-256", "nobody", "x")
        c.send(frame(scram.first()))
        c.expect_closed()  # a raw exchange has no error response: unknown user, closed
    with client(broker) as c:
        assert handshake(c, "PLAIN", version=0).error_code == ErrorCode.none
        c.send(frame(client_message("alice", "alice-pw")))
        assert c.recv_frame() == b""  # PLAIN's empty server token, size-prefixed
        meta = c.call(METADATA, 12, metadata_body([]))
        assert meta.brokers[0].node_id == 1


def test_unknown_mechanism_is_answered_then_closed(broker: SecureBroker) -> None:
    with client(broker) as c:
        shake = handshake(c, "GSSAPI")
        assert shake.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(shake.mechanisms) == ["PLAIN", "SCRAM-SHA-256"]
        c.expect_closed()
    still_serves(broker)


def test_wrong_password_is_answered_then_closed(broker: SecureBroker) -> None:
    with client(broker) as c:
        handshake(c, "PLAIN")
        token = client_message("alice", "no")
        auth = c.call(AUTHENTICATE, 1, body(AUTHENTICATE, 1, auth_bytes=token))
        assert auth.error_code == ErrorCode.sasl_authentication_failed
        assert auth.error_message == "Authentication failed: Invalid username or password"
        c.expect_closed()


@pytest.mark.parametrize(
    "token", [b"", b"\xff" * 40, os.urandom(300), b"n,,n=alice,r=", b"c=biws,r=x,p=AAAA"]
)
def test_garbage_scram_tokens(broker: SecureBroker, token: bytes) -> None:
    with client(broker) as c:
        handshake(c, "SCRAM-SHA-256")
        auth = c.call(AUTHENTICATE, 2, body(AUTHENTICATE, 2, auth_bytes=token))
        assert auth.error_code == ErrorCode.sasl_authentication_failed
        assert auth.error_message == (
            "Authentication failed during authentication due to invalid credentials with SASL "
            "mechanism SCRAM-SHA-256"
        )
        c.expect_closed()
    still_serves(broker)


def test_requests_out_of_order_close_the_connection(broker: SecureBroker) -> None:
    with client(broker) as c:  # a Produce before authenticating
        c.send(frame(header(PRODUCE, 9) + produce_body({"t": [(0, None)]})))
        c.expect_closed()
    with client(broker) as c:  # SaslAuthenticate before SaslHandshake
        c.send(frame(header(AUTHENTICATE, 2) + body(AUTHENTICATE, 2, auth_bytes=b"x")))
        c.expect_closed()
    with client(broker) as c:  # Metadata after the handshake, instead of authenticating
        handshake(c, "PLAIN")
        c.send(frame(header(METADATA, 12) + metadata_body([])))
        c.expect_closed()
    with client(broker) as c:  # a second ApiVersions after the first
        c.call(API_VERSIONS, 3, api_versions_body())
        c.send(frame(header(API_VERSIONS, 3) + api_versions_body()))
        c.expect_closed()
    still_serves(broker)


def test_malformed_and_oversized_frames(broker: SecureBroker) -> None:
    with client(broker) as c:  # a handshake whose body is cut short
        c.send(frame(header(HANDSHAKE, 1) + b"\x00"))
        c.expect_closed()
    with client(broker) as c:  # a header that is not Kafka's at all
        c.send(frame(b"\x16\x03\x01"))
        c.expect_closed()
    with client(broker) as c:  # above sasl.server.max.receive.size before authenticating
        c.send_tolerant(struct.pack(">i", 524289) + b"\0" * 1024)
        c.expect_closed()
    with client(broker) as c:  # random bytes
        c.send_tolerant(os.urandom(4096))
        c.expect_closed()
    still_serves(broker)
