"""The SASL exchange of one connection, driven frame by frame with a manual clock."""

from __future__ import annotations

import struct
from typing import Any

from kio.serial import entity_reader

from oncelog.errors import ErrorCode
from oncelog.protocol.codec import build, encode_entity, request_class, response_class
from oncelog.protocol.registry import is_supported
from oncelog.security.plain import PlainServer, client_message
from oncelog.security.sasl import Answer, Forward, Reject, SaslAuthenticator


def request(api_key: int, version: int, **fields: Any) -> bytes:
    flexible = request_class(api_key, version).__flexible__
    head = struct.pack(">hhih", api_key, version, 1, 1) + b"c" + (b"\0" if flexible else b"")
    return head + encode_entity(build(request_class(api_key, version), fields))


def answer_of(step: Any, api_key: int, version: int) -> Any:
    assert isinstance(step, Answer)
    payload = b"".join(bytes(p) for p in step.data)[4:]
    pos = 4 + (1 if response_class(api_key, version).__flexible__ else 0)
    return entity_reader(response_class(api_key, version))(payload, pos)[0]


class Clock:
    now = 0

    def __call__(self) -> int:
        return self.now


def authenticator(reauth_ms: int = 0, clock: Clock | None = None) -> SaslAuthenticator:
    return SaslAuthenticator(
        ["PLAIN"],
        lambda _m: PlainServer({"alice": "pw", "bob": "pw2"}),
        supports_api_version=is_supported,
        reauth_ms=reauth_ms,
        now_ms=clock or Clock(),
    )


def login(auth: SaslAuthenticator, user: str, password: str) -> Any:
    shake = answer_of(auth.receive(request(17, 1, mechanism="PLAIN")), 17, 1)
    assert shake.error_code == ErrorCode.none
    step = auth.receive(request(36, 2, auth_bytes=client_message(user, password)))
    return step, answer_of(step, 36, 2)


def test_api_versions_then_login() -> None:
    auth = authenticator()
    assert isinstance(auth.receive(request(18, 3, client_software_name="x",
                                           client_software_version="1")), Forward)  # fmt: skip
    step, answer = login(auth, "alice", "pw")
    assert answer.error_code == ErrorCode.none and step.close is None
    assert auth.authenticated and auth.principal == "User:alice"


def test_refusals() -> None:
    auth = authenticator()
    step, answer = login(auth, "alice", "bad")
    assert answer.error_code == ErrorCode.sasl_authentication_failed and step.close
    assert not auth.authenticated
    metadata = request(
        3, 12, topics=[], allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    assert isinstance(authenticator().receive(metadata), Reject)
    shake = authenticator().receive(request(17, 1, mechanism="SCRAM-SHA-256"))
    assert answer_of(shake, 17, 1).error_code == ErrorCode.unsupported_sasl_mechanism
    assert isinstance(shake, Answer) and shake.close


def test_reauthentication_lifetime_and_principal() -> None:
    clock = Clock()
    auth = authenticator(reauth_ms=1000, clock=clock)
    _, answer = login(auth, "alice", "pw")
    assert answer.session_lifetime.total_seconds() == 1.0
    assert auth.expires_ms == 1000
    clock.now = 800
    auth.reauthenticate()
    login(auth, "alice", "pw")
    assert auth.expires_ms == 1800
    auth.reauthenticate()
    step, answer = login(auth, "bob", "pw2")
    assert answer.error_code == ErrorCode.none
    assert step.close is not None and "Cannot change principals" in step.close
    assert auth.principal == "User:alice"
