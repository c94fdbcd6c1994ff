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
    def __init__(self, max_frame_bytes: int) -> None:
        self._max = max_frame_bytes
        self._buf = bytearray()
        self._need = -1  # length of the frame being received, -1 while reading the prefix

    @property
    def buffered(self) -> int:
        return len(self._buf)

    @property
    def in_frame(self) -> bool:
        """True while part of a frame (or its length prefix) has been received."""
        return bool(self._buf) or self._need >= 0

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        frames: list[bytes] = []
        while True:
            if self._need < 0:
                if len(self._buf) < 4:
                    return frames
                (size,) = _LEN.unpack_from(self._buf, 0)
                if size < 0 or size > self._max:
                    raise FrameError(
                        f"frame size {size} outside 0..{self._max} (socket.request.max.bytes)"
                    )
                del self._buf[:4]
                self._need = size
            if len(self._buf) < self._need:
                return frames
            frames.append(bytes(self._buf[: self._need]))
            del self._buf[: self._need]
            self._need = -1


def frame(payload: bytes | bytearray) -> bytes:
    """Prefix a payload with its length."""
    return _LEN.pack(len(payload)) + payload
