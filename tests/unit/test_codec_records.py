"""Record batch header and record codecs against hand-assembled bytes."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from oncelog.protocol.records.batch import (
    HEADER_SIZE,
    build_batch,
    compute_crc,
    iter_batches,
    parse_header,
    peek_prefix,
    rewrite_offsets,
    set_log_append_time,
)
from oncelog.protocol.records.record import (
    RecordFormatError,
    check_records,
    decode_varint,
    encode_record,
    encode_varint,
    record_offsets_and_timestamps,
)

VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-64, "7f"),
    (63, "7e"),
    (64, "8001"),
    (300, "d804"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(("value", "hexed"), VARINTS)
def test_varint_vectors(value: int, hexed: str) -> None:
    raw = bytes.fromhex(hexed)
    assert encode_varint(value) == raw
    assert decode_varint(raw + b"\xaa", 0, len(raw) + 1) == (value, len(raw))


def test_varint_errors() -> None:
    with pytest.raises(RecordFormatError):
        decode_varint(b"\x80\x80", 0, 2)  # runs past the limit
    with pytest.raises(RecordFormatError):
        decode_varint(b"\x80\x01", 0, 1)  # the limit is before the end of the buffer
    with pytest.raises(RecordFormatError):
        decode_varint(b"\xff" * 11, 0, 11)  # longer than 10 bytes
    with pytest.raises(RecordFormatError):
        decode_varint(b"", 0, 0)


def test_encode_record_bytes() -> None:
    assert encode_record(offset_delta=0, key=None, value=b"hi").hex() == "100000000104686900"
    raw = encode_record(
        offset_delta=3,
        timestamp_delta=-2,
        key=b"k",
        value=None,
        headers=[("h", b"v"), ("n", None)],
    )
    body = "00" + "03" + "06" + "026b" + "01" + "04" + "0268" + "0276" + "026e" + "01"
    assert raw.hex() == encode_varint(len(bytes.fromhex(body))).hex() + body


def _records(n: int, ts_deltas: list[int] | None = None) -> bytes:
    deltas = ts_deltas or [0] * n
    return b"".join(
        encode_record(offset_delta=i, timestamp_delta=deltas[i], key=b"k", value=b"v" * i)
        for i in range(n)
    )


def test_check_records_accepts_and_lists() -> None:
    body = b"xx" + _records(3, [0, 7, -5]) + b"yy"
    check_records(body, 2, len(body) - 2, 3)
    assert record_offsets_and_timestamps(_records(3, [0, 7, -5]), 100, 1000, 3) == [
        (100, 1000),
        (101, 1007),
        (102, 995),
    ]


@pytest.mark.parametrize(
    ("body", "count", "message"),
    [
        (_records(3), 2, "bytes after"),
        (_records(3), 4, "overruns"),
        (_records(2)[:-1], 2, "overruns"),
        (encode_record(offset_delta=1, key=None, value=b""), 1, "offset delta 1"),
        (_records(1) + encode_record(offset_delta=5, key=None, value=b""), 2, "offset delta 5"),
        (b"\x04\x00\x00\x00", 1, "overruns"),  # length 2 (< 4)
        (b"\x01", 1, "overruns"),  # negative length
        (b"", 1, "varint"),
    ],
)
def test_check_records_rejects(body: bytes, count: int, message: str) -> None:
    with pytest.raises(RecordFormatError, match=message):
        check_records(body, 0, len(body), count)


def test_crc32c_is_castagnoli() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_build_batch_layout() -> None:
    records = _records(2)
    batch = build_batch(
        base_offset=7,
        records=records,
        record_count=2,
        last_offset_delta=1,
        base_timestamp=1000,
        max_timestamp=1005,
        attributes=0x10,
        producer_id=42,
        producer_epoch=3,
        base_sequence=9,
        partition_leader_epoch=5,
    )
    assert len(batch) == HEADER_SIZE + len(records)
    fields = struct.unpack_from(">qiibIhiqqqhii", batch, 0)
    crc = crc32c(batch[21:])
    assert fields == (7, len(batch) - 12, 5, 2, crc, 0x10, 1, 1000, 1005, 42, 3, 9, 2)
    header = parse_header(batch)
    assert header == fields
    assert (header.size, header.last_offset, header.next_offset) == (len(batch), 8, 9)
    assert header.is_transactional and not header.is_control and header.has_producer_id
    assert header.compression == 0 and not header.log_append_time
    assert header.last_sequence == 10
    assert peek_prefix(batch, 0) == (7, len(batch) - 12)
    assert compute_crc(batch, 0, len(batch)) == crc


def test_last_sequence_wraps_and_no_sequence() -> None:
    wrap = parse_header(
        build_batch(
            base_offset=0,
            records=_records(3),
            record_count=3,
            last_offset_delta=2,
            base_timestamp=0,
            max_timestamp=0,
            producer_id=1,
            base_sequence=2**31 - 2,
        )
    )
    assert wrap.last_sequence == 0
    none = parse_header(
        build_batch(
            base_offset=0,
            records=_records(1),
            record_count=1,
            last_offset_delta=0,
            base_timestamp=0,
            max_timestamp=0,
        )
    )
    assert none.last_sequence == -1 and not none.has_producer_id


def _batch(base: int, n: int) -> bytes:
    return build_batch(
        base_offset=base,
        records=_records(n),
        record_count=n,
        last_offset_delta=n - 1,
        base_timestamp=0,
        max_timestamp=0,
    )


def test_rewrite_offsets_keeps_the_crc_valid() -> None:
    data = bytearray(_batch(0, 2) + _batch(0, 1))
    first = parse_header(data)
    rewrite_offsets(data, first.size, 123, 9)
    second = parse_header(data, first.size)
    assert (second.base_offset, second.partition_leader_epoch) == (123, 9)
    assert compute_crc(data, first.size, second.size) == second.crc
    assert data[: first.size] == _batch(0, 2)


def test_set_log_append_time() -> None:
    data = bytearray(b"pad" + _batch(0, 2))
    size = len(data) - 3
    set_log_append_time(data, 3, size, 99_999)
    header = parse_header(data, 3)
    assert header.log_append_time and header.max_timestamp == 99_999
    assert header.base_timestamp == 0  # only maxTimestamp and the attribute change
    assert compute_crc(data, 3, size) == header.crc


def test_iter_batches_stops_at_incomplete_or_implausible() -> None:
    a, b = _batch(0, 1), _batch(1, 2)
    assert [(p, h.base_offset) for p, h in iter_batches(a + b)] == [(0, 0), (len(a), 1)]
    assert [p for p, _ in iter_batches(a + b[:-1])] == [0]
    assert [p for p, _ in iter_batches(a + b[: HEADER_SIZE - 1])] == [0]
    assert [p for p, _ in iter_batches(a + bytes(HEADER_SIZE) + b)] == [0]
    assert list(iter_batches(b"")) == []
