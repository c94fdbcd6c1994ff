"""Length-prefixed frames of the Kafka protocol, sans-IO.

Bytes go in (received into `get_buffer`, or pushed with `feed`); complete frames come out. A
length that is negative or above `socket.request.max.bytes` raises FrameError and the
connection must be closed.
"""

from __future__ import annotations

import struct

from oncelog.protocol.records.speedups import speedups as _speedups

_LEN = struct.Struct(">i")


def _new_buffer(size: int) -> bytearray:
    """A buffer a receive will fill: the C helper leaves its bytes as they are (no byte of
    it is read before it is received), where bytearray(size) zeroes the whole frame first."""
    return bytearray(size) if _speedups is None else _speedups.new_buffer(size)


def _grow(buf: bytearray, size: int) -> None:
    """Extend `buf` to `size` bytes (BufferError while a view of it is alive)."""
    if _speedups is None:
        buf.extend(bytes(size - len(buf)))
    else:
        _speedups.grow_buffer(buf, size)


class FrameError(Exception):
    """The peer sent a frame length we will not accept; close the connection."""


#: Small frames are received into one scratch buffer of this size and copied out.
SCRATCH_BYTES = 256 * 1024
#: A larger frame up to this size gets a buffer of its own as soon as its length is known,
#: and the socket receives straight into it (no copy); beyond it, chunks are gathered as
#: they arrive and joined once, so a peer that announces a huge frame and sends little
#: costs only what it sent (plus at most this much).
DIRECT_MAX_BYTES = 1 << 20
#: A frame of at least this size that arrived whole in the scratch buffer comes out as a view
#: of it, not a copy, and the decoder goes on in a new scratch buffer (so a frame keeps at
#: most 4x its size alive).
VIEW_MIN_BYTES = 64 * 1024

Frame = bytes | memoryview


class FrameDecoder:
    """Frames out of a byte stream, for a buffered protocol (`get_buffer` / `received`: the
    socket reads into our buffers) or for pushed data (`feed`, which goes through them).

    A small frame comes out as bytes (one copy); one of VIEW_MIN_BYTES or more as a read-only
    view of the buffer it was received into: the scratch buffer itself (grown to hold it if
    it did not fit), with a new scratch buffer for what follows."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._scratch = _new_buffer(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._start = 0  # unparsed bytes are scratch[start:end]
        self._end = 0
        self._frame: bytearray | None = None  # a large frame received in place,
        self._frame_at = 0  # from this offset of it
        self._head = -1  # where in scratch a large frame's head waits for its buffer
        self._chunks: list[memoryview] = []  # a frame above DIRECT_MAX_BYTES, gathered
        self._chunk = bytearray()  # the chunk being filled, and how far
        self._chunk_fill = 0
        self._need = 0  # size of the large frame being received
        self._have = 0  # its bytes received so far

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        """A connection raises it once authenticated (sasl.server.max.receive.size before)."""
        self._max = value

    @property
    def buffered(self) -> int:
        """Bytes received of frames not yet complete."""
        return self._end - self._start + self._have

    @property
    def frame_size(self) -> int:
        """The declared size of the frame being received, once its length is in; else the
        bytes of it received so far (0 between frames)."""
        if self._need:
            return self._need
        pending = self._end - self._start
        if pending >= 4:
            return int(_LEN.unpack_from(self._scratch, self._start)[0])
        return pending

    @property
    def in_frame(self) -> bool:
        """True while part of a frame (or its length prefix) has been received."""
        return self.buffered > 0

    def get_buffer(self) -> memoryview:
        """Where the next bytes received go (never past the end of a large frame)."""
        if self._head >= 0:
            self._place_large_frame()
        if self._frame is not None:
            at = self._frame_at
            return memoryview(self._frame)[at + self._have : at + self._need]
        if self._need:
            if self._chunk_fill == len(self._chunk):  # full: the next one, as data arrives
                self._chunk = bytearray(min(SCRATCH_BYTES, self._need - self._have))
                self._chunk_fill = 0
            return memoryview(self._chunk)[self._chunk_fill :]
        if self._end == SCRATCH_BYTES:
            self._compact()
        return self._view[self._end :]

    def received(self, n: int) -> list[Frame]:
        """`n` bytes were written into the last `get_buffer`; the frames now complete."""
        if self._frame is not None:
            self._have += n
            if self._have < self._need:
                return []
            at = self._frame_at
            done = memoryview(self._frame)[at : at + self._need].toreadonly()
            self._frame, self._frame_at, self._need, self._have = None, 0, 0, 0
            return [done]
        if self._need:
            self._chunk_fill += n
            self._have += n
            if self._chunk_fill == len(self._chunk):
                self._chunks.append(memoryview(self._chunk))
            if self._have < self._need:
                return []
            joined = b"".join(self._chunks)
            self._chunks, self._need, self._have = [], 0, 0
            self._chunk, self._chunk_fill = bytearray(), 0
            return [joined]
        self._end += n
        return self._parse()

    def feed(self, data: bytes | bytearray | memoryview) -> list[Frame]:
        """Frames completed by `data` (pushed data: copied into the receive buffers)."""
        frames: list[Frame] = []
        view = memoryview(data)
        pos = 0
        while pos < len(view):
            buf = self.get_buffer()
            n = min(len(buf), len(view) - pos)
            buf[:n] = view[pos : pos + n]
            buf.release()  # as uvloop does before `received`: the buffer may be adopted
            pos += n
            frames += self.received(n)
        return frames

    def _parse(self) -> list[Frame]:
        frames: list[Frame] = []
        while self._end - self._start >= 4:
            (size,) = _LEN.unpack_from(self._scratch, self._start)
            if size < 0 or size > self._max:
                raise FrameError(
                    f"frame size {size} outside 0..{self._max} (socket.request.max.bytes)"
                )
            body = self._start + 4
            if self._end - body >= size:
                self._start = body + size
                if size < VIEW_MIN_BYTES:
                    frames.append(self._view[body : body + size].tobytes())
                else:
                    frames.append(self._view[body : self._start].toreadonly())
                    self._leave_scratch()
                continue
            if size > SCRATCH_BYTES - 4:
                self._receive_large(size, body)
            elif body + size > SCRATCH_BYTES:
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def _receive_large(self, size: int, body: int) -> None:
        """Go on with a frame too big for the scratch buffer, its head scratch[body:end]."""
        self._need, self._have = size, self._end - body
        if size > DIRECT_MAX_BYTES:
            self._chunks = [memoryview(self._view[body : self._end].tobytes())]
        else:  # placed by the next get_buffer: the socket holds the scratch buffer until then
            self._head = body
        self._start = self._end = 0

    def _place_large_frame(self) -> None:
        """Give the large frame begun at scratch[head:] a buffer: the scratch buffer itself,
        grown to hold it (no copy of the head), and a new scratch buffer for what follows;
        or, if a view of the scratch buffer is still alive somewhere, a copy."""
        head, self._head = self._head, -1
        scratch = self._scratch
        try:
            self._view.release()
            _grow(scratch, head + self._need)
        except BufferError:
            self._view = memoryview(scratch)
            self._frame, self._frame_at = _new_buffer(self._need), 0
            memoryview(self._frame)[: self._have] = self._view[head : head + self._have]
            return
        self._frame, self._frame_at = scratch, head
        self._scratch = _new_buffer(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)

    def _leave_scratch(self) -> None:
        """Leave the scratch buffer to the frame viewing it, and go on in a new one with the
        bytes after that frame."""
        rest = self._view[self._start : self._end]
        self._scratch = _new_buffer(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._view[: len(rest)] = rest
        self._start, self._end = 0, len(rest)

    def _compact(self) -> None:
        """Move the unparsed bytes to the front of the scratch buffer."""
        pending = self._end - self._start
        self._scratch[:pending] = self._view[self._start : self._end]
        self._start, self._end = 0, pending


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its length."""
    return _LEN.pack(len(payload)) + payload
