"""The v2 record-batch header: parse, validate, and rewrite the broker-owned fields.

Layout (all big-endian), 61 bytes before the records:

    baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 | magic int8 |
    crc uint32 | attributes int16 | lastOffsetDelta int32 | baseTimestamp int64 |
    maxTimestamp int64 | producerId int64 | producerEpoch int16 | baseSequence int32 |
    recordCount int32 | records...

The CRC32C covers everything from `attributes` to the end, so the broker may rewrite
`baseOffset` and `partitionLeaderEpoch` without touching it. Batches are stored and served
exactly as received apart from those two fields.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

from crc32c import crc32c

from oncelog.protocol.records.speedups import speedups as _speedups

HEADER_SIZE = 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the part batchLength counts
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
CRC_START = 21
MAGIC_OFFSET = 16
CURRENT_MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qi")
_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_CRC = struct.Struct(">I")


class BatchHeader(NamedTuple):
    """Decoded header fields of one stored or received batch."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in the log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping at int32 as the clients do."""
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % (2**31)


def parse_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Decode the header at `pos`; the caller guarantees HEADER_SIZE bytes are there."""
    return BatchHeader._make(_HEADER.unpack_from(buf, pos))


def peek_prefix(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """(baseOffset, batchLength) of the batch at `pos` without decoding the rest."""
    base, length = _PREFIX.unpack_from(buf, pos)
    return int(base), int(length)


def compute_crc(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC32C of a batch's CRC-covered part."""
    return int(crc32c(memoryview(buf)[pos + CRC_START : pos + size]))


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch in a stored log region.

    Stops at the first incomplete or implausible batch; callers that need to know where the
    valid data ends compare the last position + size with the buffer length. The C walk
    (`_speedups.walk_batches`) does the same in one call; `iter_batches_python` is the
    reference and the fallback.
    """
    if _speedups is not None:
        return iter(_speedups.walk_batches(buf, BatchHeader))
    return iter_batches_python(buf)


def span_batches(buf: bytes | bytearray | memoryview, max_offset: int = -1) -> tuple[int, int]:
    """(bytes, next offset) of the whole batches at the start of `buf` that begin below
    `max_offset` (-1: any); next offset -1 when there is none. Reads cut a region with it."""
    if _speedups is not None:
        result: tuple[int, int] = _speedups.span_batches(buf, max_offset)
        return result
    cut, next_offset = 0, -1
    for pos, header in iter_batches_python(buf):
        if 0 <= max_offset <= header.base_offset:
            break
        cut, next_offset = pos + header.size, header.next_offset
    return cut, next_offset


def iter_batches_python(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    pos = 0
    end = len(buf)
    while pos + HEADER_SIZE <= end:
        header = parse_header(buf, pos)
        if header.batch_length < MIN_BATCH_LENGTH or pos + header.size > end:
            return
        yield pos, header
        pos += header.size


def rewrite_offsets(
    batch: bytearray, pos: int, base_offset: int, partition_leader_epoch: int
) -> None:
    """Set the two broker-owned fields in place; the CRC does not cover them."""
    _OFFSET.pack_into(batch, pos, base_offset)
    _EPOCH.pack_into(batch, pos + 12, partition_leader_epoch)


def stamp_batch_python(
    data: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int, header: BatchHeader
) -> tuple[bytes | bytearray, BatchHeader]:
    head = bytearray(memoryview(data)[:HEADER_SIZE])
    rewrite_offsets(head, 0, base_offset, leader_epoch)
    return head, header._replace(base_offset=base_offset, partition_leader_epoch=leader_epoch)


#: A leader's two fields for a batch it appends: the batch's header bytes with them set (the
#: rest of the batch is written as received) and its header with them replaced. Bound to the
#: C function when built (one call on every append, without a Python frame around it);
#: `stamp_batch_python` is the reference.
stamp_batch: Callable[
    [bytes | bytearray | memoryview, int, int, BatchHeader], tuple[bytes | bytearray, BatchHeader]
] = stamp_batch_python if _speedups is None else _speedups.stamp_batch


def set_log_append_time(batch: bytearray, pos: int, size: int, timestamp: int) -> None:
    """Stamp LogAppendTime (topic config message.timestamp.type) and recompute the CRC."""
    header = parse_header(batch, pos)
    struct.pack_into(">h", batch, pos + 21, header.attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", batch, pos + 35, timestamp)
    _CRC.pack_into(batch, pos + 17, compute_crc(batch, pos, size))


def build_batch(
    *,
    base_offset: int,
    records: bytes,
    record_count: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int = 0,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """Encode a batch around already-encoded records (used for control batches and tests)."""
    buf = bytearray(HEADER_SIZE + len(records))
    _HEADER.pack_into(
        buf,
        0,
        base_offset,
        len(buf) - LOG_OVERHEAD,
        partition_leader_epoch,
        CURRENT_MAGIC,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        record_count,
    )
    buf[HEADER_SIZE:] = records
    _CRC.pack_into(buf, 17, compute_crc(buf, 0, len(buf)))
    return bytes(buf)
