"""The connection under a `BrokerChannel`: requests out, whole answers in.

Answers are received straight into the frame decoder's buffers (`asyncio.BufferedProtocol`)
and handed whole to the call waiting for one: no stream reader buffering each piece, copying
it out in two reads and waking its task per piece. A follower makes one call per replication
round, and on a busy host each round starts with cold caches, where every layer of code it
passes through costs (bench/replication_cpu.py --cold, issue 15).
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections import deque

from oncelog.protocol.framing import Frame, FrameDecoder, FrameError


class PeerConnection(asyncio.BufferedProtocol):
    def __init__(self, max_answer_bytes: int) -> None:
        #: Kept: CPython 3.11's `get_running_loop` makes a getpid system call each time, and a
        #: follower asks for it several times a round.
        self.loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(max_answer_bytes)
        self._transport: asyncio.Transport | None = None
        self._answers: deque[Frame] = deque()
        self._waiter: asyncio.Future[None] | None = None
        #: Why the connection ended (None while it is up).
        self._lost: str | None = None
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None

    @classmethod
    async def open(
        cls,
        host: str,
        port: int,
        max_answer_bytes: int,
        ssl_context: ssl.SSLContext | None = None,
        receive_buffer: int = -1,
    ) -> PeerConnection:
        """`receive_buffer`: SO_RCVBUF (-1: the OS's autotuned default), set before the
        handshake as Kafka does, since the window scale we offer there follows it
        (create_connection has no hook before it connects)."""
        loop = asyncio.get_running_loop()
        server_hostname = host if ssl_context is not None else None
        if receive_buffer == -1:
            _, conn = await loop.create_connection(
                lambda: cls(max_answer_bytes),
                host,
                port,
                ssl=ssl_context,
                server_hostname=server_hostname,
            )
        else:
            _, conn = await loop.create_connection(
                lambda: cls(max_answer_bytes),
                sock=await _connect(host, port, receive_buffer),
                ssl=ssl_context,
                server_hostname=server_hostname,
            )
        return conn

    # -- asyncio callbacks -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        try:
            frames = self._decoder.received(nbytes)
        except FrameError as exc:
            self._end(f"bad answer: {exc}")
            self.abort()
            return
        if frames:
            self._answers.extend(frames)
            self._wake()

    def eof_received(self) -> bool:
        self._end("connection closed by the peer")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(f"connection lost: {exc}" if exc is not None else "connection closed")

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- for the channel ---------------------------------------------------------------------

    async def send(self, data: bytes) -> None:
        """Write `data`; wait only if the transport's buffer is over its high-water mark."""
        if self._lost is not None or self._transport is None:
            raise EOFError(self._lost or "not connected")
        try:
            self._transport.write(data)
        except RuntimeError as exc:  # uvloop: closed, its connection_lost not yet called
            raise EOFError(f"connection closed: {exc}") from exc
        while self._write_paused and self._lost is None:
            self._drained = self.loop.create_future()
            await self._drained
        if self._lost is not None:
            raise EOFError(self._lost)

    async def answer(self) -> Frame:
        """The next answer frame (without its length prefix)."""
        while not self._answers:
            if self._lost is not None:
                raise EOFError(self._lost)
            self._waiter = self.loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._answers.popleft()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        """Drop the connection now: a call waiting for its answer fails at once."""
        if self._transport is not None:
            self._transport.abort()
        self._end("connection aborted")

    def _end(self, why: str) -> None:
        if self._lost is None:
            self._lost = why
        self._wake()
        self.resume_writing()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


async def _connect(host: str, port: int, receive_buffer: int) -> socket.socket:
    """A socket connected to `host:port` with SO_RCVBUF set before connecting; each address
    tried in turn, as create_connection does."""
    loop = asyncio.get_running_loop()
    error: OSError = OSError(f"no address for {host}")
    for family, kind, proto, _, address in await loop.getaddrinfo(
        host, port, type=socket.SOCK_STREAM
    ):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            error = exc
            continue
        except BaseException:
            sock.close()
            raise
        return sock
    raise error
