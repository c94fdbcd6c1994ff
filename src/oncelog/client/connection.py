"""One blocking connection to a Kafka-protocol broker, with version negotiation.

Requests are described as mappings (like the broker's handlers do) and built into the
highest version both sides support, so the tools work against oncelog and Apache Kafka. A SASL
session with a lifetime (the broker's `connections.max.reauth.ms`) is renewed on the same
connection before the request that finds it due (KIP-368, `oncelog.security.reauth`).
"""

from __future__ import annotations

import socket
import ssl
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.serial import entity_reader

from oncelog.clock import Clock, SystemClock
from oncelog.config import parse_port, split_host_port
from oncelog.errors import error_name
from oncelog.protocol.codec import build, encode_entity, is_flexible, request_class, response_class
from oncelog.protocol.headers import API_VERSIONS_KEY
from oncelog.security.reauth import ReauthSchedule
from oncelog.security.sasl_errors import SaslFailed
from oncelog.security.scram import ScramClient

CLIENT_ID = "oncelog-tools"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


class ClientError(Exception):
    """The broker cannot be reached or answered something we cannot use."""


class SaslLoginFailed(ClientError):
    """The broker refused the SASL login (wrong password, unknown user, no such mechanism)."""


@dataclass(frozen=True, slots=True)
class SaslLogin:
    """Log in with SASL on connecting: `mechanism` is PLAIN, SCRAM-SHA-256 or -512."""

    mechanism: str
    username: str
    password: str = field(repr=False)


class Connection:
    def __init__(
        self,
        host: str,
        port: int,
        timeout: float = 10.0,
        sasl: SaslLogin | None = None,
        tls: ssl.SSLContext | None = None,
        clock: Clock | None = None,
    ) -> None:
        """`tls`: speak TLS (an SSL or SASL_SSL listener) with this context; `clock` tells
        when the SASL session is to be renewed."""
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {host}:{port}: {exc}") from exc
        if tls is not None:
            try:
                sock = tls.wrap_socket(
                    sock, server_hostname=host if tls.check_hostname else None
                )
            except (ssl.SSLError, OSError) as exc:
                sock.close()
                raise ClientError(f"TLS handshake with {host}:{port} failed: {exc}") from exc
        self._sock: socket.socket = sock
        self._sock.settimeout(timeout)
        self._correlation = 0
        self.versions: dict[int, tuple[int, int]] = {}
        self._login = sasl
        #: When the SASL session must be renewed; its count of re-authentications.
        self.reauth = ReauthSchedule(clock if clock is not None else SystemClock())
        self._in_login = False
        try:
            response = self._call(API_VERSIONS_KEY, 0, {})
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
            if sasl is not None:
                self._authenticate(sasl)
        except BaseException:
            self._sock.close()
            raise

    def _authenticate(self, login: SaslLogin) -> None:
        """SaslHandshake, then SaslAuthenticate rounds of PLAIN or SCRAM (KIP-152 framing);
        a refused login raises SaslLoginFailed with the broker's message. The last answer's
        session lifetime schedules the next login."""
        self._in_login = True
        try:
            self._login_rounds(login)
        finally:
            self._in_login = False

    def _login_rounds(self, login: SaslLogin) -> None:
        handshake = self.call(SASL_HANDSHAKE, (1, 1), {"mechanism": login.mechanism})
        if int(handshake.error_code) != 0:
            raise SaslLoginFailed(
                f"the broker does not offer SASL {login.mechanism} here "
                f"(it offers {', '.join(handshake.mechanisms) or 'none'})"
            )
        if login.mechanism == "PLAIN":
            last = self._sasl_round(f"\0{login.username}\0{login.password}".encode())
        else:
            scram = ScramClient(login.mechanism, login.username, login.password)
            server_first = self._sasl_round(scram.first())
            try:
                last = self._sasl_round(scram.final(bytes(server_first.auth_bytes)))
                scram.verify(bytes(last.auth_bytes))
            except SaslFailed as exc:
                raise SaslLoginFailed(str(exc)) from exc
        lifetime = getattr(last, "session_lifetime", None)  # SaslAuthenticate v1+
        self.reauth.authenticated(int(lifetime.total_seconds() * 1000) if lifetime else 0)

    def _sasl_round(self, token: bytes) -> Any:
        response = self.call(SASL_AUTHENTICATE, (0, 2), {"auth_bytes": token})
        if int(response.error_code) != 0:
            raise SaslLoginFailed(response.error_message or error_name(int(response.error_code)))
        return response

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def version_for(self, api_key: int, ours: tuple[int, int]) -> int:
        theirs = self.versions.get(api_key)
        if theirs is None or theirs[1] < ours[0] or theirs[0] > ours[1]:
            raise ClientError(f"the broker does not support API {api_key} in versions {ours}")
        return min(theirs[1], ours[1])

    def call(self, api_key: int, ours: tuple[int, int], body: Mapping[str, Any]) -> Any:
        """Send one request in the best common version and return the decoded response."""
        return self._call(api_key, self.version_for(api_key, ours), body)

    def _call(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        frame, pos = self.call_raw(api_key, version, body)
        entity, _ = entity_reader(response_class(api_key, version))(frame, pos)
        return entity

    def call_raw(self, api_key: int, version: int, body: Mapping[str, Any]) -> tuple[bytes, int]:
        """Send one request; the response frame and where its body starts (for own decoders)."""
        if self._login is not None and not self._in_login and self.reauth.due():
            self._authenticate(self._login)
        self._correlation += 1
        flexible = is_flexible(api_key, version)
        client = CLIENT_ID.encode()
        header = struct.pack(">hhih", api_key, version, self._correlation, len(client)) + client
        if flexible:
            header += b"\x00"
        payload = header + encode_entity(build(request_class(api_key, version), body))
        self._sock.sendall(struct.pack(">i", len(payload)) + payload)
        frame = self._recv(struct.unpack(">i", self._recv(4))[0])
        (correlation,) = struct.unpack_from(">i", frame, 0)
        if correlation != self._correlation:
            raise ClientError(f"correlation id {correlation}, expected {self._correlation}")
        return frame, 4 + (1 if flexible and api_key != API_VERSIONS_KEY else 0)

    def _recv(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self._sock.recv(n - len(buf))
            if not chunk:
                raise ClientError("the broker closed the connection")
            buf += chunk
        return bytes(buf)


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """The first HOST:PORT of a bootstrap list (port 9092 when none is named); a port that is
    not a number in 1-65535 raises InvalidConfig (config.parse_port)."""
    first = bootstrap.split(",", maxsplit=1)[0].strip()
    parts = split_host_port(first)
    if parts is None:
        return first.strip("[]") or "127.0.0.1", 9092
    host, port = parts
    number = parse_port(port, f"bootstrap {bootstrap}", lowest=1) if port else 9092
    return host or "127.0.0.1", number
