"""When the broker's own clients renew their SASL session (KIP-368), with a manual clock:
the schedule alone, then a BrokerChannel against a peer that runs the broker's own
SaslAuthenticator on the same manual clock, so a session that ran out would be closed."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable

import pytest

from oncelog.clock import ManualClock
from oncelog.protocol.registry import is_supported
from oncelog.security.plain import PlainServer
from oncelog.security.reauth import ReauthSchedule
from oncelog.security.sasl import Answer, Forward, Reject, SaslAuthenticator
from oncelog.server.inter_broker import BrokerChannel, ChannelSecurity, PeerUnavailable

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36


def test_no_lifetime_never_due() -> None:
    clock = ManualClock()
    schedule = ReauthSchedule(clock)
    schedule.authenticated(0)
    clock.advance(10**9)
    assert not schedule.due()
    assert schedule.reauth_at_ms is None and schedule.expires_at_ms is None


@pytest.mark.parametrize(("jitter", "share"), [(0.0, 0.85), (0.5, 0.90), (0.999999, 0.95)])
def test_due_between_85_and_95_percent_of_the_lifetime(jitter: float, share: float) -> None:
    clock = ManualClock(monotonic_ms=5_000)
    schedule = ReauthSchedule(clock, jitter=lambda: jitter)
    schedule.authenticated(10_000)
    at = 5_000 + round(10_000 * share)
    assert schedule.expires_at_ms == 15_000
    assert schedule.reauth_at_ms is not None and abs(schedule.reauth_at_ms - at) <= 1
    clock.advance(schedule.reauth_at_ms - 5_000 - 1)
    assert not schedule.due()
    clock.advance(1)
    assert schedule.due()
    clock.advance(10**6)  # long idle: still due (the peer takes a SaslHandshake late too)
    assert schedule.due()


def test_the_random_point_stays_in_the_window() -> None:
    clock = ManualClock()
    points = set()
    for _ in range(200):
        schedule = ReauthSchedule(clock)
        schedule.authenticated(1_000)
        assert schedule.reauth_at_ms is not None
        assert 850 <= schedule.reauth_at_ms - clock.monotonic_ms() <= 950
        points.add(schedule.reauth_at_ms)
    assert len(points) > 10  # jittered, not one point for every connection


def test_each_login_counts_from_its_own_answer() -> None:
    clock = ManualClock()
    schedule = ReauthSchedule(clock, jitter=lambda: 0.0)
    schedule.authenticated(1_000)
    assert schedule.reauthentications == 0
    clock.advance(900)
    assert schedule.due()
    schedule.authenticated(1_000)  # the re-authentication's answer
    assert schedule.reauthentications == 1
    assert not schedule.due()
    assert schedule.reauth_at_ms == 900 + 850
    schedule.reset()  # the connection closed: its next login is a first one
    assert not schedule.due()
    schedule.authenticated(1_000)
    assert schedule.reauthentications == 1


class SaslPeer:
    """A peer running the broker's SaslAuthenticator (PLAIN, `connections.max.reauth.ms`) on
    the test's manual clock; it answers other requests with an empty body and, like the
    broker's connection, closes a session past its lifetime at its next other request."""

    def __init__(self, clock: ManualClock, reauth_ms: int) -> None:
        self.clock = clock
        self.reauth_ms = reauth_ms
        self.connections = 0
        self.expired_closes = 0
        #: Drop the connection at the next re-authentication's SaslHandshake.
        self.drop_reauth = False
        #: API keys received, in order, over every connection.
        self.received: list[int] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        auth = SaslAuthenticator(
            ["PLAIN"],
            lambda _m: PlainServer({"broker": "secret"}),
            supports_api_version=is_supported,
            reauth_ms=self.reauth_ms,
            now_ms=self.clock.monotonic_ms,
        )
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                api_key, _, correlation = struct.unpack_from(">hhi", frame)
                self.received.append(api_key)
                if auth.authenticated and api_key == SASL_HANDSHAKE:
                    if self.drop_reauth:
                        self.drop_reauth = False
                        return
                    auth.reauthenticate()
                if not auth.authenticated:
                    step = auth.receive(frame)
                    if isinstance(step, Reject):
                        return
                    if isinstance(step, Answer):
                        writer.write(b"".join(bytes(part) for part in step.data))
                        await writer.drain()
                        if step.close is not None:
                            return
                        continue
                    assert isinstance(step, Forward)
                elif auth.expires_ms is not None and self.clock.monotonic_ms() > auth.expires_ms:
                    self.expired_closes += 1
                    return
                body = struct.pack(">i", correlation)
                writer.write(struct.pack(">i", len(body)) + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def run(test: Callable[[SaslPeer, ManualClock, int], Awaitable[None]], reauth_ms: int) -> None:
    async def main() -> None:
        clock = ManualClock()
        peer = SaslPeer(clock, reauth_ms)
        server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
        try:
            await test(peer, clock, server.sockets[0].getsockname()[1])
        finally:
            server.close()

    asyncio.run(main())


LOGIN = ChannelSecurity(mechanism="PLAIN", username="broker", password="secret")


async def ping(channel: BrokerChannel) -> None:
    await channel.call_raw(API_VERSIONS, 0, b"")


def test_the_channel_renews_its_session_on_the_same_connection() -> None:
    async def scenario(peer: SaslPeer, clock: ManualClock, port: int) -> None:
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "t", LOGIN, clock=clock)
        channel.reauth = ReauthSchedule(clock, jitter=lambda: 0.5)  # renewed at 90 %
        await ping(channel)
        assert peer.received == [SASL_HANDSHAKE, SASL_AUTHENTICATE, API_VERSIONS]
        for _ in range(300):  # 30 lifetimes, a call every tenth of one
            clock.advance(100)
            await ping(channel)
        assert peer.connections == 1 and peer.expired_closes == 0
        assert channel.reauth.reauthentications == 33  # every 900 ms
        # each renewal is a handshake and an authenticate between two calls
        assert peer.received.count(SASL_HANDSHAKE) == 34
        assert peer.received.count(SASL_AUTHENTICATE) == 34
        assert peer.received.count(API_VERSIONS) == 301
        channel.close()

    run(scenario, reauth_ms=1_000)


def test_an_idle_channel_renews_before_its_next_call() -> None:
    """The marker sender's and verifier's channels may sit idle past the lifetime: the
    next call renews first (the peer takes a SaslHandshake after the end of the session)."""

    async def scenario(peer: SaslPeer, clock: ManualClock, port: int) -> None:
        channel = BrokerChannel(2, "127.0.0.1", port, 5.0, "t", LOGIN, clock=clock)
        await ping(channel)
        clock.advance(60_000)
        await ping(channel)
        assert peer.connections == 1 and peer.expired_closes == 0
        assert channel.reauth.reauthentications == 1
        channel.close()

    run(scenario, reauth_ms=1_000)


def test_without_renewal_the_peer_closes_the_expired_session() -> None:
    """What the fix prevents: a channel that never renewed is closed at its next call
    once the lifetime has passed, and the call fails."""

    async def scenario(peer: SaslPeer, clock: ManualClock, port: int) -> None:
        channel = BrokerChannel(3, "127.0.0.1", port, 5.0, "t", LOGIN, clock=clock)
        await ping(channel)
        channel.reauth.reauth_at_ms = None  # as the channel behaved before KIP-368
        clock.advance(1_001)
        with pytest.raises(PeerUnavailable):
            await ping(channel)
        assert peer.expired_closes == 1
        channel.close()

    run(scenario, reauth_ms=1_000)


def test_a_session_without_lifetime_is_never_renewed() -> None:
    async def scenario(peer: SaslPeer, clock: ManualClock, port: int) -> None:
        channel = BrokerChannel(4, "127.0.0.1", port, 5.0, "t", LOGIN, clock=clock)
        for _ in range(5):
            await ping(channel)
            clock.advance(3_600_000)
        assert peer.received.count(SASL_HANDSHAKE) == 1
        assert channel.reauth.reauthentications == 0
        channel.close()

    run(scenario, reauth_ms=0)


def test_a_connection_lost_at_renewal_is_replaced_and_the_call_goes_on() -> None:
    async def scenario(peer: SaslPeer, clock: ManualClock, port: int) -> None:
        channel = BrokerChannel(5, "127.0.0.1", port, 5.0, "t", LOGIN, clock=clock)
        await ping(channel)
        peer.drop_reauth = True
        clock.advance(960)  # past 95 %: due whatever the jitter
        await ping(channel)  # renewal fails, a new connection logs in, the call is answered
        assert peer.connections == 2 and peer.expired_closes == 0
        assert peer.received.count(API_VERSIONS) == 2
        assert channel.reauth.reauthentications == 0  # a first login on the new connection
        clock.advance(960)
        await ping(channel)
        assert peer.connections == 2 and channel.reauth.reauthentications == 1
        channel.close()

    run(scenario, reauth_ms=1_000)
