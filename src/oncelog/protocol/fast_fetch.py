"""A follower's Fetch written and its answer read by hand, for the replica fetcher.

Every replication round is one Fetch each way. kio's generic codec builds a dataclass per
partition to write the request and, reading the answer, another per partition plus a copy of
its records; for a round of a few batches that was most of a follower's Python time outside
the append. `encode_follower_fetch` writes FetchRequest v12 with struct; `decode_fetch_response`
reads FetchResponse v4-v12 and gives `records` as read-only views of the frame, which the
follower's log stores as they are. The reader takes only what is plainly well formed and
carries nothing unusual: a tagged field (diverging epoch, current leader, snapshot id), a
length past the end, a negative length other than null, an error code kio does not know return
None, and the caller uses kio, which decodes it all or raises. `tests/property/
test_fast_fetch.py` holds both to kio.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import NamedTuple

from oncelog.errors import ErrorCode
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.protocol.wire_reader import READ_ERRORS, NotPlain, WireReader

FETCH = 1
FOLLOWER_FETCH_VERSION = 12
_FIRST_FLEXIBLE = 12

_I32 = struct.Struct(">i")
_REQUEST_HEAD = struct.Struct(">iiiibii")  # replica, max wait, min/max bytes, iso, session
_REQUEST_PART = struct.Struct(">iiqiqi")  # partition, epoch, offset, last epoch, start, max
_PART_HEAD = struct.Struct(">ihqq")  # partition, error, high watermark, last stable offset
_PART_HEAD_V5 = struct.Struct(">ihqqq")  # the same and the log start offset
_Q = struct.Struct(">q")
_QQ = struct.Struct(">qq")
_THROTTLE_ERROR_SESSION = struct.Struct(">ihi")
#: Error codes kio knows: another one goes to kio, which refuses it.
_KNOWN_ERRORS = frozenset(int(code) for code in ErrorCode)


class FollowerFetchPartition(NamedTuple):
    """One partition of a follower's fetch (the fields a follower sets)."""

    partition: int
    current_leader_epoch: int
    fetch_offset: int
    log_start_offset: int
    partition_max_bytes: int
    last_fetched_epoch: int = -1


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_follower_fetch(
    replica_id: int,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    topics: Sequence[tuple[str, Sequence[FollowerFetchPartition]]],
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: Sequence[tuple[str, Sequence[int]]] = (),
) -> bytes:
    """FetchRequest v12's body: read_uncommitted, no rack, no cluster id (what kio writes
    for the same fields). Without a session by default (id 0, epoch -1)."""
    out = bytearray(
        _REQUEST_HEAD.pack(
            replica_id, max_wait_ms, min_bytes, max_bytes, 0, session_id, session_epoch
        )
    )
    out += _uvarint(len(topics) + 1)
    pack_part = _REQUEST_PART.pack
    for name, partitions in topics:
        _compact_string(out, name)
        out += _uvarint(len(partitions) + 1)
        for p in partitions:
            out += pack_part(
                p.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.log_start_offset,
                p.partition_max_bytes,
            )
            out += b"\x00"  # no tagged fields
        out += b"\x00"
    out += _uvarint(len(forgotten) + 1)
    for name, indexes in forgotten:
        _compact_string(out, name)
        out += _uvarint(len(indexes) + 1)
        for index in indexes:
            out += _I32.pack(index)
        out += b"\x00"
    out += b"\x01\x00"  # rack "", no tagged fields
    return bytes(out)


def _compact_string(out: bytearray, text: str) -> None:
    raw = text.encode()
    out += _uvarint(len(raw) + 1)
    out += raw


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int


class PartitionData(NamedTuple):
    """kio's FetchResponse PartitionData fields a reader uses, records as a view (named
    tuples: one per partition of every fetch, and much cheaper to make than dataclasses)."""

    partition_index: int
    error_code: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTransaction, ...] | None
    preferred_read_replica: int
    records: memoryview | None


class FetchableTopicResponse(NamedTuple):
    topic: str
    partitions: tuple[PartitionData, ...]


class FetchResponse(NamedTuple):
    throttle_time_ms: int
    error_code: int
    session_id: int
    responses: tuple[FetchableTopicResponse, ...]


def decode_fetch_response(
    version: int, frame: bytes | bytearray | memoryview, offset: int
) -> FetchResponse | None:
    """The FetchResponse body at `offset` of `frame` (after the response header), or None
    when kio must read it: read in C (`_speedups.read_fetch_response`) when built, else
    `decode_fetch_response_python`; the same rules."""
    if _speedups is None:
        return decode_fetch_response_python(version, frame, offset)
    view = memoryview(frame).toreadonly()
    if not 0 <= offset <= len(view):
        return None
    response: FetchResponse | None = _speedups.read_fetch_response(
        view,
        offset,
        version,
        FetchResponse,
        FetchableTopicResponse,
        PartitionData,
        AbortedTransaction,
        _KNOWN_ERRORS,
    )
    return response


def decode_fetch_response_python(
    version: int, frame: bytes | bytearray | memoryview, offset: int
) -> FetchResponse | None:
    """`decode_fetch_response` in Python: the reference the C reader is held to."""
    if not 4 <= version <= 12:
        return None
    try:
        return _Reader(frame, offset, version >= _FIRST_FLEXIBLE, version).response()
    except (NotPlain, *READ_ERRORS):
        return None


class _Reader(WireReader):
    __slots__ = ("version",)

    def __init__(
        self, frame: bytes | bytearray | memoryview, offset: int, flexible: bool, version: int
    ) -> None:
        super().__init__(frame, offset, flexible)
        self.version = version

    def response(self) -> FetchResponse:
        view = self.view
        if self.version >= 7:
            throttle, error, session = _THROTTLE_ERROR_SESSION.unpack_from(view, self.pos)
            self.pos += _THROTTLE_ERROR_SESSION.size
            if error not in _KNOWN_ERRORS:
                raise NotPlain(f"error code {error}")
        else:
            (throttle,) = _I32.unpack_from(view, self.pos)
            self.pos += 4
            error = session = 0
        topics = []
        partition = self.partition_v12 if self.flexible else self.partition
        for _ in range(self.count()):
            name = self.string()
            partitions = [partition() for _ in range(self.count())]
            topics.append(FetchableTopicResponse(name, tuple(partitions)))
            self.no_tags()
        self.no_tags()
        if self.pos > self.end:
            raise NotPlain("past the end")
        return FetchResponse(throttle, error, session, tuple(topics))

    def partition_v12(self) -> PartitionData:
        """v12, the replica fetcher's version, in one piece: null aborted transactions and
        no tagged fields read inline, anything else through the general helpers."""
        view = self.view
        pos = self.pos
        index, error, hw, lso, start = _PART_HEAD_V5.unpack_from(view, pos)
        pos += _PART_HEAD_V5.size
        if error and error not in _KNOWN_ERRORS:
            raise NotPlain(f"error code {error}")
        aborted: tuple[AbortedTransaction, ...] | None = None
        if view[pos] == 0:  # null: the common case
            self.pos = pos + 1
        else:
            self.pos = pos
            aborted = self.aborted(self.length())
        (preferred,) = _I32.unpack_from(view, self.pos)
        pos = self.pos + 4
        n = 0
        shift = 0
        while True:  # the records' length, a compact (unsigned varint + 1) length
            byte = view[pos]
            pos += 1
            n |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 28:
                raise NotPlain("varint longer than 5 bytes")
        records = None
        if n > 0:
            end = pos + n - 1
            if end > self.end:
                raise NotPlain("records past the end")
            records = view[pos:end]
            pos = end
        if view[pos] != 0:
            raise NotPlain("tagged fields")
        self.pos = pos + 1
        return PartitionData(index, error, hw, lso, start, aborted, preferred, records)

    def partition(self) -> PartitionData:
        view = self.view
        index, error, hw, lso = _PART_HEAD.unpack_from(view, self.pos)
        self.pos += _PART_HEAD.size
        if error not in _KNOWN_ERRORS:
            raise NotPlain(f"error code {error}")
        start = -1
        if self.version >= 5:
            (start,) = _Q.unpack_from(view, self.pos)
            self.pos += 8
        aborted = self.aborted(self.length())
        preferred = -1
        if self.version >= 11:
            (preferred,) = _I32.unpack_from(view, self.pos)
            self.pos += 4
        records = self.nullable_bytes()
        self.no_tags()
        return PartitionData(index, error, hw, lso, start, aborted, preferred, records)

    def aborted(self, n: int) -> tuple[AbortedTransaction, ...] | None:
        if n < 0:
            return None
        if n * 16 > self.end - self.pos:
            raise NotPlain(f"{n} aborted transactions")
        txns = []
        for _ in range(n):
            txns.append(AbortedTransaction(*_QQ.unpack_from(self.view, self.pos)))
            self.pos += 16
            self.no_tags()
        return tuple(txns)
