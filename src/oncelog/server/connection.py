"""One client connection: frames in, responses out, strictly in request order.

Requests of a connection are handled one at a time, as Kafka does: while a Fetch waits in
the purgatory the connection's later requests wait too, so responses never overtake each
other. Reading pauses when too many requests are queued (`queued.max.requests`), when the
queued requests add up to `socket.request.max.bytes` (so one connection holds at most about
twice that: Kafka reads one request at a time), when the broker's budget for waiting requests
is spent (`queued.max.request.bytes`, server/request_memory.py), or when the socket's send
buffer is full: what one client can make us hold is bounded. A client over one of its quotas
gets its answer at once, with the throttle time in it, and then nothing more is read or
handled for that long (Kafka's muted channel, KIP-219).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from collections import deque
from collections.abc import Callable
from typing import Any, cast

from oncelog.broker.context import ANONYMOUS
from oncelog.broker.dispatcher import Close, Dispatcher, NoReply, Pending, Reply
from oncelog.broker.handlers import CloseConnection
from oncelog.broker.purgatory import Delayed
from oncelog.fileio import FileRegion
from oncelog.protocol.codec import Buffer
from oncelog.protocol.framing import Frame, FrameDecoder, FrameError
from oncelog.protocol.headers import HeaderError, peek_ids
from oncelog.security.sasl import Answer, Forward, Reject, SaslAuthenticator
from oncelog.server.request_memory import RequestMemory
from oncelog.server.sendfile import send_direct, take
from oncelog.server.tls import ssl_principal

log = logging.getLogger(__name__)
SASL_HANDSHAKE_KEY = 17
MAX_AUTH_FRAME = 524288
_ids = itertools.count(1)


class Connection(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatcher: Dispatcher,
        *,
        max_frame_bytes: int,
        max_queued: int,
        on_pending: Callable[[Delayed], None],
        on_close: Callable[[Connection], None],
        now_ms: Callable[[], int],
        listener_name: str = "",
        authenticator: SaslAuthenticator | None = None,
        max_auth_frame_bytes: int = 524288,
        failed_auth_delay_ms: int = 100,
        memory: RequestMemory | None = None,
        admit: Callable[[Connection], str | None] | None = None,
        send_buffer: int = -1,
    ) -> None:
        """With `authenticator` (a SASL listener) frames go to it until it has authenticated
        the client; only then to the dispatcher, with its principal. `send_buffer`: the
        socket's SO_SNDBUF (socket.send.buffer.bytes; -1 leaves the OS's autotuning)."""
        self.id = f"conn-{next(_ids)}"
        self._dispatcher = dispatcher
        #: The broker's client quotas, whose `muted` says when a request throttled us.
        self._quotas = dispatcher.broker.quotas
        self._max_frame_bytes = max_frame_bytes
        self._decoder = FrameDecoder(
            max_frame_bytes if authenticator is None else min(max_auth_frame_bytes, max_frame_bytes)
        )
        self.listener_name = listener_name
        self._auth = authenticator
        self._failed_auth_delay_s = failed_auth_delay_ms / 1000
        #: Kafka's principal: the SASL user, else the TLS client certificate's subject.
        self.principal = ANONYMOUS
        self._max_queued = max_queued
        self._memory = memory
        #: Asked once the peer is known: why the connection is refused, or None.
        self._admit = admit
        self._send_buffer = send_buffer
        #: Counted by `admit` (so its closing is counted off again).
        self.admitted = False
        self.client_ip = ""
        #: Bytes of the frames in `_queue`, and what `memory` was last told we hold.
        self._queued_bytes = 0
        self._held = 0
        #: The frame being received was granted its size out of `memory`: it is read to
        #: its end whatever the budget (as Kafka's pool grants a whole request).
        self._granted = False
        self._on_pending = on_pending
        self._on_close = on_close
        self._now_ms = now_ms
        #: Frames waiting their turn, with their arrival on the metrics' timer (a request's
        #: latency counts its time queued behind earlier ones, as Kafka's TotalTimeMs does)
        #: and on `now_ms` (a SASL session's end is checked against a request's arrival).
        self._queue: deque[tuple[Frame, float, int]] = deque()
        self._waiting: Delayed | None = None
        self._transport: asyncio.Transport | None = None
        #: The plain TCP socket under the transport (-1 over TLS), and our own socket object
        #: on a duplicate of it for sendfile, made on first use (uvloop's pseudo-socket makes
        #: a new socket object for every setsockopt).
        self._plain_fd = -1
        self._socket: socket.socket | None = None
        #: Response pieces not yet handed to the transport (a slow reader), in order.
        self._unsent: list[Buffer] = []
        #: Descriptors of the file regions among them, duplicated to outlive their segment.
        self._owned_fds: set[int] = set()
        self._read_paused = False
        self._write_paused = False
        #: Throttled by a client quota: nothing is read or handled until the timer ends it.
        self._muted: asyncio.TimerHandle | None = None
        self.peer = "?"
        self.client_host = ""
        self.last_active_ms = now_ms()
        self.closed = False

    # -- asyncio callbacks -------------------------------------------------------------------

    def admit(self, peer: tuple[Any, ...] | None) -> bool:
        """Note the peer's address and ask the connection quotas, once; False when refused
        (then closed). A TLS listener asks before the handshake (server/tls_accept.py)."""
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_ip = peer[0] if peer else ""
        self.client_host = f"/{self.client_ip}" if peer else ""
        if self._admit is None or self.admitted:
            return True
        refused = self._admit(self)
        if refused is not None:
            log.info("Rejected connection from %s: %s", self.client_host, refused)
            self.closed = True
            return False
        self.admitted = True
        return True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        if not self.admit(transport.get_extra_info("peername")):
            transport.close()
            return
        if self._send_buffer != -1:
            sock = transport.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)
        if self._auth is None:
            self.principal = ssl_principal(transport.get_extra_info("peercert")) or ANONYMOUS
        if transport.get_extra_info("ssl_object") is None:
            self._plain_fd = transport.get_extra_info("socket").fileno()

    def get_buffer(self, sizehint: int) -> memoryview:
        """The socket reads straight into the framer's buffers (a large Produce into a
        buffer of its own), not into a bytes object we would copy again."""
        return self._decoder.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active_ms = now_ms = self._now_ms()
        try:
            frames = self._decoder.received(nbytes)
        except FrameError as exc:
            self.close(str(exc))
            return
        if not frames:
            if self._memory is not None:  # a frame still arriving holds memory too
                self._update_reading()
            return
        self._granted = False  # any frame still arriving is a new one
        arrived = self._dispatcher.broker.metrics.now()
        for frame in frames:
            self._queue.append((frame, arrived, now_ms))
            self._queued_bytes += len(frame)
        self._drain_queue()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._muted is not None:
            self._muted.cancel()
            self._muted = None
        self._quotas.muted.pop(self.id, None)
        self._queue.clear()
        self._queued_bytes = 0
        if self._memory is not None:
            self._memory.release(self)
        self._unsent = []
        self._release_regions()
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        self._on_close(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self._unsent:
            self._send_unsent()
        self._update_reading()
        self._drain_queue()

    # -- request processing ------------------------------------------------------------------

    def _drain_queue(self) -> None:
        """Answer queued requests in order; the replies of one pass go out in one write."""
        out: list[Buffer] = []
        while (
            self._queue
            and self._waiting is None
            and not self.closed
            and not self._write_paused
            and not self._unsent
            and self._muted is None
        ):
            frame, arrived, arrived_ms = self._queue.popleft()
            self._queued_bytes -= len(frame)
            if self._auth is not None and self._authenticating(frame, arrived_ms):
                step = self._auth.receive(bytes(frame))
                if isinstance(step, Answer):
                    out.extend(step.data)
                    if self._auth.authenticated:
                        self.principal = self._auth.principal or ANONYMOUS
                        self._decoder.max_frame_bytes = self._max_frame_bytes
                    if step.close is not None:
                        self._send(out)
                        out = []
                        self._close_after_failed_authentication(step.close)
                    continue
                if isinstance(step, Reject):
                    self._send(out)
                    out = []
                    self.close(step.reason)
                    continue
                assert isinstance(step, Forward)
            if self.closed:
                break
            outcome = self._dispatcher.dispatch(
                frame,
                self.id,
                self.client_host,
                self.principal,
                self.listener_name,
                received=arrived,
            )
            if self._quotas.muted:
                self._mute_if_throttled()
            if isinstance(outcome, Reply):
                out.extend(outcome.data)
                if any(isinstance(part, FileRegion) for part in outcome.data):
                    self._send(out)  # now: its files may close once the next request ran
                    out = []
            elif isinstance(outcome, Pending):
                self._wait_for(outcome)
            elif isinstance(outcome, Close):
                self._send(out)
                out = []
                self.close(outcome.reason)
            else:
                assert isinstance(outcome, NoReply)
        self._send(out)
        self._update_reading()

    def _authenticating(self, frame: Frame, arrived_ms: int) -> bool:
        """True when `frame` belongs to the SASL exchange: before authentication, and a
        SaslHandshake re-authenticating an expiring session (KIP-368). An authenticated
        session past its lifetime is closed on its next other request, as Kafka does: one
        that *arrived* past it. Kafka reads a connection's next request only once the last
        one was answered; we read ahead, so a request the client sent in time may wait here
        behind a slow one (an acks=all Produce, a long-polling Fetch) until the session has
        ended, while the client has begun its re-authentication after it (librdkafka: at
        90 % of the lifetime, its SaslHandshake queued behind the requests in flight).
        Closing then cut the client off in the middle of its handshake."""
        auth = self._auth
        assert auth is not None
        if not auth.authenticated:
            return True
        if auth.expires_ms is None:
            return False
        try:
            api_key = peek_ids(frame)[0]
        except HeaderError:
            return False
        if api_key == SASL_HANDSHAKE_KEY:
            auth.reauthenticate()
            self._decoder.max_frame_bytes = min(self._max_frame_bytes, MAX_AUTH_FRAME)
            return True
        if arrived_ms > auth.expires_ms:
            self.close("SASL session expired (connections.max.reauth.ms)")
        return False

    def _wait_for(self, pending: Pending) -> None:
        delayed = pending.delayed

        def done(response: Any) -> None:
            if self._waiting is not delayed:
                return
            self._waiting = None
            if isinstance(response, CloseConnection):
                self.close(str(response))
                return
            if not self.closed:
                self._send(pending.finish(response))
                if self._quotas.muted:
                    self._mute_if_throttled()
                self._drain_queue()

        delayed.on_done = done
        self._waiting = delayed
        self._on_pending(delayed)

    def _mute_if_throttled(self) -> None:
        """Take the throttle time the last request's quota set for this connection, if any,
        and stop reading and handling requests until it has passed."""
        throttle_ms = self._quotas.muted.pop(self.id, 0)
        if throttle_ms <= 0 or self.closed:
            return
        if self._muted is not None:
            self._muted.cancel()
        self._muted = asyncio.get_running_loop().call_later(throttle_ms / 1000, self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._muted = None
        if self.closed:
            return
        self._update_reading()
        self._drain_queue()

    def _send(self, parts: list[Buffer]) -> None:
        transport = self._transport
        if not parts or transport is None or self.closed:
            return
        if self._unsent:
            try:
                self._unsent.extend(self._detached(parts))  # behind what still waits
            except OSError as exc:
                self.close(f"send failed: {exc}")
            return
        if not any(isinstance(part, FileRegion) for part in parts):
            transport.writelines(parts)  # type: ignore[arg-type]  # no FileRegion here
            return
        self._unsent = parts
        self._send_unsent()

    def _send_unsent(self) -> None:
        """Send what waits: with sendfile while the transport has nothing queued, else the
        next piece through the transport, up past its high-water mark so that it calls
        `resume_writing` once drained, which sends on from there. The regions left waiting
        hold their own descriptors: the segment may be closed meanwhile (retention)."""
        transport = self._transport
        assert transport is not None
        high = transport.get_write_buffer_limits()[1]
        try:
            while self._unsent and not self._write_paused and not self.closed:
                parts, self._unsent = self._unsent, []
                if self._plain_fd >= 0 and transport.get_write_buffer_size() == 0:
                    if self._socket is None:
                        self._socket = socket.socket(fileno=os.dup(self._plain_fd))
                    parts = send_direct(self._socket, parts)
                if not parts:
                    break
                head, rest = take(parts, high + 1)
                transport.writelines(head)
                self._unsent = self._detached(rest)
        except OSError as exc:
            self.close(f"send failed: {exc}")
        if not self._unsent:
            self._release_regions()

    def _detached(self, parts: list[Buffer]) -> list[Buffer]:
        """`parts` with each FileRegion on a descriptor of its own (kept until sent), or read
        into memory when no descriptor is left (EMFILE: many slow readers)."""
        out: list[Buffer] = []
        for part in parts:
            if isinstance(part, FileRegion) and part.fd not in self._owned_fds:
                try:
                    fd = os.dup(part.fd)
                except OSError:
                    out.append(part.read())
                    continue
                self._owned_fds.add(fd)
                out.append(FileRegion(fd, part.offset, part.length))
            else:
                out.append(part)
        return out

    def _release_regions(self) -> None:
        for fd in self._owned_fds:
            os.close(fd)
        self._owned_fds.clear()

    def _update_reading(self) -> None:
        if self._transport is None or self.closed:
            return
        should_pause = (
            self._write_paused
            or self._muted is not None
            or len(self._queue) >= self._max_queued
            or self._queued_bytes >= self._max_frame_bytes
        )
        if (
            self._memory is not None
            and (self._held or self._queued_bytes or self._decoder.in_frame)
            and self._memory_says_wait()
        ):
            should_pause = True
        if should_pause and not self._read_paused:
            self._transport.pause_reading()
            self._read_paused = True
        elif not should_pause and self._read_paused:
            self._transport.resume_reading()
            self._read_paused = False

    def _memory_says_wait(self) -> bool:
        """Tell the broker's budget what we hold; True when reading must wait for it: we
        hold requests and it is spent, unless the frame arriving was granted (it is read to
        its end, so half-read frames never hold the budget against each other)."""
        memory = self._memory
        assert memory is not None
        decoder = self._decoder
        arriving = decoder.in_frame
        if not arriving:
            self._granted = False
        elif not self._granted and not memory.spent:
            self._granted = True  # asked before it counts: Kafka's pool is not strict
        held = self._queued_bytes
        if arriving:
            held += decoder.frame_size if self._granted else decoder.buffered
        if held or self._held:
            memory.hold(self, held)
            self._held = held
        if held and memory.spent and not (arriving and self._granted):
            memory.wait(self, self._update_reading)
            return True
        return False

    def close(self, reason: str) -> None:
        if self.closed:
            return
        log.info("closing connection %s from %s: %s", self.id, self.peer, reason)
        self.closed = True
        self._queue.clear()
        self._queued_bytes = 0
        if self._transport is not None:
            self._transport.close()

    def _close_after_failed_authentication(self, reason: str) -> None:
        """Kafka's connection.failed.authentication.delay.ms: the error answer goes out now,
        the close follows after the delay, so a client reads the error before the end of the
        stream (over TLS some clients lose an answer that arrives with the close) and a
        password guesser waits between tries. Nothing more is read meanwhile."""
        self._queue.clear()
        self._queued_bytes = 0
        if self._transport is None or self._failed_auth_delay_s <= 0:
            self.close(reason)
            return
        self.closed = True  # no further requests; `close` below does the rest
        self._transport.pause_reading()
        self._read_paused = True
        loop = asyncio.get_running_loop()

        def finish() -> None:
            self.closed = False
            self.close(reason)

        loop.call_later(self._failed_auth_delay_s, finish)

    def abort(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.abort()

