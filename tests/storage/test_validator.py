"""validate_produce_records: every rejection maps to the Kafka error a client expects."""

from __future__ import annotations

import struct

import pytest

from oncelog.errors import (
    CorruptMessage,
    ErrorCode,
    InvalidRecord,
    KafkaError,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from oncelog.protocol.records.batch import HEADER_SIZE, build_batch, compute_crc
from oncelog.protocol.records.compression import Codec, compress
from oncelog.protocol.records.record import encode_record
from oncelog.storage.validator import KeylessRecords, validate_produce_records
from tests.storage.util import make_batch

MAX = 1 << 20


def _with(batch: bytes, fmt: str, offset: int, value: int, *, fix_crc: bool = True) -> bytes:
    data = bytearray(batch)
    struct.pack_into(fmt, data, offset, value)
    if fix_crc:
        struct.pack_into(">I", data, 17, compute_crc(data, 0, len(data)))
    return bytes(data)


def _raw(records: bytes, count: int, delta: int | None = None, attributes: int = 0) -> bytes:
    return build_batch(
        base_offset=0,
        records=records,
        record_count=count,
        last_offset_delta=count - 1 if delta is None else delta,
        base_timestamp=0,
        max_timestamp=0,
        attributes=attributes,
    )


def _recs(*deltas: int) -> bytes:
    return b"".join(encode_record(offset_delta=d, key=None, value=b"v") for d in deltas)


@pytest.mark.parametrize("codec", list(Codec), ids=lambda c: c.name)
def test_valid_batches_are_returned_with_positions(codec: Codec) -> None:
    a = make_batch([b"a", b"b", None], codec=codec)
    b = make_batch([b"c"], codec=codec)
    result = validate_produce_records(a + b, MAX, client=False)
    assert result.data == a + b
    assert [(pos, h.record_count) for pos, h in result.batches] == [(0, 3), (len(a), 1)]
    assert result.record_count == 4


def test_producer_base_offsets_are_ignored() -> None:
    batch = make_batch([b"a"], base_offset=12345)
    assert validate_produce_records(batch, MAX).batches[0][1].base_offset == 12345


SIZE = "trailing bytes|batchLength"  # the wording differs by which size check fires
CASES: list[tuple[str, bytes, type[KafkaError], str]] = [
    ("empty", b"", InvalidRecord, "no record batches"),
    ("magic-1", _with(make_batch([b"a"]), ">b", 16, 1), InvalidRecord, "magic v1"),
    ("magic-0", _with(make_batch([b"a"]), ">b", 16, 0), InvalidRecord, "magic v0"),
    ("magic-3", _with(make_batch([b"a"]), ">b", 16, 3), CorruptMessage, "magic 3"),
    ("short", make_batch([b"a"])[: HEADER_SIZE - 1], CorruptMessage, SIZE),
    ("few-bytes", b"\x00" * 10, CorruptMessage, SIZE),
    ("truncated", make_batch([b"a"])[:-1], CorruptMessage, "batchLength"),
    ("length-too-small", _with(make_batch([b"a"]), ">i", 8, 48), CorruptMessage, "batchLength"),
    ("negative-length", _with(make_batch([b"a"]), ">i", 8, -1), CorruptMessage, "batchLength"),
    (
        "bad-crc",
        _with(make_batch([b"a"]), ">b", HEADER_SIZE + 2, 9, fix_crc=False),
        CorruptMessage,
        "CRC32C",
    ),
    ("control", _with(make_batch([b"a"]), ">h", 21, 0x20), InvalidRecord, "control"),
    ("txn-without-pid", _with(make_batch([b"a"]), ">h", 21, 0x10), InvalidRecord, "producer id"),
    ("count-vs-delta", _raw(_recs(0, 1), 2, delta=2), InvalidRecord, "lastOffsetDelta"),
    ("zero-records", _raw(b"", 0, delta=-1), InvalidRecord, "record count 0"),
    ("codec-5", _with(make_batch([b"a"]), ">h", 21, 5), UnsupportedCompressionType, "codec 5"),
    ("codec-7", _with(make_batch([b"a"]), ">h", 21, 7), UnsupportedCompressionType, "codec 7"),
    ("not-gzip", _raw(b"not gzip", 1, attributes=1), CorruptMessage, "GZIP"),
    (
        "truncated-zstd",
        _raw(compress(Codec.ZSTD, _recs(0, 1) * 50)[:-3], 2, attributes=4),
        CorruptMessage,
        "zstd",
    ),
    ("wrong-delta", _raw(_recs(0, 2), 2), InvalidRecord, "offset delta 2"),
    ("too-few-records", _raw(_recs(0), 2), InvalidRecord, "overruns"),
    ("trailing-bytes", _raw(_recs(0) + b"\x00", 1), InvalidRecord, "bytes after"),
    (
        "compressed-wrong-count",
        _raw(compress(Codec.LZ4, _recs(0, 1)), 3, attributes=3),
        InvalidRecord,
        "overruns",
    ),
    ("second-batch-bad", make_batch([b"a"]) + b"\x00" * 5, CorruptMessage, SIZE),
]


@pytest.mark.parametrize(
    ("data", "error", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_rejections(data: bytes, error: type[KafkaError], message: str) -> None:
    with pytest.raises(error, match=message) as info:
        validate_produce_records(data, MAX)
    assert type(info.value) is error


def test_message_too_large_is_per_batch() -> None:
    batch = make_batch([b"x" * 100])
    assert validate_produce_records(batch, len(batch)).record_count == 1
    with pytest.raises(MessageTooLarge, match=f"batch of {len(batch)} bytes"):
        validate_produce_records(batch, len(batch) - 1)
    # two batches that each fit are fine together (where several batches are allowed)
    assert validate_produce_records(batch + batch, len(batch), client=False).record_count == 2


def test_transactional_batch_with_producer_id_is_accepted() -> None:
    batch = build_batch(
        base_offset=0,
        records=_recs(0),
        record_count=1,
        last_offset_delta=0,
        base_timestamp=0,
        max_timestamp=0,
        attributes=0x10,
        producer_id=5,
        producer_epoch=0,
        base_sequence=0,
    )
    assert validate_produce_records(batch, MAX).batches[0][1].is_transactional


def _keyed(keys: list[bytes | None], codec: Codec = Codec.NONE) -> bytes:
    body = b"".join(encode_record(offset_delta=i, key=k, value=b"v") for i, k in enumerate(keys))
    return _raw(compress(codec, body), len(keys), attributes=int(codec))


@pytest.mark.parametrize("codec", list(Codec))
def test_compacted_topic_refuses_records_without_a_key(codec: Codec) -> None:
    data = _keyed([b"a", None, b"c", None, None, None], codec)
    validate_produce_records(data, MAX)  # not compacted: keys are not looked at
    with pytest.raises(KeylessRecords) as info:
        validate_produce_records(data, MAX, compacted=True)
    assert info.value.code == ErrorCode.invalid_record
    assert info.value.indexes == [1, 3, 4, 5]
    why = "Compacted topic cannot accept message without key in topic partition t-0"
    assert info.value.record_errors("t-0")[0] == (1, why)
    message = info.value.kafka_message("t-0")
    assert message.startswith("One or more records have been rejected due to 4 record errors")
    assert message.count("RecordError(batchIndex=") == 3  # Kafka shows three at most


@pytest.mark.parametrize("codec", list(Codec))
def test_compacted_topic_accepts_keyed_records(codec: Codec) -> None:
    data = _keyed([b"a", b"", b"c"], codec)  # an empty key is a key, as in Kafka
    assert validate_produce_records(data, MAX, compacted=True).record_count == 3


def test_broker_appends_to_compacted_topics_are_not_key_checked() -> None:
    # Coordinators and control markers: the replica manager passes compacted=False for them.
    data = _keyed([None], Codec.NONE)
    validate_produce_records(data, MAX, client=False)
