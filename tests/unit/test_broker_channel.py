"""BrokerChannel's turns and timeouts against a real socket on 127.0.0.1.

The channel serves one call at a time in arrival order, and a call the peer does not answer
ends with PeerUnavailable once its timeout passes; both without an asyncio.Lock or a timer
per call (the replica fetcher makes a call per replication round)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from oncelog.server.inter_broker import BrokerChannel, PeerUnavailable

API_VERSIONS = 18


class Peer:
    """A peer that answers each request (v0 framing) with its correlation id and the
    request's client id reversed, after `delay` seconds, or never when `silent`."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.silent = False
        #: Bytes of padding after the marker in each answer.
        self.pad = 0
        #: "half": send half an answer and close; "bad": announce a negative length.
        self.misbehave = ""
        self.outstanding = 0
        self.most_outstanding = 0
        self.connections = 0
        self.served: list[int] = []
        #: The window scale each connecting channel offered in its handshake.
        self.window_scales: list[int] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        info = writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
        self.window_scales.append(info[6] & 0x0F)  # tcpi_snd_wscale: the peer's offer
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                _, _, correlation, id_len = struct.unpack_from(">hhih", frame)
                marker = frame[10 : 10 + id_len]
                self.outstanding += 1
                self.most_outstanding = max(self.most_outstanding, self.outstanding)
                if self.silent:
                    continue
                await asyncio.sleep(self.delay)
                self.outstanding -= 1
                self.served.append(correlation)
                body = struct.pack(">i", correlation) + marker[::-1] + bytes(self.pad)
                framed = struct.pack(">i", len(body)) + body
                if self.misbehave == "half":
                    writer.write(framed[: len(framed) // 2])
                    await writer.drain()
                    return
                if self.misbehave == "bad":
                    framed = struct.pack(">i", -5) + body
                writer.write(framed)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def reset(self) -> None:
        self.misbehave = ""
        self.pad = 0


def run(test: Callable[[Peer, int], Awaitable[None]]) -> None:
    async def main() -> None:
        peer = Peer()
        server = await asyncio.start_server(peer.handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            await test(peer, port)
        finally:
            server.close()

    asyncio.run(main())


async def call(channel: BrokerChannel, timeout_s: float | None = None) -> bytes:
    frame, pos = await channel.call_raw(API_VERSIONS, 0, b"", timeout_s)
    return bytes(frame[pos:])


def test_concurrent_calls_go_one_at_a_time_in_order() -> None:
    async def scenario(peer: Peer, port: int) -> None:
        peer.delay = 0.01
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        answers = await asyncio.gather(*(call(channel) for _ in range(8)))
        assert answers == [b"cba"] * 8
        assert peer.most_outstanding == 1
        assert peer.served == list(range(1, 9))
        channel.close()

    run(scenario)


def test_a_silent_peer_times_the_call_out_and_the_next_call_reconnects() -> None:
    async def scenario(peer: Peer, port: int) -> None:
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        assert await call(channel) == b"cba"  # a watchdog is armed for 5 s from here
        peer.silent = True
        started = time.monotonic()
        with pytest.raises(PeerUnavailable, match=r"no answer within 0\.2 s"):
            await call(channel, 0.2)
        took = time.monotonic() - started
        assert 0.19 <= took < 2.0, took
        peer.silent = False
        assert await call(channel) == b"cba"
        assert peer.connections == 2
        channel.close()

    run(scenario)


def test_a_late_answer_after_quick_ones_still_times_out() -> None:
    """The deadline moves with every call; the one timer follows it."""

    async def scenario(peer: Peer, port: int) -> None:
        channel = BrokerChannel(1, "127.0.0.1", port, 0.3, "abc")
        for _ in range(20):
            assert await call(channel) == b"cba"
        await asyncio.sleep(0.35)  # the first call's deadline passes with nothing running
        assert await call(channel) == b"cba"
        peer.delay = 1.0
        with pytest.raises(PeerUnavailable, match=r"no answer within 0\.3 s"):
            await call(channel)
        channel.close()

    run(scenario)


def test_a_cancelled_waiting_call_leaves_the_turns_to_the_others() -> None:
    async def scenario(peer: Peer, port: int) -> None:
        peer.delay = 0.05
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        first = asyncio.create_task(call(channel))
        waiting = asyncio.create_task(call(channel))
        third = asyncio.create_task(call(channel))
        await asyncio.sleep(0.01)
        waiting.cancel()
        results: list[Any] = await asyncio.gather(first, waiting, third, return_exceptions=True)
        assert results[0] == b"cba"
        assert isinstance(results[1], asyncio.CancelledError)
        assert results[2] == b"cba"
        assert await call(channel) == b"cba"
        assert peer.served == [1, 2, 3]
        channel.close()

    run(scenario)


def test_a_call_cancelled_as_its_turn_comes_passes_the_turn_on() -> None:
    async def scenario(peer: Peer, port: int) -> None:
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        channel._busy = True  # a call runs
        second = asyncio.create_task(channel._wait_turn())
        third = asyncio.create_task(channel._wait_turn())
        await asyncio.sleep(0)
        channel._next_turn()  # the running call ends: `second`'s turn...
        second.cancel()  # ...but it is cancelled before it runs
        with pytest.raises(asyncio.CancelledError):
            await second
        await asyncio.wait_for(third, 1.0)  # the turn went on to `third`
        assert channel._busy
        channel._next_turn()
        assert not channel._busy

    run(scenario)


def test_a_call_cancelled_in_flight_leaves_a_fresh_connection_to_the_next() -> None:
    """Its answer may still come; the next call must not take it for its own."""

    async def scenario(peer: Peer, port: int) -> None:
        peer.delay = 0.05
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        first = asyncio.create_task(call(channel))
        await asyncio.sleep(0.02)  # sent, not answered
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        assert await call(channel) == b"cba"
        assert peer.connections == 2
        channel.close()

    run(scenario)


def test_an_unreachable_peer_is_peer_unavailable() -> None:
    async def scenario(peer: Peer, port: int) -> None:
        channel = BrokerChannel(1, "127.0.0.1", 1, 1.0, "abc")
        with pytest.raises(PeerUnavailable, match=r"broker 1 at 127\.0\.0\.1:1"):
            await call(channel)
        assert not channel._busy

    run(scenario)


@pytest.mark.parametrize("pad", [100_000, 700_000, 3_000_000])
def test_large_answers_arrive_whole(pad: int) -> None:
    """Past the decoder's scratch buffer an answer is received into one of its own, and
    past 1 MiB gathered in chunks; the caller gets the whole answer as bytes either way."""

    async def scenario(peer: Peer, port: int) -> None:
        peer.pad = pad
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        for _ in range(3):
            frame, pos = await channel.call_raw(API_VERSIONS, 0, b"")
            assert isinstance(frame, bytes)
            assert frame[pos:] == b"cba" + bytes(pad)
        channel.close()

    run(scenario)


@pytest.mark.parametrize(
    ("misbehave", "error"),
    [("half", "connection closed by the peer"), ("bad", "bad answer: frame size -5")],
)
def test_a_broken_answer_is_peer_unavailable_and_the_next_call_reconnects(
    misbehave: str, error: str
) -> None:
    async def scenario(peer: Peer, port: int) -> None:
        channel = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        peer.misbehave = misbehave
        with pytest.raises(PeerUnavailable, match=error):
            await call(channel)
        peer.reset()
        assert await call(channel) == b"cba"
        assert peer.connections == 2
        channel.close()

    run(scenario)


def test_a_receive_buffer_is_set_before_the_handshake() -> None:
    """SO_RCVBUF (replica.socket.receive.buffer.bytes on a follower's channel) is in place
    when the channel connects: the window scale it offers follows it, as in Kafka."""

    async def scenario(peer: Peer, port: int) -> None:
        small = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc", receive_buffer=4096)
        os_default = BrokerChannel(1, "127.0.0.1", port, 5.0, "abc")
        assert await call(small) == b"cba"
        assert await call(os_default) == b"cba"
        assert peer.window_scales[0] == 0 < peer.window_scales[1]
        assert small._conn is not None and small._conn._transport is not None
        sock = small._conn._transport.get_extra_info("socket")
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 2 * 4096  # Linux doubles
        small.close()
        os_default.close()

    run(scenario)


def test_a_channel_with_a_receive_buffer_resolves_names_and_a_refusal_is_unavailable() -> None:
    async def scenario(peer: Peer, port: int) -> None:
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            closed_port = taken.getsockname()[1]  # bound, not listening: refused
            channel = BrokerChannel(1, "localhost", closed_port, 5.0, "abc", receive_buffer=4096)
            with pytest.raises(PeerUnavailable, match=r"Errno 111"):
                await call(channel)
        channel = BrokerChannel(1, "localhost", port, 5.0, "abc", receive_buffer=4096)
        assert await call(channel) == b"cba"
        channel.close()

    run(scenario)
