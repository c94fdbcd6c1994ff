"""Requests from this broker to another one (replica fetches, OffsetForLeaderEpoch).

Brokers talk to each other with the Kafka protocol itself, so what a follower sends is
what any tool could send and see. One `BrokerChannel` per peer keeps one connection and
sends one request at a time (a follower's fetches to one leader are sequential anyway);
every call has a timeout, and any failure closes the connection so the next call opens a
new one: a peer that restarted or stopped answering is found out by the next request.

Peers are reached on their `inter.broker.listener.name` listener (the host and port of their
registration) with its protocol, as Kafka's brokers do: TLS with that listener's truststore,
SASL with `sasl.mechanism.inter.broker.protocol` and the `username` / `password` of the
listener's JAAS config (`ChannelSecurity`). A SASL session with a lifetime (the peer's
`connections.max.reauth.ms`) is renewed on the same connection before it runs out, as Kafka's
clients do (KIP-368): between two calls, once `security.reauth.ReauthSchedule` says it is due,
a new SaslHandshake and SaslAuthenticate go out before the call's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.serial import entity_reader

from oncelog.clock import Clock, SystemClock
from oncelog.config import BrokerConfig
from oncelog.errors import InvalidConfig
from oncelog.protocol.codec import build, encode_entity, is_flexible, request_class, response_class
from oncelog.protocol.headers import API_VERSIONS_KEY
from oncelog.security.jaas import client_login, parse_jaas
from oncelog.security.plain import client_message
from oncelog.security.reauth import ReauthSchedule
from oncelog.security.sasl_errors import SaslFailed
from oncelog.security.scram import ScramClient
from oncelog.server.peer_connection import PeerConnection
from oncelog.server.startup import StartupError
from oncelog.server.tls import client_context

log = logging.getLogger(__name__)
MAX_RESPONSE_BYTES = 256 * 1024 * 1024


@cache
def _response_reader(api_key: int, version: int) -> Any:
    return entity_reader(response_class(api_key, version))


class PeerUnavailable(Exception):
    """The peer cannot be reached, closed the connection or did not answer in time."""


SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@dataclass(frozen=True, slots=True)
class ChannelSecurity:
    """How this broker's clients reach the inter-broker listener of its peers."""

    ssl_context: ssl.SSLContext | None = None
    mechanism: str | None = None
    username: str = ""
    password: str = ""


def inter_broker_security(config: BrokerConfig) -> ChannelSecurity | None:
    """From the inter-broker listener's protocol; None for PLAINTEXT. StartupError (one
    line) when its SASL login or TLS trust cannot be set up."""
    try:
        listener = config.inter_broker_listener_name
        protocol = config.security_protocol(listener)
    except InvalidConfig as exc:
        raise StartupError(str(exc)) from exc
    if protocol == "PLAINTEXT":
        return None
    context = client_context(config, listener) if protocol in ("SSL", "SASL_SSL") else None
    if protocol == "SSL":
        return ChannelSecurity(context)
    mechanism = config.get("sasl.mechanism.inter.broker.protocol")
    if not mechanism:
        enabled = config.listener_setting(listener, "sasl.enabled.mechanisms")
        assert isinstance(enabled, list) and enabled
        mechanism = enabled[0]
    assert isinstance(mechanism, str)
    text = config.jaas_config(listener, mechanism)
    try:
        login = client_login(parse_jaas(text)) if text is not None else None
    except InvalidConfig as exc:
        raise StartupError(f"inter-broker listener {listener}: {exc}") from exc
    if login is None:
        raise StartupError(
            f"inter-broker listener {listener} uses {protocol}: its JAAS config for {mechanism} "
            f"(listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config or "
            "sasl.jaas.config) needs username and password"
        )
    return ChannelSecurity(context, mechanism, *login)


class BrokerChannel:
    def __init__(
        self,
        node_id: int,
        host: str,
        port: int,
        timeout_s: float,
        client_id: str,
        security: ChannelSecurity | None = None,
        receive_buffer: int = -1,
        clock: Clock | None = None,
    ) -> None:
        """`receive_buffer`: the connection's SO_RCVBUF, -1 for the OS default (Kafka's replica
        fetchers take replica.socket.receive.buffer.bytes, its marker sender and
        AddPartitionsToTxn manager socket.receive.buffer.bytes). `clock` tells when the SASL
        session is to be renewed."""
        self.node_id = node_id
        self.security = security
        #: When the SASL session must be renewed (KIP-368); its count of re-authentications.
        self.reauth = ReauthSchedule(clock if clock is not None else SystemClock())
        self.receive_buffer = receive_buffer
        #: Names the sending broker and its purpose, as Kafka's `broker-1-fetcher-0` does:
        #: the peer's logs (and fault-injecting proxies in tests) can tell who is calling.
        self.client_id = client_id.encode()
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._conn: PeerConnection | None = None
        self._correlation = 0
        #: One call at a time, in arrival order: `_busy` while one runs, the others wait in
        #: `_turns` (asyncio.Lock's `async with`, with an asyncio.timeout per call, was a
        #: fifth of a follower's round; bench/replication_cpu.py, issue 15).
        self._busy = False
        self._turns: deque[asyncio.Future[None]] = deque()
        #: The running call's deadline (loop time) and the one timer that checks it, re-armed
        #: only when it fires early, not made and cancelled per call.
        self._deadline = 0.0
        self._in_call = False
        self._expired = False
        self._watchdog: asyncio.TimerHandle | None = None
        self._watchdog_at = 0.0

    def moved(self, host: str, port: int) -> bool:
        return (host, port) != (self.host, self.port)

    async def call(
        self, api_key: int, version: int, body: Mapping[str, Any], timeout_s: float | None = None
    ) -> Any:
        """Send one request and return the decoded response; PeerUnavailable on any failure."""
        payload = encode_entity(build(request_class(api_key, version), body))
        frame, pos = await self.call_raw(api_key, version, payload, timeout_s)
        entity, _ = _response_reader(api_key, version)(frame, pos)
        return entity

    async def call_raw(
        self, api_key: int, version: int, payload: bytes, timeout_s: float | None = None
    ) -> tuple[bytes, int]:
        """Send one request whose body is already encoded; return the response frame and
        where its body starts, for a caller that reads it itself (the replica fetcher)."""
        if self._busy:
            await self._wait_turn()
        else:
            self._busy = True
        try:
            timeout = timeout_s or self.timeout_s
            try:
                if self._conn is None:
                    async with asyncio.timeout(timeout):
                        await self._connect()
                elif self.reauth.due():
                    async with asyncio.timeout(timeout):
                        await self._reauthenticate()
                return await self._timed_exchange(api_key, version, payload, timeout)
            except (
                OSError, EOFError, TimeoutError, asyncio.IncompleteReadError, SaslFailed
            ) as exc:  # fmt: skip
                self.close()
                raise PeerUnavailable(
                    f"broker {self.node_id} at {self.host}:{self.port}: {exc or type(exc).__name__}"
                ) from exc
            except Exception:
                self.close()
                raise
            except asyncio.CancelledError:
                self.close()  # its answer may still come: not for the next call to read
                raise
        finally:
            self._next_turn()

    async def _wait_turn(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._turns.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._next_turn()  # handed the turn as it was cancelled: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._turns.remove(waiter)
            raise

    def _next_turn(self) -> None:
        while self._turns:
            waiter = self._turns.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the turn passes on: still busy
                return
        self._busy = False

    async def _connect(self) -> None:
        context = self.security.ssl_context if self.security is not None else None
        self.reauth.reset()
        self._conn = await PeerConnection.open(
            self.host, self.port, MAX_RESPONSE_BYTES, context, self.receive_buffer
        )
        if self.security is not None and self.security.mechanism is not None:
            await self._authenticate(self.security)

    async def _reauthenticate(self) -> None:
        """Renew the SASL session on the open connection (KIP-368): no call is in flight, so
        the peer reads the new SaslHandshake right after the last answer. A connection that
        fails meanwhile is replaced by a new one with a first login, so the call goes on; a
        refused login fails the call (SaslFailed), as a first one would."""
        assert self.security is not None
        try:
            await self._authenticate(self.security)
        except (OSError, EOFError) as exc:  # IncompleteReadError is an EOFError
            log.info(
                "re-authentication with broker %d failed (%s): reconnecting", self.node_id, exc
            )
            self.close()
            await self._connect()
            return
        log.debug(
            "re-authenticated with broker %d at %s:%d (%s, %d so far)",
            self.node_id,
            self.host,
            self.port,
            self.client_id.decode(),
            self.reauth.reauthentications,
        )

    async def _timed_exchange(
        self, api_key: int, version: int, payload: bytes, timeout: float
    ) -> tuple[bytes, int]:
        """`_exchange` within `timeout`: past it the watchdog aborts the connection, which
        ends the read or drain in progress, and the call raises TimeoutError."""
        assert self._conn is not None
        loop = self._conn.loop
        deadline = self._deadline = loop.time() + timeout
        if self._watchdog is None or self._watchdog_at > deadline:
            if self._watchdog is not None:
                self._watchdog.cancel()
            self._watchdog = loop.call_at(deadline, self._watch)
            self._watchdog_at = deadline
        self._in_call, self._expired = True, False
        try:
            answer = await self._exchange(api_key, version, payload)
        except (OSError, EOFError) as exc:  # IncompleteReadError is an EOFError
            if self._expired:
                raise TimeoutError(f"no answer within {timeout:g} s") from exc
            raise
        finally:
            self._in_call = False
        if self._expired:  # the answer was in before the abort: the next call reconnects
            self.close()
        return answer

    def _watch(self) -> None:
        self._watchdog = None
        if not self._in_call:
            return  # idle: the next call arms it again
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:  # a later call moved the deadline on
            self._watchdog = loop.call_at(self._deadline, self._watch)
            self._watchdog_at = self._deadline
            return
        self._expired = True
        if self._conn is not None:
            self._conn.abort()

    async def _authenticate(self, security: ChannelSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 rounds (SaslFailed on a refusal); the
        last answer's session lifetime schedules the next login."""
        mechanism = security.mechanism
        assert mechanism is not None
        shake = await self._request(SASL_HANDSHAKE, 1, {"mechanism": mechanism})
        if shake.error_code != 0:
            raise SaslFailed(f"{mechanism} refused by the peer (error {int(shake.error_code)})")
        if mechanism == "PLAIN":
            last = await self._sasl_round(client_message(security.username, security.password))
        else:
            scram = ScramClient(mechanism, security.username, security.password)
            server_first = await self._sasl_round(scram.first())
            last = await self._sasl_round(scram.final(bytes(server_first.auth_bytes)))
            scram.verify(bytes(last.auth_bytes))
        self.reauth.authenticated(_lifetime_ms(last))

    async def _sasl_round(self, token: bytes) -> Any:
        answer = await self._request(SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if answer.error_code != 0:
            raise SaslFailed(f"SASL login refused by the peer: {answer.error_message}")
        return answer

    async def _request(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        payload = encode_entity(build(request_class(api_key, version), body))
        frame, pos = await self._exchange(api_key, version, payload)
        entity, _ = _response_reader(api_key, version)(frame, pos)
        return entity

    async def _exchange(self, api_key: int, version: int, payload: bytes) -> tuple[bytes, int]:
        conn = self._conn
        assert conn is not None
        self._correlation += 1
        flexible = is_flexible(api_key, version)
        client_id = self.client_id
        header = struct.pack(">hhih", api_key, version, self._correlation, len(client_id))
        header += client_id + (b"\x00" if flexible else b"")
        await conn.send(struct.pack(">i", len(header) + len(payload)) + header + payload)
        answer = await conn.answer()
        if len(answer) < 4:
            raise EOFError(f"response of {len(answer)} bytes")
        # A large answer arrives as a view of the buffer it was received into: callers get
        # bytes, as they always have (kio's readers, the records a follower appends).
        frame = answer if isinstance(answer, bytes) else answer.tobytes()
        (correlation,) = struct.unpack_from(">i", frame, 0)
        if correlation != self._correlation:
            raise EOFError(f"correlation id {correlation}, expected {self._correlation}")
        return frame, 4 + (1 if flexible and api_key != API_VERSIONS_KEY else 0)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None
        self.reauth.reset()
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None


def _lifetime_ms(answer: Any) -> int:
    """SaslAuthenticate v1+'s session_lifetime_ms (kio reads it as a timedelta)."""
    lifetime = getattr(answer, "session_lifetime", None)
    if lifetime is None:
        return 0
    return int(lifetime.total_seconds() * 1000)
