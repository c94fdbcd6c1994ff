"""The SASL exchange of a connection before its requests reach the handlers (Kafka's
SaslServerAuthenticator), sans-IO: frames in, answers out.

Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are accepted;
anything else closes the connection. SaslHandshake v0 switches to raw tokens (size-prefixed,
no Kafka header) as old clients speak; v1 to SaslAuthenticate requests. A failed login is
answered SASL_AUTHENTICATION_FAILED and the connection closed; an unknown mechanism
UNSUPPORTED_SASL_MECHANISM with the enabled ones, then closed. With `connections.max.reauth.ms`
the client learns its session lifetime and may re-authenticate on the same connection
(KIP-368), as the same principal.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from oncelog.errors import ErrorCode
from oncelog.protocol.codec import (
    Buffer,
    DecodeError,
    build,
    decode_request,
    encode_response,
    is_flexible,
    request_class,
    response_class,
)
from oncelog.protocol.headers import HeaderError, parse_request_header, peek_ids
from oncelog.security.sasl_errors import SaslAuthenticationFailed, SaslFailed

API_VERSIONS = 18
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: Kafka's sasl.server.max.receive.size: the largest frame accepted before authentication.
MAX_RECEIVE_SIZE = 524288


class Mechanism(Protocol):
    """One server-side exchange (PlainServer, ScramServer)."""

    complete: bool
    username: str | None

    def evaluate(self, response: bytes) -> bytes: ...


@dataclass(frozen=True, slots=True)
class Forward:
    """Hand the frame to the dispatcher (ApiVersions before authentication)."""


@dataclass(frozen=True, slots=True)
class Answer:
    """Send `data`; close the connection afterwards when `close` gives the reason."""

    data: list[Buffer]
    close: str | None = None


@dataclass(frozen=True, slots=True)
class Reject:
    """Close the connection without an answer."""

    reason: str


Step = Forward | Answer | Reject


class SaslAuthenticator:
    """One connection's authentication; `principal` is set once it completed."""

    def __init__(
        self,
        mechanisms: Sequence[str],
        new_server: Callable[[str], Mechanism],
        *,
        supports_api_version: Callable[[int, int], bool],
        reauth_ms: int = 0,
        now_ms: Callable[[], int] = lambda: 0,
    ) -> None:
        self.mechanisms = list(mechanisms)
        self._new_server = new_server
        self._supports = supports_api_version
        self._reauth_ms = reauth_ms
        self._now_ms = now_ms
        self._state = "versions_or_handshake"
        self._server: Mechanism | None = None
        self._mechanism = ""
        self.principal: str | None = None
        #: When the session ends (monotonic ms), with connections.max.reauth.ms set.
        self.expires_ms: int | None = None

    @property
    def authenticated(self) -> bool:
        return self._state == "complete"

    @property
    def raw_tokens(self) -> bool:
        """True while the v0 handshake's unframed tokens are expected."""
        return self._state == "raw"

    def reauthenticate(self) -> None:
        """A SaslHandshake on an authenticated connection starts a new exchange (KIP-368)."""
        self._state = "handshake"

    def receive(self, frame: bytes) -> Step:
        if self._state == "raw":
            return self._raw_token(frame)
        try:
            api_key, version, correlation_id = peek_ids(frame)
        except HeaderError as exc:
            return Reject(f"SASL: {exc}")
        if self._state == "versions_or_handshake" and api_key == API_VERSIONS:
            if self._supports(api_key, version):
                self._state = "handshake"
            return Forward()
        if self._state in ("versions_or_handshake", "handshake"):
            if api_key != SASL_HANDSHAKE:
                return Reject(f"Unexpected Kafka request of type {api_key} during SASL handshake.")
            return self._handshake(frame, api_key, version, correlation_id)
        if self._state == "authenticate":
            if api_key != SASL_AUTHENTICATE:
                return Reject(
                    f"Unexpected Kafka request of type {api_key} during SASL authentication."
                )
            return self._authenticate(frame, api_key, version, correlation_id)
        return Reject(f"SASL: unexpected request in state {self._state}")

    def _decode(self, frame: bytes, api_key: int, version: int) -> Any:
        if not self._supports(api_key, version):
            raise DecodeError(f"unsupported version {version} of api key {api_key}")
        _, offset = parse_request_header(frame, is_flexible(api_key, version))
        return decode_request(request_class(api_key, version), frame, offset)

    def _handshake(self, frame: bytes, api_key: int, version: int, correlation_id: int) -> Step:
        try:
            request = self._decode(frame, api_key, version)
        except (HeaderError, DecodeError) as exc:
            return Reject(f"malformed SaslHandshake: {exc}")
        mechanism = request.mechanism
        ok = mechanism in self.mechanisms and (
            self.principal is None or mechanism == self._mechanism
        )
        body = {
            "error_code": ErrorCode.none if ok else ErrorCode.unsupported_sasl_mechanism,
            "mechanisms": self.mechanisms,
        }
        data = _response(api_key, version, correlation_id, body)
        if not ok:
            return Answer(data, f"Unsupported SASL mechanism {mechanism}")
        self._mechanism = mechanism
        self._server = self._new_server(mechanism)
        self._state = "authenticate" if version >= 1 else "raw"
        return Answer(data)

    def _authenticate(
        self, frame: bytes, api_key: int, version: int, correlation_id: int
    ) -> Step:
        try:
            request = self._decode(frame, api_key, version)
        except (HeaderError, DecodeError) as exc:
            return Reject(f"malformed SaslAuthenticate: {exc}")
        assert self._server is not None
        try:
            token = self._server.evaluate(bytes(request.auth_bytes))
            reason = self._finish_if_complete()
        except SaslFailed as exc:
            message = self._failure_message(exc)
            body = {
                "error_code": ErrorCode.sasl_authentication_failed,
                "error_message": message,
                "auth_bytes": b"",
            }
            return Answer(_response(api_key, version, correlation_id, body), message)
        lifetime = 0
        if self.authenticated and self.expires_ms is not None:
            lifetime = self._reauth_ms
        body = {
            "error_code": ErrorCode.none,
            "error_message": None,
            "auth_bytes": token,
            "session_lifetime": lifetime,
        }
        data = _response(api_key, version, correlation_id, body)
        if reason is not None:
            return Answer(data, reason)
        return Answer(data)

    def _raw_token(self, token: bytes) -> Step:
        assert self._server is not None
        try:
            answer = self._server.evaluate(token)
            reason = self._finish_if_complete()
        except SaslFailed as exc:
            return Reject(self._failure_message(exc))
        data: list[Buffer] = [struct.pack(">i", len(answer)) + answer]
        if reason is not None:
            return Answer(data, reason)
        return Answer(data)

    def _finish_if_complete(self) -> str | None:
        """On completion: the principal, or a reason to close if a re-authentication
        changed it (Kafka refuses a new principal on the same connection)."""
        assert self._server is not None
        if not self._server.complete:
            return None
        principal = f"User:{self._server.username}"
        self._state = "complete"
        if self._reauth_ms > 0:
            self.expires_ms = self._now_ms() + self._reauth_ms
        if self.principal is not None and self.principal != principal:
            return (
                f"Cannot change principals during re-authentication from {self.principal}: "
                f"{principal}"
            )
        self.principal = principal
        return None

    def _failure_message(self, exc: SaslFailed) -> str:
        self._state = "failed"
        if isinstance(exc, SaslAuthenticationFailed):
            return str(exc)
        what = "re-authentication" if self.principal is not None else "authentication"
        return (
            f"Authentication failed during {what} due to invalid credentials with SASL "
            f"mechanism {self._mechanism}"
        )


def _response(api_key: int, version: int, correlation_id: int, body: Any) -> list[Buffer]:
    return encode_response(api_key, correlation_id, build(response_class(api_key, version), body))
