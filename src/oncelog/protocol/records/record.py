"""Records inside a v2 batch: zig-zag varints, encoding (tests, control batches) and the
structural check the broker runs before it accepts a batch.

Each record: length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
key (varint length, -1 = null) | value (same) | header count varint | headers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from oncelog.protocol.records.speedups import speedups as _speedups


class RecordFormatError(ValueError):
    """The records of a batch are not what its header claims."""


class KeylessRecordsError(RecordFormatError):
    """Records without a key in a batch for a compacted topic (Kafka's validateKey).

    `indexes` are the positions in the batch of every keyless record, as Kafka lists them in
    the Produce response's record_errors.
    """

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(f"{len(indexes)} records without a key, the first at index {indexes[0]}")
        self.indexes = indexes


def zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def encode_varint(value: int) -> bytes:
    """Signed (zig-zag) varint as used inside records."""
    return encode_unsigned_varint(zigzag(value) & 0xFFFFFFFFFFFFFFFF)


_ONE_BYTE = tuple(bytes((n,)) for n in range(0x80))
"""The varints below 128, the counts and lengths of almost every flexible request field."""


def encode_unsigned_varint(n: int) -> bytes:
    """Unsigned varint (also the counts and lengths of flexible protocol versions)."""
    if 0 <= n < 0x80:
        return _ONE_BYTE[n]
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def decode_varint(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> tuple[int, int]:
    """Decode a signed varint at `pos`, not reading at or past `limit`; return (value, next)."""
    shift = 0
    result = 0
    while True:
        if pos >= limit or shift > 63:
            raise RecordFormatError("varint overruns the record or is longer than 10 bytes")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def encode_record(
    *,
    offset_delta: int,
    timestamp_delta: int = 0,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """Encode one record (without compression)."""
    body = bytearray(b"\x00")
    body += encode_varint(timestamp_delta)
    body += encode_varint(offset_delta)
    for blob in (key, value):
        if blob is None:
            body += encode_varint(-1)
        else:
            body += encode_varint(len(blob)) + blob
    body += encode_varint(len(headers))
    for name, hvalue in headers:
        raw = name.encode()
        body += encode_varint(len(raw)) + raw
        body += encode_varint(-1) if hvalue is None else encode_varint(len(hvalue)) + hvalue
    return encode_varint(len(body)) + bytes(body)


def check_records(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    count: int,
    require_key: bool = False,
) -> None:
    """Check that `buf[start:end]` holds exactly `count` records with offset deltas 0..count-1
    and, with `require_key` (a compacted topic), that each has a key (else KeylessRecordsError,
    raised only when the records are well-formed otherwise).

    Walks the length prefix and the offset delta of each record; the CRC already vouches that
    these bytes are what the producer built, so this only rejects producers that built them
    wrong (or on purpose): records overrunning the batch, a wrong count, trailing bytes.
    Runs in C when the optional extension is built (this is on the produce hot path), else in
    Python with the same rules.
    """
    if _speedups is None:
        check_records_python(buf, start, end, count, require_key)
        return
    problem = _speedups.check_records(buf, start, end, count, require_key)
    if problem is not None:
        kind, index, value = problem
        if kind == "nokey":
            # Rare (a refused produce): the Python walk lists every keyless record.
            check_records_python(buf, start, end, count, require_key)
            raise AssertionError("the C and Python record walks disagree")  # pragma: no cover
        messages = {
            "overruns": f"record {index} of length {value} overruns batch",
            "delta": f"record offset delta {value}, expected {index}",
            "trailing": f"{value} bytes after the last of {count} records",
        }
        raise RecordFormatError(messages.get(kind, kind))


def check_records_python(
    buf: bytes | bytearray | memoryview,
    start: int,
    end: int,
    count: int,
    require_key: bool = False,
) -> None:
    """The reference implementation of `check_records`."""
    pos = start
    keyless: list[int] = []
    for expected_delta in range(count):
        length, body = decode_varint(buf, pos, end)
        record_end = body + length
        if length < 4 or record_end > end:
            raise RecordFormatError(f"record {expected_delta} of length {length} overruns batch")
        # attributes (1 byte), then timestampDelta varlong, then offsetDelta varint
        _, after_ts = decode_varint(buf, body + 1, record_end)
        delta, after_delta = decode_varint(buf, after_ts, record_end)
        if delta != expected_delta:
            raise RecordFormatError(f"record offset delta {delta}, expected {expected_delta}")
        if require_key and decode_varint(buf, after_delta, record_end)[0] < 0:
            keyless.append(expected_delta)
        pos = record_end
    if pos != end:
        raise RecordFormatError(f"{end - pos} bytes after the last of {count} records")
    if keyless:
        raise KeylessRecordsError(keyless)


def record_offsets_and_timestamps(
    records: bytes | bytearray | memoryview, base_offset: int, base_timestamp: int, count: int
) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of a decompressed batch body.

    Used off the hot path only (ListOffsets by timestamp inside a batch).
    """
    out: list[tuple[int, int]] = []
    pos, end = 0, len(records)
    for _ in range(count):
        length, body = decode_varint(records, pos, end)
        record_end = body + length
        ts_delta, after_ts = decode_varint(records, body + 1, record_end)
        offset_delta, _ = decode_varint(records, after_ts, record_end)
        out.append((base_offset + offset_delta, base_timestamp + ts_delta))
        pos = record_end
    return out


def record_keys_and_values(
    records: bytes | bytearray | memoryview, count: int
) -> list[tuple[bytes | None, bytes | None]]:
    """(key, value) of each record of a decompressed batch body; None for a null one.

    Used off the hot path only (coordinators replaying their internal topics).
    """
    out: list[tuple[bytes | None, bytes | None]] = []
    pos, end = 0, len(records)
    for _ in range(count):
        length, body = decode_varint(records, pos, end)
        record_end = body + length
        _, p = decode_varint(records, body + 1, record_end)  # timestamp delta
        _, p = decode_varint(records, p, record_end)  # offset delta
        key_len, p = decode_varint(records, p, record_end)
        key = None if key_len < 0 else bytes(records[p : p + key_len])
        p += max(key_len, 0)
        value_len, p = decode_varint(records, p, record_end)
        value = None if value_len < 0 else bytes(records[p : p + value_len])
        out.append((key, value))
        pos = record_end
    return out


class DecodedRecord(NamedTuple):
    """One record of a batch, all of it (for tools that print a log: `oncelog dump-log`)."""

    offset_delta: int
    timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


def decode_records(records: bytes | bytearray | memoryview, count: int) -> list[DecodedRecord]:
    """Every field of each record of a decompressed batch body; RecordFormatError when a
    record overruns its length or the body. Off the hot path (dump tools)."""
    out: list[DecodedRecord] = []
    pos, end = 0, len(records)
    for _ in range(count):
        length, body = decode_varint(records, pos, end)
        record_end = body + length
        if length < 1 or record_end > end:
            raise RecordFormatError(f"record of {length} bytes overruns the batch")
        ts_delta, p = decode_varint(records, body + 1, record_end)
        offset_delta, p = decode_varint(records, p, record_end)
        key, p = _blob(records, p, record_end)
        value, p = _blob(records, p, record_end)
        header_count, p = decode_varint(records, p, record_end)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(max(header_count, 0)):
            name, p = _blob(records, p, record_end)
            header_value, p = _blob(records, p, record_end)
            headers.append(((name or b"").decode("utf-8", "replace"), header_value))
        out.append(DecodedRecord(offset_delta, ts_delta, key, value, headers))
        pos = record_end
    return out


def _blob(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> tuple[bytes | None, int]:
    """A varint-length byte string at `pos` (-1: null) and the position after it."""
    size, pos = decode_varint(buf, pos, limit)
    if size < 0:
        return None, pos
    if pos + size > limit:
        raise RecordFormatError(f"a field of {size} bytes overruns its record")
    return bytes(buf[pos : pos + size]), pos + size
