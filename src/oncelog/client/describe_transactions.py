"""DescribeTransactions v0 responses, decoded by hand.

Why not kio: Kafka answers -1 as the start time of a transaction that is not in progress
(state Empty, or any state on older brokers), and kio's reader refuses negative timestamps,
so `oncelog transactions describe` would fail on a perfectly valid answer.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from oncelog.client.connection import ClientError


@dataclass(frozen=True, slots=True)
class TopicData:
    topic: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransactionState:
    error_code: int
    transactional_id: str
    transaction_state: str
    transaction_timeout_ms: int
    #: -1 when no transaction is in progress.
    transaction_start_time_ms: int
    producer_id: int
    producer_epoch: int
    topics: tuple[TopicData, ...]


class _Reader:
    """Flexible-version primitives over one response body."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos

    def fixed(self, fmt: str) -> int:
        try:
            (value,) = struct.unpack_from(fmt, self.buf, self.pos)
        except struct.error as exc:
            raise ClientError("truncated DescribeTransactions response") from exc
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = result = 0
        while True:
            if self.pos >= len(self.buf) or shift > 28:
                raise ClientError("bad varint in DescribeTransactions response")
            byte = self.buf[self.pos]
            self.pos += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return result
            shift += 7

    def count(self) -> int:
        """A compact array length (null counts as empty)."""
        return max(self.uvarint() - 1, 0)

    def string(self) -> str:
        n = self.count()
        raw = self.buf[self.pos : self.pos + n]
        if len(raw) != n:
            raise ClientError("truncated string in DescribeTransactions response")
        self.pos += n
        return raw.decode()

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def decode(body: bytes, pos: int = 0) -> list[TransactionState]:
    """The transaction states of a DescribeTransactions v0 response body starting at `pos`."""
    r = _Reader(body, pos)
    r.fixed(">i")  # throttle_time_ms
    out: list[TransactionState] = []
    for _ in range(r.count()):
        error_code, txn_id, state = r.fixed(">h"), r.string(), r.string()
        timeout_ms, start_ms = r.fixed(">i"), r.fixed(">q")
        producer_id, epoch = r.fixed(">q"), r.fixed(">h")
        topics = []
        for _ in range(r.count()):
            topic = r.string()
            partitions = tuple(r.fixed(">i") for _ in range(r.count()))
            r.skip_tags()
            topics.append(TopicData(topic, partitions))
        r.skip_tags()
        out.append(
            TransactionState(
                error_code, txn_id, state, timeout_ms, start_ms, producer_id, epoch, tuple(topics)
            )
        )
    return out
