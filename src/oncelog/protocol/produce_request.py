"""Produce requests (v3 to v11) decoded by hand, record bytes as views of the frame.

Why: Produce carries almost all of a broker's inbound bytes, and kio copies every
partition's records into a new bytes object (a page-faulting copy for large batches) and
builds dataclasses; this decoder walks the frame once and hands the record data on as
`memoryview` slices, which the validator, the C record walk and the vectored log write all
take as they are. It returns None for anything it does not find well formed, and the caller
falls back to the generic kio path, which reports the exact error: so the fast path never
decides what is malformed, it only speeds up what is not.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")

FIRST_FLEXIBLE = 9


@dataclass(slots=True)
class ProducePartition:
    index: int
    records: memoryview | None


@dataclass(slots=True)
class ProduceTopic:
    name: str
    partition_data: list[ProducePartition]


@dataclass(slots=True)
class ProduceRequest:
    """The fields the Produce handler reads, named as in kio's ProduceRequest."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]


class _Malformed(Exception):
    pass


class _Reader:
    __slots__ = ("buf", "end", "pos", "view")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos, self.end = buf, pos, len(buf)
        self.view = memoryview(buf)

    def take(self, n: int) -> int:
        start = self.pos
        self.pos = start + n
        if n < 0 or self.pos > self.end:
            raise _Malformed
        return start

    def uvarint(self) -> int:
        value = 0
        for shift in range(0, 35, 7):
            if self.pos >= self.end:
                raise _Malformed
            byte = self.buf[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
        raise _Malformed

    def i32(self) -> int:
        return int(_I32.unpack_from(self.buf, self.take(4))[0])

    def string(self, flexible: bool, nullable: bool) -> str | None:
        n = self.uvarint() - 1 if flexible else _I16.unpack_from(self.buf, self.take(2))[0]
        if n < 0:
            if n == -1 and nullable:
                return None
            raise _Malformed
        start = self.take(n)
        return self.buf[start : start + n].decode()

    def records(self, flexible: bool) -> memoryview | None:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n == -1:
            return None
        start = self.take(n)
        return self.view[start : start + n]

    def count(self, flexible: bool, min_element: int) -> int:
        n = self.uvarint() - 1 if flexible else self.i32()
        if n < 0 or n * min_element > self.end - self.pos:
            raise _Malformed
        return n

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.take(self.uvarint())


def decode_produce(buf: bytes, offset: int, version: int) -> ProduceRequest | None:
    """The Produce request body at `buf[offset:]`, or None to let the generic decoder judge."""
    if not 3 <= version <= 11:
        return None
    flexible = version >= FIRST_FLEXIBLE
    r = _Reader(buf, offset)
    try:
        txn_id = r.string(flexible, nullable=True)
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(buf, r.take(6))
        topics: list[ProduceTopic] = []
        for _ in range(r.count(flexible, 3 if flexible else 6)):
            name = r.string(flexible, nullable=False)
            assert name is not None
            partitions: list[ProducePartition] = []
            for _ in range(r.count(flexible, 6 if flexible else 8)):
                index = r.i32()
                partitions.append(ProducePartition(index, r.records(flexible)))
                if flexible:
                    r.skip_tags()
            if flexible:
                r.skip_tags()
            topics.append(ProduceTopic(name, partitions))
        if flexible:
            r.skip_tags()
    except (_Malformed, struct.error, UnicodeDecodeError):
        return None
    return ProduceRequest(txn_id, acks, timeout_ms, topics)
