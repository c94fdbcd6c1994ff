"""Property tests of the record codecs, the validator and decompression."""

from __future__ import annotations

import contextlib
import struct

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oncelog.errors import KafkaError
from oncelog.protocol.records.batch import (
    HEADER_SIZE,
    build_batch,
    compute_crc,
    iter_batches,
    parse_header,
)
from oncelog.protocol.records.compression import (
    Codec,
    DecompressionError,
    compress,
    decompress,
)
from oncelog.protocol.records.record import (
    RecordFormatError,
    check_records,
    decode_varint,
    encode_record,
    encode_varint,
    record_offsets_and_timestamps,
)
from oncelog.storage.validator import validate_produce_records

INT8 = st.integers(-(2**7), 2**7 - 1)
INT16 = st.integers(-(2**15), 2**15 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)
INT64 = st.integers(-(2**63), 2**63 - 1)
SMALL_BLOB = st.binary(max_size=40)
CODECS = st.sampled_from(list(Codec))

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# -- varints and records --------------------------------------------------------------------


@FAST
@given(INT64, st.binary(max_size=3))
def test_varint_round_trip(value: int, tail: bytes) -> None:
    raw = encode_varint(value)
    assert 1 <= len(raw) <= 10
    assert decode_varint(raw + tail, 0, len(raw) + len(tail)) == (value, len(raw))


@st.composite
def records(draw: st.DrawFn) -> list[dict[str, object]]:
    return draw(
        st.lists(
            st.fixed_dictionaries(
                {
                    "timestamp_delta": st.integers(-(2**40), 2**40),
                    "key": st.none() | SMALL_BLOB,
                    "value": st.none() | SMALL_BLOB,
                    "headers": st.lists(
                        st.tuples(st.text(max_size=8), st.none() | SMALL_BLOB), max_size=3
                    ),
                }
            ),
            min_size=1,
            max_size=8,
        )
    )


def _encode_all(recs: list[dict[str, object]]) -> bytes:
    return b"".join(encode_record(offset_delta=i, **r) for i, r in enumerate(recs))  # type: ignore[arg-type]


@FAST
@given(records(), st.binary(max_size=5), st.binary(max_size=5), INT64)
def test_record_encode_check_round_trip(
    recs: list[dict[str, object]], before: bytes, after: bytes, base_ts: int
) -> None:
    body = _encode_all(recs)
    buf = before + body + after
    check_records(buf, len(before), len(before) + len(body), len(recs))
    listed = record_offsets_and_timestamps(body, 1000, base_ts, len(recs))
    assert listed == [(1000 + i, base_ts + r["timestamp_delta"]) for i, r in enumerate(recs)]  # type: ignore[operator]
    for wrong in (len(recs) - 1, len(recs) + 1):
        try:
            check_records(buf, len(before), len(before) + len(body), wrong)
        except RecordFormatError:
            pass
        else:
            raise AssertionError(f"{len(recs)} records accepted as {wrong}")


@FAST
@given(st.binary(max_size=200), st.integers(0, 20))
def test_check_records_on_arbitrary_bytes_raises_only_record_format_error(
    data: bytes, count: int
) -> None:
    with contextlib.suppress(RecordFormatError):
        check_records(data, 0, len(data), count)


# -- batch header ---------------------------------------------------------------------------


@st.composite
def batch_fields(draw: st.DrawFn) -> dict[str, object]:
    return {
        "base_offset": draw(INT64),
        "records": draw(st.binary(max_size=100)),
        "record_count": draw(INT32),
        "last_offset_delta": draw(INT32),
        "base_timestamp": draw(INT64),
        "max_timestamp": draw(INT64),
        "attributes": draw(INT16),
        "producer_id": draw(INT64),
        "producer_epoch": draw(INT16),
        "base_sequence": draw(INT32),
        "partition_leader_epoch": draw(INT32),
    }


@FAST
@given(st.lists(batch_fields(), min_size=1, max_size=4))
def test_batch_build_parse_round_trip(all_fields: list[dict[str, object]]) -> None:
    batches = [build_batch(**f) for f in all_fields]  # type: ignore[arg-type]
    stream = b"".join(batches)
    found = list(iter_batches(stream))
    assert [pos for pos, _ in found] == [sum(map(len, batches[:i])) for i in range(len(batches))]
    for (pos, header), fields, batch in zip(found, all_fields, batches, strict=True):
        assert header == parse_header(batch)
        assert header.size == len(batch) == HEADER_SIZE + len(fields["records"])  # type: ignore[arg-type]
        assert header.magic == 2
        assert header.crc == compute_crc(stream, pos, header.size)
        for name, value in fields.items():
            if name != "records":
                assert getattr(header, name) == value, name
        assert stream[pos + HEADER_SIZE : pos + header.size] == fields["records"]


# -- validator ------------------------------------------------------------------------------


def _validate(data: bytes) -> None:
    try:
        result = validate_produce_records(data, 1 << 20)
    except KafkaError:
        return
    # whatever is accepted is whole, CRC-valid batches covering every byte
    end = 0
    for pos, header in result.batches:
        assert pos == end
        assert compute_crc(data, pos, header.size) == header.crc
        end = pos + header.size
    assert end == len(data)


@FAST
@given(st.binary(max_size=300))
@example(b"")
@example(b"\x00" * 17)
def test_validate_arbitrary_bytes(data: bytes) -> None:
    _validate(data)


def _fix_crc(data: bytearray) -> None:
    for pos, header in list(iter_batches(data)):
        struct.pack_into(">I", data, pos + 17, compute_crc(data, pos, header.size))


@FAST
@given(
    records(),
    CODECS,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
    st.integers(0, 10_000),
    st.binary(max_size=20),
    st.booleans(),
)
def test_validate_mutated_batches(
    recs: list[dict[str, object]],
    codec: Codec,
    flips: list[tuple[int, int]],
    cut: int,
    extra: bytes,
    fix_crc: bool,
) -> None:
    """Valid batches with bytes changed, cut or appended (and, to get past the CRC check
    into the records, the CRC recomputed): a KafkaError or a valid result, nothing else."""
    body = compress(codec, _encode_all(recs))
    batch = build_batch(
        base_offset=0,
        records=body,
        record_count=len(recs),
        last_offset_delta=len(recs) - 1,
        base_timestamp=0,
        max_timestamp=0,
        attributes=int(codec),
    )
    data = bytearray(batch + batch)
    for at, value in flips:
        data[at % len(data)] = value
    if cut % 3 == 0:  # sometimes cut the tail
        del data[len(data) - cut % len(data) :]
    data += extra
    if fix_crc:
        _fix_crc(data)
    _validate(bytes(data))


@FAST
@given(batch_fields(), st.integers(0, 7))
def test_validate_batches_with_valid_crc_and_arbitrary_content(
    fields: dict[str, object], codec: int
) -> None:
    fields["attributes"] = (int(fields["attributes"]) & ~7) | codec  # type: ignore[call-overload]
    _validate(build_batch(**fields))  # type: ignore[arg-type]


# -- compression ----------------------------------------------------------------------------

PREFIXES = {
    Codec.GZIP: b"\x1f\x8b\x08\x00",
    Codec.SNAPPY: b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01",
    Codec.LZ4: b"\x04\x22\x4d\x18",
    Codec.ZSTD: b"\x28\xb5\x2f\xfd",
}


@FAST
@given(st.sampled_from(list(PREFIXES)), st.binary(max_size=200), st.booleans())
@example(Codec.ZSTD, b"\x00\x00\x00\x00\x00", True)
@example(Codec.SNAPPY, b"\xff\xff\xff\x7f", True)
def test_decompress_arbitrary_bytes_raises_only_decompression_error(
    codec: Codec, data: bytes, with_magic: bool
) -> None:
    payload = PREFIXES[codec] + data if with_magic else data
    try:
        out = decompress(codec, payload, limit=1 << 16)
    except DecompressionError:
        return
    assert len(out) <= 1 << 16


@FAST
@given(st.sampled_from(list(PREFIXES)), st.binary(max_size=2000), st.data())
def test_compress_round_trip_and_truncation(codec: Codec, data: bytes, draw: st.DataObject) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    if len(packed) < 2:  # snappy's empty block is one byte
        return
    keep = draw.draw(st.integers(1, len(packed) - 1))
    try:
        decompress(codec, packed[:keep])
    except DecompressionError:
        return
    raise AssertionError(f"{codec.name} stream cut to {keep} of {len(packed)} bytes accepted")


@FAST
@given(st.sampled_from(list(PREFIXES)), st.binary(min_size=1, max_size=2000))
def test_decompression_cap(codec: Codec, data: bytes) -> None:
    packed = compress(codec, data)
    assert decompress(codec, packed, limit=len(data)) == data
    try:
        decompress(codec, packed, limit=len(data) - 1)
    except DecompressionError:
        return
    raise AssertionError("the cap was not enforced")
