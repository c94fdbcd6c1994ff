"""Produce requests read by hand, so the records stay where they arrived.

kio's reader returns each partition's records as a new `bytes`: a second copy of everything a
producer sends (the socket already read it into the frame's buffer). This reader walks the
same layout (ProduceRequest v3-v11) and gives `records` as read-only views of the frame,
which storage writes out as they are. It reads only what is plainly well formed: anything
else (a length past the end, a tagged field, trailing garbage inside an entity) returns None
and the request takes kio's path, which decodes it or raises a proper DecodeError.
`tests/property/test_fast_requests.py` holds it to kio's reader.
"""

from __future__ import annotations

import datetime
import struct
from typing import Any, NamedTuple

from oncelog.protocol.framing import Frame
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.protocol.wire_reader import READ_ERRORS, NotPlain, WireReader

PRODUCE = 0
_FIRST_FLEXIBLE = 9
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


class PartitionProduceData(NamedTuple):
    index: int  # type: ignore[assignment]  # kio's name; shadows tuple.index, never used
    records: memoryview | None


class TopicProduceData(NamedTuple):
    name: str
    partition_data: tuple[PartitionProduceData, ...]


class ProduceRequest(NamedTuple):
    """The fields of kio's ProduceRequest the handler reads, with records as views.
    NamedTuples, so the C reader builds them without calling into Python."""

    transactional_id: str | None
    acks: int
    timeout_ms: int
    topic_data: tuple[TopicProduceData, ...]

    @property
    def timeout(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.timeout_ms)


_MS = datetime.timedelta(milliseconds=1)


def produce_timeout_ms(request: Any) -> int:
    """A Produce's `timeout_ms` (at least 0): the C reader's request has the wire's
    milliseconds, kio's a timedelta (no round trip through one on the hot path)."""
    if isinstance(request, ProduceRequest):
        return max(0, request.timeout_ms)
    return max(0, int(request.timeout // _MS))


def fetch_max_wait_ms(request: Any) -> int:
    """A Fetch's `max_wait_ms`, from either reader's request (as `produce_timeout_ms`)."""
    if isinstance(request, FetchRequest):
        return request.max_wait_ms
    return int(request.max_wait // _MS)


class FetchPartition(NamedTuple):
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    partition_max_bytes: int


class FetchTopic(NamedTuple):
    topic: str
    partitions: tuple[FetchPartition, ...]


class ForgottenTopic(NamedTuple):
    topic: str
    partitions: tuple[int, ...]


class FetchRequest(NamedTuple):
    """kio's FetchRequest fields, every one present whatever the version (kio's default
    where the version has none, which is also what the handler assumes then)."""

    cluster_id: str | None
    replica_id: int
    max_wait_ms: int
    min_bytes: int
    max_bytes: int
    isolation_level: int
    session_id: int
    session_epoch: int
    topics: tuple[FetchTopic, ...]
    forgotten_topics_data: tuple[ForgottenTopic, ...]
    rack_id: str

    @property
    def max_wait(self) -> datetime.timedelta:
        return datetime.timedelta(milliseconds=self.max_wait_ms)


def decode_fetch(version: int, frame: Frame, offset: int) -> FetchRequest | None:
    """The Fetch request body (v4-v12) at `offset` read in C (`_speedups.read_fetch`), or
    None: kio's path, also when the C helper is not built. Every consumer's and follower's
    request comes here; kio's generic reader with the tag and count checks before it cost
    ~12% of a broker's CPU at 10,000 one-message fetches a second."""
    if _speedups is None:
        return None
    request: FetchRequest | None = _speedups.read_fetch(
        memoryview(frame).toreadonly(),
        offset,
        version,
        FetchRequest,
        FetchTopic,
        FetchPartition,
        ForgottenTopic,
    )
    return request


def decode_produce(version: int, frame: Frame, offset: int) -> ProduceRequest | None:
    """The Produce request body at `offset` of `frame`, or None (kio's path). The C reader
    (`_speedups.read_produce`) when built, else `decode_produce_python`; the same rules."""
    if _speedups is None or not 3 <= version <= 11:
        return decode_produce_python(version, frame, offset)
    request: ProduceRequest | None = _speedups.read_produce(
        memoryview(frame).toreadonly(),
        offset,
        version >= _FIRST_FLEXIBLE,
        ProduceRequest,
        TopicProduceData,
        PartitionProduceData,
    )
    return request


def decode_produce_python(version: int, frame: Frame, offset: int) -> ProduceRequest | None:
    """`decode_produce` in Python: the reference for the C reader, and its fallback."""
    if not 3 <= version <= 11:
        return None
    try:
        return _Reader(frame, offset, version >= _FIRST_FLEXIBLE).request()
    except (NotPlain, *READ_ERRORS):
        return None


class _Reader(WireReader):
    __slots__ = ()

    def request(self) -> ProduceRequest:
        transactional_id = self.nullable_string()
        acks, timeout_ms = _ACKS_TIMEOUT.unpack_from(self.view, self.pos)
        self.pos += _ACKS_TIMEOUT.size
        topics = []
        for _ in range(self.count()):
            name = self.string()
            partitions = []
            for _ in range(self.count()):
                (index,) = _I32.unpack_from(self.view, self.pos)
                self.pos += 4
                partitions.append(PartitionProduceData(index, self.nullable_bytes()))
                self.no_tags()
            topics.append(TopicProduceData(name, tuple(partitions)))
            self.no_tags()
        self.no_tags()
        if self.pos > self.end:
            raise NotPlain("past the end")
        return ProduceRequest(transactional_id, acks, timeout_ms, tuple(topics))
