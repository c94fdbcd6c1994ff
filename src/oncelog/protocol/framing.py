"""Length-prefixed frames of the Kafka protocol, sans-IO.

Bytes go in (received into `get_buffer`, or pushed with `feed`); complete frames come out. A
length that is negative or above `socket.request.max.bytes` raises FrameError and the
connection must be closed.
"""

from __future__ import annotations

import struct

_LEN = struct.Struct(">i")


class FrameError(Exception):
    """The peer sent a frame length we will not accept; close the connection."""


#: Small frames are received into one scratch buffer of this size and copied out.
SCRATCH_BYTES = 256 * 1024
#: A larger frame up to this size gets a buffer of its own as soon as its length is known,
#: and the socket receives straight into it (no copy); beyond it, chunks are gathered as
#: they arrive and joined once, so a peer that announces a huge frame and sends little
#: costs only what it sent (plus at most this much).
DIRECT_MAX_BYTES = 1 << 20

Frame = bytes | memoryview


class FrameDecoder:
    """Frames out of a byte stream, for a buffered protocol (`get_buffer` / `received`: the
    socket reads into our buffers) or for pushed data (`feed`, which goes through them).

    A frame that fits the scratch buffer comes out as bytes (one copy); a larger one as a
    read-only view of the buffer it was received into."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._scratch = bytearray(SCRATCH_BYTES)
        self._view = memoryview(self._scratch)
        self._start = 0  # unparsed bytes are scratch[start:end]
        self._end = 0
        self._frame: bytearray | None = None  # a large frame received in place
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
    def in_frame(self) -> bool:
        """True while part of a frame (or its length prefix) has been received."""
        return self.buffered > 0

    def get_buffer(self) -> memoryview:
        """Where the next bytes received go (never past the end of a large frame)."""
        if self._frame is not None:
            return memoryview(self._frame)[self._have :]
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
            done = memoryview(self._frame).toreadonly()
            self._frame, self._need, self._have = None, 0, 0
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
                frames.append(self._view[body : body + size].tobytes())
                self._start = body + size
                continue
            if size > SCRATCH_BYTES - 4:
                self._receive_large(size, self._view[body : self._end])
            elif body + size > SCRATCH_BYTES:
                self._compact()
            break
        if self._start == self._end:
            self._start = self._end = 0
        return frames

    def _receive_large(self, size: int, head: memoryview) -> None:
        """Go on with a frame too big for the scratch buffer, `head` already received."""
        self._need, self._have = size, len(head)
        if size <= DIRECT_MAX_BYTES:
            self._frame = bytearray(size)
            self._frame[: len(head)] = head
        else:
            self._chunks = [memoryview(head.tobytes())]
        self._start = self._end = 0

    def _compact(self) -> None:
        """Move the unparsed bytes to the front of the scratch buffer."""
        pending = self._end - self._start
        self._scratch[:pending] = self._view[self._start : self._end]
        self._start, self._end = 0, pending


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its length."""
    return _LEN.pack(len(payload)) + payload
