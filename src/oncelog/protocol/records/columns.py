"""The records of fetched batches as column buffers in Arrow's layout (for the Spark source).

`RecordColumns` holds 16 bytearrays: validity bitmaps, int32 offsets and data of the key and
value, int64 offsets and timestamps (microseconds), int32 timestamp types, and the headers
column (`list<struct<key: string, value: binary>>`: list validity and offsets, header key
offsets and data, header value validity, offsets and data). `append_records` adds the records
of one decompressed batch body whose offsets fall in [lo, hi): in C (`_speedups.append_records`)
when the extension is built, else `append_records_python`, the reference the C code is tested
against. No Python object is made per record on the C path; pyarrow (only in oncelog.spark)
wraps the bytearrays without copying them.

A record without headers gets a null headers list, as Spark's Kafka source has it.
"""

from __future__ import annotations

import struct

from oncelog.protocol.records.record import RecordFormatError, decode_varint
from oncelog.protocol.records.speedups import speedups as _speedups

COLUMN_COUNT = 16
(
    KEY_VALID, KEY_OFFSETS, KEY_DATA,
    VALUE_VALID, VALUE_OFFSETS, VALUE_DATA,
    OFFSET, TIMESTAMP, TIMESTAMP_TYPE,
    HEADERS_VALID, HEADERS_OFFSETS,
    HEADER_KEY_OFFSETS, HEADER_KEY_DATA,
    HEADER_VALUE_VALID, HEADER_VALUE_OFFSETS, HEADER_VALUE_DATA,
) = range(COLUMN_COUNT)  # fmt: skip
_OFFSET_COLUMNS = (KEY_OFFSETS, VALUE_OFFSETS, HEADERS_OFFSETS, HEADER_KEY_OFFSETS,
                   HEADER_VALUE_OFFSETS)  # fmt: skip
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")


class RecordColumns:
    """Column buffers of the rows appended so far (a fresh one per output batch: pyarrow
    wraps the bytearrays, so they must not change once handed over)."""

    __slots__ = ("cols", "with_headers")

    def __init__(self, with_headers: bool) -> None:
        self.with_headers = with_headers
        self.cols = [bytearray() for _ in range(COLUMN_COUNT)]
        for i in _OFFSET_COLUMNS:
            self.cols[i] += _I32.pack(0)

    @property
    def rows(self) -> int:
        return len(self.cols[OFFSET]) // 8

    @property
    def header_count(self) -> int:
        return len(self.cols[HEADER_KEY_OFFSETS]) // 4 - 1

    @property
    def data_bytes(self) -> int:
        return len(self.cols[KEY_DATA]) + len(self.cols[VALUE_DATA])

    def append(
        self,
        body: bytes | bytearray | memoryview,
        count: int,
        base_offset: int,
        base_timestamp: int,
        append_time: int,
        lo: int,
        hi: int,
    ) -> int:
        """Append the records of `body` with lo <= offset < hi; returns how many.
        `append_time` >= 0 is a LogAppendTime batch's timestamp (its max timestamp)."""
        return append_records(
            body, count, base_offset, base_timestamp, append_time, lo, hi, self.cols,
            self.with_headers,
        )  # fmt: skip


def append_records(
    body: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int,
    lo: int,
    hi: int,
    cols: list[bytearray],
    with_headers: bool,
) -> int:
    if _speedups is not None:
        try:
            n: int = _speedups.append_records(
                body, count, base_offset, base_timestamp, append_time, lo, hi, cols, with_headers
            )
        except ValueError as exc:
            raise RecordFormatError(str(exc)) from None
        return n
    return append_records_python(
        body, count, base_offset, base_timestamp, append_time, lo, hi, cols, with_headers
    )


def _set_bit(bitmap: bytearray, index: int, on: bool) -> None:
    byte = index >> 3
    while len(bitmap) <= byte:
        bitmap.append(0)
    if on:
        bitmap[byte] |= 1 << (index & 7)
    else:
        bitmap[byte] &= ~(1 << (index & 7)) & 0xFF


def _blob(buf: bytes | bytearray | memoryview, pos: int, limit: int) -> tuple[bytes | None, int]:
    size, pos = decode_varint(buf, pos, limit)
    if size < 0:
        return None, pos
    if size > limit - pos:
        raise RecordFormatError(f"a field of {size} bytes overruns its record")
    return bytes(buf[pos : pos + size]), pos + size


_Fields = tuple[int, int, bytes | None, bytes | None, int, int]


def _read_record(
    body: bytes | bytearray | memoryview, pos: int, end: int, i: int
) -> tuple[_Fields, int]:
    """(timestamp delta, offset delta, key, value, header count, headers' position) of the
    record at `pos` and where the next record starts."""
    try:
        length, start = decode_varint(body, pos, end)
    except RecordFormatError:
        raise RecordFormatError(f"record {i} overruns the batch") from None
    if length < 1 or length > end - start:
        raise RecordFormatError(f"record {i} overruns the batch")
    record_end = start + length
    try:
        ts_delta, p = decode_varint(body, start + 1, record_end)
        offset_delta, p = decode_varint(body, p, record_end)
        key, p = _blob(body, p, record_end)
        value, p = _blob(body, p, record_end)
        header_count, p = decode_varint(body, p, record_end)
    except RecordFormatError:
        raise RecordFormatError(f"record {i} is malformed") from None
    return (ts_delta, offset_delta, key, value, header_count, p), record_end


def _append_headers(
    cols: list[bytearray],
    body: bytes | bytearray | memoryview,
    fields: _Fields,
    record_end: int,
    row: int,
    i: int,
) -> None:
    header_count, p = fields[4], fields[5]
    if header_count < 0 or header_count > record_end - p:
        raise RecordFormatError(f"record {i} has a bad header count")
    _set_bit(cols[HEADERS_VALID], row, header_count > 0)
    headers = len(cols[HEADER_KEY_OFFSETS]) // 4 - 1
    for _ in range(header_count):
        try:
            name, p = _blob(body, p, record_end)
            hvalue, p = _blob(body, p, record_end)
        except RecordFormatError:
            raise RecordFormatError(f"record {i} has a malformed header") from None
        if name:
            cols[HEADER_KEY_DATA] += name
        cols[HEADER_KEY_OFFSETS] += _I32.pack(len(cols[HEADER_KEY_DATA]))
        _set_bit(cols[HEADER_VALUE_VALID], headers, hvalue is not None)
        if hvalue:
            cols[HEADER_VALUE_DATA] += hvalue
        cols[HEADER_VALUE_OFFSETS] += _I32.pack(len(cols[HEADER_VALUE_DATA]))
        headers += 1
    cols[HEADERS_OFFSETS] += _I32.pack(headers)


def _fit_bitmap(bitmap: bytearray, bits: int) -> None:
    """Exactly the bytes `bits` bits need (as the C version leaves a bitmap)."""
    size = (bits + 7) // 8
    del bitmap[size:]
    bitmap.extend(bytes(size - len(bitmap)))


def append_records_python(
    body: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int,
    lo: int,
    hi: int,
    cols: list[bytearray],
    with_headers: bool,
) -> int:
    """The reference of `append_records` (and its fallback without the C extension)."""
    if count < 0 or count > len(body):
        raise RecordFormatError("bad record count or offsets buffers")
    rows = len(cols[OFFSET]) // 8
    ts_type = _I32.pack(1 if append_time >= 0 else 0)
    pos, end = 0, len(body)
    n = 0
    for i in range(count):
        fields, record_end = _read_record(body, pos, end, i)
        pos = record_end
        ts_delta, offset_delta, key, value = fields[:4]
        offset = base_offset + offset_delta
        if offset < lo or offset >= hi:
            continue
        row = rows + n
        for valid, offsets, data, blob in (
            (KEY_VALID, KEY_OFFSETS, KEY_DATA, key),
            (VALUE_VALID, VALUE_OFFSETS, VALUE_DATA, value),
        ):
            _set_bit(cols[valid], row, blob is not None)
            if blob:
                cols[data] += blob
            cols[offsets] += _I32.pack(len(cols[data]))
        cols[OFFSET] += _I64.pack(offset)
        stamp = append_time if append_time >= 0 else base_timestamp + ts_delta
        cols[TIMESTAMP] += _I64.pack(stamp * 1000)
        cols[TIMESTAMP_TYPE] += ts_type
        if with_headers:
            _append_headers(cols, body, fields, record_end, row, i)
        n += 1
    if pos != end:
        raise RecordFormatError(f"{end - pos} bytes after the last of {count} records")
    _fit_bitmap(cols[KEY_VALID], rows + n)
    _fit_bitmap(cols[VALUE_VALID], rows + n)
    if with_headers:
        _fit_bitmap(cols[HEADERS_VALID], rows + n)
        _fit_bitmap(cols[HEADER_VALUE_VALID], len(cols[HEADER_KEY_OFFSETS]) // 4 - 1)
    return n
