"""Length-prefixed frames of the Kafka protocol, sans-IO.

Bytes go in with `feed`; complete frames come out. A length that is negative or above
`socket.request.max.bytes` raises FrameError and the connection must be closed. Only bytes
actually received are buffered, so a peer that announces a huge frame and sends little costs
only what it sent.
"""

from __future__ import annotations

import struct

_LEN = struct.Struct(">i")


class FrameError(Exception):
    """The peer sent a frame length we will not accept; close the connection."""


class FrameDecoder:
    """Frames are gathered as views of the received chunks and joined once when complete,
    so a large request costs one copy, not one per chunk received."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._prefix = bytearray()
        self._parts: list[memoryview] = []
        self._have = 0
        self._need = -1  # length of the frame being received, -1 while reading the prefix

    @property
    def max_frame_bytes(self) -> int:
        return self._max

    @max_frame_bytes.setter
    def max_frame_bytes(self, value: int) -> None:
        """A connection raises it once authenticated (sasl.server.max.receive.size before)."""
        self._max = value

    @property
    def buffered(self) -> int:
        return len(self._prefix) + self._have

    @property
    def in_frame(self) -> bool:
        """True while part of a frame (or its length prefix) has been received."""
        return bool(self._prefix) or self._need >= 0

    def feed(self, data: bytes) -> list[bytes]:
        frames: list[bytes] = []
        view = memoryview(data)
        pos, end = 0, len(data)
        while True:
            if self._need < 0:
                take = min(4 - len(self._prefix), end - pos)
                self._prefix += view[pos : pos + take]
                pos += take
                if len(self._prefix) < 4:
                    return frames
                (size,) = _LEN.unpack(self._prefix)
                if size < 0 or size > self._max:
                    raise FrameError(
                        f"frame size {size} outside 0..{self._max} (socket.request.max.bytes)"
                    )
                self._prefix.clear()
                self._need = size
            take = min(self._need - self._have, end - pos)
            if take:
                self._parts.append(view[pos : pos + take])
                self._have += take
                pos += take
            if self._have < self._need:
                return frames
            parts, self._parts = self._parts, []
            frames.append(parts[0].tobytes() if len(parts) == 1 else b"".join(parts))
            self._have = 0
            self._need = -1
            if pos == end:
                return frames


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its length."""
    return _LEN.pack(len(payload)) + payload
