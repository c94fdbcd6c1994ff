"""The primitives of the hand-written readers (`fast_requests`, `fast_fetch`): a position in
a read-only view of a frame, classic or flexible (compact) encodings, and one exception for
anything that is not plainly well formed, which sends the message to kio."""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

#: What a hand reader gives up on besides `NotPlain`: reads past the end of the view, text
#: that is not UTF-8.
READ_ERRORS = (struct.error, IndexError, UnicodeDecodeError)


class NotPlain(Exception):
    """Not plainly well formed, or carries a field the hand reader does not read: kio's
    turn (it decodes the message or raises a proper DecodeError)."""


class WireReader:
    __slots__ = ("end", "flexible", "pos", "view")

    def __init__(self, frame: bytes | bytearray | memoryview, offset: int, flexible: bool) -> None:
        self.view = memoryview(frame).toreadonly()
        self.pos = offset
        self.end = len(self.view)
        self.flexible = flexible

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.view[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7
            if shift > 28:
                raise NotPlain("varint longer than 5 bytes")

    def length(self) -> int:
        """An array or bytes length: -1 for null (compact 0, classic -1); any other
        negative length is not a length."""
        if self.flexible:
            n = self.uvarint() - 1
        else:
            (n,) = _I32.unpack_from(self.view, self.pos)
            self.pos += 4
        if n < -1:
            raise NotPlain(f"length {n}")
        return int(n)

    def count(self) -> int:
        n = self.length()
        if n < 0 or n > self.end - self.pos:  # every element takes a byte at least
            raise NotPlain(f"array of {n}")
        return n

    def nullable_string(self) -> str | None:
        if self.flexible:
            n = self.uvarint() - 1
        else:
            (n,) = _I16.unpack_from(self.view, self.pos)
            self.pos += 2
        if n < 0:
            if n != -1:
                raise NotPlain(f"length {n}")
            return None
        return str(self.take(n), "utf-8")

    def string(self) -> str:
        value = self.nullable_string()
        if value is None:
            raise NotPlain("null string")
        return value

    def nullable_bytes(self) -> memoryview | None:
        n = self.length()
        return None if n < 0 else self.take(n)

    def take(self, n: int) -> memoryview:
        if self.pos + n > self.end:
            raise NotPlain("field past the end")
        out = self.view[self.pos : self.pos + n]
        self.pos += n
        return out

    def no_tags(self) -> None:
        if self.flexible:
            if self.view[self.pos] != 0:
                raise NotPlain("tagged fields")
            self.pos += 1
