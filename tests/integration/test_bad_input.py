"""Bad input over raw sockets against the real broker process.

The invariant for every case: the bad input is answered with a typed Kafka error in a valid
response, or that one connection is closed. The broker never crashes and keeps serving
other clients (checked after each case with a fresh ApiVersions + Metadata, and with a
produce/fetch by confluent-kafka where records are involved), its memory stays bounded by
what was actually received, and nothing is partially appended.
"""

from __future__ import annotations

import gzip
import struct
import time
import uuid
import zlib
from collections.abc import Iterator

import pytest
import zstandard
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.compression import Codec, compress
from oncelog.protocol.records.record import encode_record, encode_varint
from tests.broker_process import BrokerProcess
from tests.integration.rawclient import (
    API_VERSIONS,
    LIST_OFFSETS,
    METADATA,
    PRODUCE,
    Closed,
    RawClient,
    api_versions_body,
    decode_response,
    frame,
    header,
    list_offsets_body,
    metadata_body,
    produce_body,
    request,
    status_kb,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

INT32_MAX = 2**31 - 1
INT32_MIN = -(2**31)
DEFAULT_MAX_REQUEST = 104857600  # socket.request.max.bytes default
MB = 1024 * 1024
RSS_SLACK_KB = 200 * 1024
VM_PEAK_LIMIT_KB = 4 * 1024 * 1024

CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
UNSUPPORTED_VERSION = 35
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53


# -- fixtures and checks ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the cheap cases; restarted by `srv` if a case killed it."""
    proc = BrokerProcess(tmp_path_factory.mktemp("bad-input") / "data").start()
    yield proc
    proc.kill()


@pytest.fixture
def srv(shared: BrokerProcess) -> Iterator[BrokerProcess]:
    if not shared.alive():
        shared.start()
    log_start = _log_size(shared)
    yield shared
    assert_healthy(shared)
    assert "Traceback" not in _log_since(shared, log_start), _log_since(shared, log_start)


def _log_size(proc: BrokerProcess) -> int:
    try:
        return proc.log_path.stat().st_size
    except OSError:
        return 0


def _log_since(proc: BrokerProcess, start: int) -> str:
    with open(proc.log_path, "rb") as f:
        f.seek(start)
        return f.read().decode(errors="replace")


def assert_healthy(proc: BrokerProcess) -> None:
    """The broker is alive and answers a fresh client's ApiVersions and Metadata."""
    assert proc.alive(), f"broker died:\n{proc.log_tail()}"
    with RawClient(proc.port) as client:
        versions = client.call(API_VERSIONS, 3, api_versions_body())
        assert versions.error_code == 0
        assert {k.api_key for k in versions.api_keys} >= {0, 1, 3, 18}
        meta = client.call(METADATA, 12, metadata_body())
        assert [b.port for b in meta.brokers] == [proc.port]


def pid(proc: BrokerProcess) -> int:
    assert proc.proc is not None
    return proc.proc.pid


def rss_kb(proc: BrokerProcess) -> int:
    return status_kb(pid(proc))


def send_expect_closed(proc: BrokerProcess, data: bytes) -> None:
    with RawClient(proc.port) as client:
        client.send_tolerant(data)
        client.expect_closed()


# -- 1. frames -------------------------------------------------------------------------------


@pytest.mark.parametrize("size", [0, 1, 2, 3, 7], ids=lambda n: f"len{n}")
def test_frame_too_short_for_a_header_closes(srv: BrokerProcess, size: int) -> None:
    send_expect_closed(srv, frame(b"\x00\x12\x00\x03\x00\x00\x00"[:size]))


@pytest.mark.parametrize("prefix", [b"\x00", b"\x00\x00", b"\x00\x00\x00"], ids=len)
def test_partial_length_prefix_waits_then_close_is_harmless(
    srv: BrokerProcess, prefix: bytes
) -> None:
    with RawClient(srv.port) as client:
        client.send(prefix)
        client.expect_open()
        assert_healthy(srv)
        # the rest of a valid frame completes the prefix: it is then served normally
        whole = request(API_VERSIONS, 3, api_versions_body())
        client.send(whole[len(prefix) :])
        got, response = decode_response(API_VERSIONS, 3, client.recv_frame())
        assert (got, response.error_code) == (1, 0)
    with RawClient(srv.port) as client:
        client.send(prefix)
    assert_healthy(srv)


@pytest.mark.parametrize(
    "length",
    [-1, -2, INT32_MIN, DEFAULT_MAX_REQUEST + 1, INT32_MAX],
    ids=["minus1", "minus2", "int32min", "max_plus_1", "int32max"],
)
def test_frame_length_negative_or_above_max_closes(srv: BrokerProcess, length: int) -> None:
    send_expect_closed(srv, struct.pack(">i", length) + b"\x00\x12\x00\x03")


def test_frame_above_configured_max_closes_exact_max_is_served(
    broker_factory: type[BrokerProcess],
) -> None:
    limit = MB
    proc = broker_factory("small", {"socket.request.max.bytes": str(limit)}).start()
    # one byte too many, followed by all of it: closed without reading it all
    with RawClient(proc.port) as client:
        client.send_tolerant(struct.pack(">i", limit + 1) + b"\x00" * (limit + 1))
        client.expect_closed()
    assert_healthy(proc)
    # exactly the limit: a Produce whose records field fills the frame gets a typed error
    hdr = header(PRODUCE, 9, 5)
    for pad in range(limit - 64, limit):
        payload = hdr + produce_body({"nowhere": [(0, b"\x00" * pad)]})
        if len(payload) == limit:
            break
    else:  # pragma: no cover
        raise AssertionError("could not size the frame")
    with RawClient(proc.port) as client:
        client.send(frame(payload))
        got, response = decode_response(PRODUCE, 9, client.recv_frame())
    assert got == 5
    assert response.responses[0].partition_responses[0].error_code != 0
    assert_healthy(proc)


@pytest.mark.parametrize("then", ["hang", "close"])
def test_frame_longer_than_sent_costs_only_what_was_sent(srv: BrokerProcess, then: str) -> None:
    before = rss_kb(srv)
    with RawClient(srv.port) as client:
        client.send(struct.pack(">i", DEFAULT_MAX_REQUEST) + b"\x00\x03\x00\x0c" + b"x" * 1000)
        if then == "hang":
            client.expect_open()
            assert_healthy(srv)
            assert rss_kb(srv) - before < RSS_SLACK_KB
    assert_healthy(srv)
    assert rss_kb(srv) - before < RSS_SLACK_KB


def test_many_half_sent_frames_at_once(srv: BrokerProcess) -> None:
    before = rss_kb(srv)
    clients = [RawClient(srv.port) for _ in range(200)]
    try:
        for i, client in enumerate(clients):
            declared = DEFAULT_MAX_REQUEST - i
            client.send(struct.pack(">i", declared) + header(PRODUCE, 9, i) + b"\x00" * 16_000)
        time.sleep(0.5)
        assert_healthy(srv)
        grown = rss_kb(srv) - before
        assert grown < RSS_SLACK_KB, f"RSS grew by {grown} kB for 200 x 16 kB received"
        assert status_kb(pid(srv), "VmPeak") < VM_PEAK_LIMIT_KB  # nothing reserved either
        # a real client is served meanwhile
        confluent_roundtrip(srv, create_topic(srv, partitions=1), 0)
    finally:
        for client in clients:
            client.close()
    assert_healthy(srv)


# -- 2. request headers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        struct.pack(">h", API_VERSIONS),
        struct.pack(">hh", API_VERSIONS, 3),
        struct.pack(">hhi", API_VERSIONS, 3, 1),
        struct.pack(">hhi", METADATA, 12, 1),
        struct.pack(">hhi", METADATA, 1, 1) + b"\x00",
        struct.pack(">hhih", METADATA, 1, 1, 10) + b"abc",
        struct.pack(">hhih", METADATA, 12, 1, 3) + b"abc",  # flexible: tagged fields missing
    ],
    ids=[
        "api_key_only",
        "key_and_version",
        "no_client_id",
        "no_client_id_flexible",
        "half_client_id_length",
        "client_id_cut",
        "tagged_fields_missing",
    ],
)
def test_truncated_header_closes(srv: BrokerProcess, payload: bytes) -> None:
    send_expect_closed(srv, frame(payload))


@pytest.mark.parametrize("api_key", [-1, 4, 99, 1000, 32767, -32768])
def test_unknown_api_key_closes(srv: BrokerProcess, api_key: int) -> None:
    send_expect_closed(srv, frame(header(api_key, 0, flexible=False) + b"\x00" * 8))


@pytest.mark.parametrize("version", [4, 5, 127, 32767, -1, -32768])
def test_api_versions_unsupported_version_gets_v0_error_with_ranges(
    srv: BrokerProcess, version: int
) -> None:
    with RawClient(srv.port) as client:
        client.send(frame(header(API_VERSIONS, version, 42, flexible=True) + api_versions_body()))
        got, response = decode_response(API_VERSIONS, 0, client.recv_frame())
        assert got == 42
        assert response.error_code == UNSUPPORTED_VERSION
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges[API_VERSIONS] == (0, 3)
        assert ranges[PRODUCE][0] <= 9 <= ranges[PRODUCE][1]
        # the connection stays usable: the client retries with a version we have
        response = client.call(API_VERSIONS, 3, api_versions_body())
        assert response.error_code == 0


def test_api_versions_unsupported_version_with_header_only(srv: BrokerProcess) -> None:
    """No client id, no body: the ids are enough to answer in the v0 layout."""
    with RawClient(srv.port) as client:
        client.send(frame(struct.pack(">hhi", API_VERSIONS, 99, 5)))
        got, response = decode_response(API_VERSIONS, 0, client.recv_frame())
    assert (got, response.error_code) == (5, UNSUPPORTED_VERSION)


@pytest.mark.parametrize(
    ("api_key", "version"),
    [(PRODUCE, 0), (PRODUCE, 2), (PRODUCE, 99), (METADATA, -1), (METADATA, 13), (1, 32767)],
)
def test_other_api_unsupported_version_closes(
    srv: BrokerProcess, api_key: int, version: int
) -> None:
    send_expect_closed(srv, frame(header(api_key, version, flexible=False) + b"\x00" * 16))


@pytest.mark.parametrize(
    "client_id", [None, "", "x" * 32767, "é" * 10000], ids=["null", "empty", "max", "utf8"]
)
@pytest.mark.parametrize(("api_key", "version"), [(API_VERSIONS, 3), (METADATA, 12), (METADATA, 1)])
def test_client_id_edge_values_are_served(
    srv: BrokerProcess, client_id: str | None, api_key: int, version: int
) -> None:
    body = api_versions_body() if api_key == API_VERSIONS else metadata_body()
    if (api_key, version) == (METADATA, 1):
        body = struct.pack(">i", -1)  # all topics, non-flexible
    with RawClient(srv.port) as client:
        client.send(frame(header(api_key, version, 9, client_id) + body))
        got, response = decode_response(api_key, version, client.recv_frame())
    assert got == 9
    assert getattr(response, "error_code", 0) == 0


@pytest.mark.parametrize(
    "client_id_field",
    [
        struct.pack(">h", -2),
        struct.pack(">h", -32768),
        struct.pack(">h", 32767) + b"x" * 100,
        struct.pack(">h", 4) + b"\xff\xfe\xfd\xfc",
    ],
    ids=["minus2", "int16min", "longer_than_frame", "not_utf8"],
)
def test_bad_client_id_closes(srv: BrokerProcess, client_id_field: bytes) -> None:
    payload = struct.pack(">hhi", METADATA, 1, 1) + client_id_field + struct.pack(">i", -1)
    send_expect_closed(srv, frame(payload))


def _flexible_header_without_tags(api_key: int = METADATA, version: int = 12) -> bytes:
    return header(api_key, version, 3, "c", flexible=False)


@pytest.mark.parametrize(
    "tagged",
    [
        b"\xff\xff\xff\xff\x0f",  # 2^32-1 fields
        b"\xff\xff\xff\xff\x7f",  # 35-bit count in a 5-byte varint
        b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # 10-byte varint
        b"\x80",  # varint cut by the end of the frame
        b"\x01\x00\xff\xff\xff\xff\x07",  # one field of 2^31-1 bytes
        b"\x01\x00\x05abcd",  # one field one byte longer than the frame
        b"\x02\x00\x00",  # two fields, one present
    ],
    ids=["u32max", "35bit", "overlong", "cut", "huge_field", "field_overrun", "count_overrun"],
)
def test_absurd_tagged_fields_in_flexible_header_close(srv: BrokerProcess, tagged: bytes) -> None:
    send_expect_closed(srv, frame(_flexible_header_without_tags() + tagged))


def test_unknown_tagged_field_in_header_is_skipped(srv: BrokerProcess) -> None:
    tagged = b"\x01\x07\x03abc"  # one field, tag 7, three bytes
    with RawClient(srv.port) as client:
        client.send(frame(_flexible_header_without_tags() + tagged + metadata_body()))
        got, response = decode_response(METADATA, 12, client.recv_frame())
    assert got == 3
    assert response.brokers[0].port == srv.port



def test_unknown_tagged_fields_in_body_are_ignored_like_kafka(srv: BrokerProcess) -> None:
    """Newer clients may add tagged fields this version does not know: at the top level and
    inside a nested struct they are dropped, the known fields still count."""
    top_level = b"\x02\x05\x02\xaa\xbb\x09\x00"  # two unknown fields: tag 5 (2 bytes), tag 9
    nested_topic = bytes(16) + b"\x06topic" + b"\x01\x07\x01\x99"  # tag 7 in the topic struct
    body = b"\x02" + nested_topic + b"\x00\x00" + top_level
    with RawClient(srv.port) as client:
        client.send(frame(header(METADATA, 12, 5) + body))
        got, response = decode_response(METADATA, 12, client.recv_frame())
    assert got == 5
    assert [t.name for t in response.topics] == ["topic"]
    assert response.topics[0].error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION: no auto-create


# -- 3. request bodies -----------------------------------------------------------------------


def _i32(n: int) -> bytes:
    return struct.pack(">i", n)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_PRODUCE_V3_HEAD = b"\xff\xff" + struct.pack(">hi", 1, 1000)  # null txn id, acks, timeout
_PRODUCE_V9_HEAD = b"\x00" + struct.pack(">hi", 1, 1000)

BAD_BODIES: dict[str, tuple[int, int, bytes]] = {
    # Metadata v1: topics array (int32 count) of strings (int16 length)
    "md1_count_int32max": (METADATA, 1, _i32(INT32_MAX) + b"\x00\x01t"),
    "md1_count_minus2": (METADATA, 1, _i32(-2)),
    "md1_count_int32min": (METADATA, 1, _i32(INT32_MIN)),
    "md1_count_beyond_frame": (METADATA, 1, _i32(1000) + b"\x00\x01t"),
    "md1_name_len_beyond_frame": (METADATA, 1, _i32(1) + b"\x7f\xff" + b"abc"),
    "md1_name_len_minus2": (METADATA, 1, _i32(1) + b"\xff\xfe"),
    "md1_count_cut": (METADATA, 1, b"\x00\x00"),
    # Metadata v12: compact array of (uuid, compact nullable string, tags)
    "md12_count_int32max": (METADATA, 12, _uvarint(2**31) + b"\x00" * 16 + b"\x02t\x00"),
    "md12_count_u32max": (METADATA, 12, b"\xff\xff\xff\xff\x0f"),
    "md12_count_beyond_frame": (METADATA, 12, b"\x10" + b"\x00" * 16 + b"\x02t\x00"),
    "md12_name_len_int32max": (METADATA, 12, b"\x02" + b"\x00" * 16 + _uvarint(2**31)),
    "md12_name_len_beyond_frame": (METADATA, 12, b"\x02" + b"\x00" * 16 + b"\x40abc"),
    "md12_overlong_count": (METADATA, 12, b"\x81\x80\x80\x80\x80\x00"),
    "md12_overlong_10_bytes": (METADATA, 12, b"\xff" * 9 + b"\x01"),
    "md12_varint_cut": (METADATA, 12, b"\x80\x80"),
    "md12_body_tags_huge": (METADATA, 12, b"\x01\x00\x00" + b"\xff\xff\xff\xff\x0f"),
    "md12_empty_body": (METADATA, 12, b""),
    # Produce v3 (legacy encoding) and v9 (flexible)
    "p3_topics_int32max": (PRODUCE, 3, _PRODUCE_V3_HEAD + _i32(INT32_MAX)),
    "p3_records_int32max": (
        PRODUCE,
        3,
        _PRODUCE_V3_HEAD + _i32(1) + b"\x00\x01t" + _i32(1) + _i32(0) + _i32(INT32_MAX) + b"x",
    ),
    "p3_records_minus2": (
        PRODUCE,
        3,
        _PRODUCE_V3_HEAD + _i32(1) + b"\x00\x01t" + _i32(1) + _i32(0) + _i32(-2),
    ),
    "p3_partitions_beyond_frame": (
        PRODUCE,
        3,
        _PRODUCE_V3_HEAD + _i32(1) + b"\x00\x01t" + _i32(100_000) + _i32(0) + _i32(-1),
    ),
    "p9_topics_int32max": (PRODUCE, 9, _PRODUCE_V9_HEAD + _uvarint(2**31) + b"\x02t"),
    "p9_partitions_u32max": (PRODUCE, 9, _PRODUCE_V9_HEAD + b"\x02\x02t\xff\xff\xff\xff\x0f"),
    "p9_records_len_int32max": (
        PRODUCE,
        9,
        _PRODUCE_V9_HEAD + b"\x02\x02t\x02" + _i32(0) + _uvarint(2**31) + b"x",
    ),
    "p9_records_overlong": (
        PRODUCE,
        9,
        _PRODUCE_V9_HEAD + b"\x02\x02t\x02" + _i32(0) + b"\x80" * 6 + b"\x01",
    ),
    "p9_acks_cut": (PRODUCE, 9, b"\x00\x00"),
}


@pytest.mark.parametrize("case", list(BAD_BODIES))
def test_malformed_body_closes(srv: BrokerProcess, case: str) -> None:
    api_key, version, body = BAD_BODIES[case]
    before = rss_kb(srv)
    send_expect_closed(srv, frame(header(api_key, version, 11) + body))
    assert rss_kb(srv) - before < RSS_SLACK_KB
    # a declared array count must not even reserve address space (kio preallocates)
    assert status_kb(pid(srv), "VmPeak") < VM_PEAK_LIMIT_KB


def test_array_count_check_agrees_with_kio() -> None:
    """The pre-decode walk that bounds array counts must end exactly where kio does, for
    every request version we serve, or it would refuse (or misjudge) valid requests."""
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis import strategies as st
    from kio.serial import entity_reader
    from kio.static.primitive import Records

    from oncelog.protocol.codec import _entity_shape, _walk_entity, encode_entity, request_class
    from oncelog.protocol.registry import SUPPORTED_VERSIONS

    st.register_type_strategy(Records, st.binary(max_size=40))

    def check(cls: type) -> None:
        @settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.from_type(cls))
        def walk_matches(entity: object) -> None:
            data = encode_entity(entity)
            end = _walk_entity(_entity_shape(cls), data, 0, len(data))
            try:
                _, size = entity_reader(cls)(data, 0)
            except ValueError as exc:  # a generated timedelta near int64 ms does not read back
                assume("overflow" not in str(exc))
                raise
            assert end == size == len(data)

        walk_matches()

    for key, (low, high) in SUPPORTED_VERSIONS.items():
        for version in range(low, high + 1):
            check(request_class(key, version))


@pytest.mark.parametrize(
    ("api_key", "version", "garbage"),
    [
        (API_VERSIONS, 3, b"\x00"),
        (API_VERSIONS, 0, b"junk"),
        (METADATA, 12, b"\x01\x00\x00"),  # what librdkafka 2.16 sends for all topics
        (METADATA, 1, b"\x00\x00\x00\x00"),
        (LIST_OFFSETS, 7, b"\xff" * 100),
    ],
)
def test_trailing_bytes_after_valid_body_are_ignored_like_kafka(
    srv: BrokerProcess, api_key: int, version: int, garbage: bytes
) -> None:
    """Kafka's request parser never looks past a complete body, and clients rely on it."""
    if api_key == API_VERSIONS:
        body = api_versions_body() if version == 3 else b""
    elif api_key == LIST_OFFSETS:
        body = list_offsets_body("t", [0])
    else:
        body = metadata_body() if version == 12 else _i32(-1)
    with RawClient(srv.port) as client:
        client.send(frame(header(api_key, version, 7) + body + garbage))
        correlation_id, _ = decode_response(api_key, version, client.recv_frame())
        assert correlation_id == 7


def test_bad_frame_after_a_good_one_in_a_pipeline(srv: BrokerProcess) -> None:
    """A bad frame in the middle of a pipeline answers what came before and then closes."""
    with RawClient(srv.port) as client:
        good = request(API_VERSIONS, 3, api_versions_body(), 1)
        bad = frame(header(METADATA, 12, 2) + b"\x80")
        client.send(good + bad + request(API_VERSIONS, 3, api_versions_body(), 3))
        got, _ = decode_response(API_VERSIONS, 3, client.recv_frame())
        assert got == 1
        with pytest.raises(Closed):
            client.recv_frame()


# -- 4. record batches in Produce ------------------------------------------------------------


def create_topic(
    proc: BrokerProcess, partitions: int = 2, config: dict[str, str] | None = None
) -> str:
    name = f"bad-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": proc.bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, partitions, 1, config=config or {})]
    ).values():
        future.result(10)
    return name


def records(count: int, value: bytes = b"value") -> bytes:
    return b"".join(
        encode_record(offset_delta=i, key=f"k{i}".encode(), value=value) for i in range(count)
    )


def batch(
    count: int = 2,
    *,
    body: bytes | None = None,
    record_count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    producer_id: int = -1,
    value: bytes = b"value",
) -> bytes:
    """A CRC-correct batch; the arguments let the header lie about its records."""
    return build_batch(
        base_offset=0,
        records=records(count, value) if body is None else body,
        record_count=count if record_count is None else record_count,
        last_offset_delta=count - 1 if last_offset_delta is None else last_offset_delta,
        base_timestamp=int(time.time() * 1000),
        max_timestamp=int(time.time() * 1000),
        attributes=attributes,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    )


def with_magic(magic: int) -> bytes:
    buf = bytearray(batch())
    buf[16] = magic
    return bytes(buf)


def with_bad_crc() -> bytes:
    buf = bytearray(batch())
    buf[-1] ^= 0xFF
    return bytes(buf)


def with_batch_length(delta: int) -> bytes:
    buf = bytearray(batch())
    (length,) = struct.unpack_from(">i", buf, 8)
    struct.pack_into(">i", buf, 8, length + delta)
    return bytes(buf)


def with_batch_length_value(value: int) -> bytes:
    buf = bytearray(batch())
    struct.pack_into(">i", buf, 8, value)
    return bytes(buf)


def compressed(codec: int, count: int = 2) -> bytes:
    return batch(count, body=compress(codec, records(count)), attributes=codec)


def bomb(codec: str, size: int = 200 * MB) -> bytes:
    zeros = b"\x00" * size
    if codec == "zstd":
        payload, attr = zstandard.ZstdCompressor(level=1).compress(zeros), Codec.ZSTD
    elif codec == "gzip":
        payload, attr = gzip.compress(zeros, compresslevel=9), Codec.GZIP
    elif codec == "lz4":
        payload, attr = compress(Codec.LZ4, zeros), Codec.LZ4
    else:  # raw snappy whose preamble claims `size` bytes and carries almost nothing
        payload, attr = _uvarint(size) + b"\x00\x00", Codec.SNAPPY
    return batch(1, body=payload, attributes=attr)


def overrunning_record() -> bytes:
    """Two records, the second claiming 200 bytes more than the batch holds."""
    first = encode_record(offset_delta=0, key=b"k0", value=b"value")
    second = encode_record(offset_delta=1, key=b"k1", value=b"value")
    body = second[1:]  # a short record has a one-byte length varint
    assert second == encode_varint(len(body)) + body
    return batch(2, body=first + encode_varint(len(body) + 200) + body)


def produce(
    proc: BrokerProcess,
    topic: str,
    parts: list[tuple[int, bytes | None]],
    acks: int = -1,
) -> dict[int, tuple[int, int]]:
    """Send Produce v9 by hand; return {partition: (error_code, base_offset)}."""
    with RawClient(proc.port) as client:
        response = client.call(PRODUCE, 9, produce_body({topic: parts}, acks=acks))
    (topic_response,) = response.responses
    assert topic_response.name == topic
    return {p.index: (p.error_code, p.base_offset) for p in topic_response.partition_responses}


def end_offsets(proc: BrokerProcess, topic: str, partitions: list[int]) -> dict[int, int]:
    with RawClient(proc.port) as client:
        response = client.call(LIST_OFFSETS, 7, list_offsets_body(topic, partitions))
    return {p.partition_index: p.offset for p in response.topics[0].partitions}


def confluent_roundtrip(proc: BrokerProcess, topic: str, partition: int) -> None:
    """A real client appends after whatever happened and reads the whole partition back."""
    start = end_offsets(proc, topic, [partition])[partition]
    producer = Producer({"bootstrap.servers": proc.bootstrap, "acks": "all", "linger.ms": 0})
    delivered: list[int] = []
    producer.produce(
        topic,
        value=b"after",
        partition=partition,
        on_delivery=lambda e, m: delivered.append(-1 if e else m.offset()),
    )
    assert producer.flush(15) == 0
    assert delivered == [start]
    consumer = Consumer(
        {
            "bootstrap.servers": proc.bootstrap,
            "group.id": "bad-input",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([CkTopicPartition(topic, partition, 0)])
    values: list[bytes] = []
    offsets: list[int] = []
    deadline = time.monotonic() + 15
    try:
        while time.monotonic() < deadline and (not offsets or offsets[-1] < start):
            msg = consumer.poll(0.5)
            if msg is None or (msg.error() and msg.error().code() == -191):  # partition EOF
                continue
            assert msg.error() is None, msg.error()
            offsets.append(msg.offset())
            values.append(msg.value())
    finally:
        consumer.close()
    assert offsets == list(range(start + 1)), offsets
    assert values[-1] == b"after"


BAD_BATCHES: dict[str, tuple[object, int]] = {
    "bad_crc": (with_bad_crc, CORRUPT_MESSAGE),
    "magic0": (lambda: with_magic(0), INVALID_RECORD),
    "magic1": (lambda: with_magic(1), INVALID_RECORD),
    "magic3": (lambda: with_magic(3), CORRUPT_MESSAGE),
    "batch_length_past_end": (lambda: with_batch_length(1), CORRUPT_MESSAGE),
    "batch_length_far_past_end": (lambda: with_batch_length_value(INT32_MAX), CORRUPT_MESSAGE),
    "batch_length_negative": (lambda: with_batch_length_value(-1), CORRUPT_MESSAGE),
    "batch_length_below_header": (lambda: with_batch_length_value(10), CORRUPT_MESSAGE),
    "batch_length_short": (lambda: with_batch_length(-5), CORRUPT_MESSAGE),
    "trailing_bytes": (lambda: batch() + b"\x00" * 20, CORRUPT_MESSAGE),
    "header_only_prefix": (lambda: batch()[:40], CORRUPT_MESSAGE),
    "count_negative": (lambda: batch(record_count=-1), INVALID_RECORD),
    "count_zero": (lambda: batch(record_count=0, last_offset_delta=-1), INVALID_RECORD),
    "count_too_big": (lambda: batch(record_count=3, last_offset_delta=2), INVALID_RECORD),
    "count_int32max": (
        lambda: batch(record_count=INT32_MAX, last_offset_delta=INT32_MAX - 1),
        INVALID_RECORD,
    ),
    "count_too_small": (lambda: batch(record_count=1, last_offset_delta=0), INVALID_RECORD),
    "last_delta_wrong": (lambda: batch(last_offset_delta=5), INVALID_RECORD),
    "no_records": (lambda: batch(0, body=b"", record_count=0, last_offset_delta=0), INVALID_RECORD),
    "compression5": (lambda: batch(attributes=5), UNSUPPORTED_COMPRESSION_TYPE),
    "compression6": (lambda: batch(attributes=6), UNSUPPORTED_COMPRESSION_TYPE),
    "compression7": (lambda: batch(attributes=7), UNSUPPORTED_COMPRESSION_TYPE),
    "gzip_garbage": (lambda: batch(body=b"\x1f\x8bnot gzip", attributes=1), CORRUPT_MESSAGE),
    "snappy_garbage": (lambda: batch(body=b"\x05garbage", attributes=2), CORRUPT_MESSAGE),
    "lz4_garbage": (lambda: batch(body=b"not lz4 at all", attributes=3), CORRUPT_MESSAGE),
    "zstd_garbage": (lambda: batch(body=b"\x28\xb5\x2f\xfdjunk", attributes=4), CORRUPT_MESSAGE),
    "gzip_truncated": (
        lambda: batch(body=compress(Codec.GZIP, records(2))[:-10], attributes=1),
        CORRUPT_MESSAGE,
    ),
    "zstd_truncated": (
        lambda: batch(body=compress(Codec.ZSTD, records(50))[:-5], attributes=4),
        CORRUPT_MESSAGE,
    ),
    "gzip_wrong_count": (
        lambda: batch(3, body=compress(Codec.GZIP, records(2)), attributes=1),
        INVALID_RECORD,
    ),
    "record_overruns_batch": (overrunning_record, INVALID_RECORD),
    "record_length_negative": (
        lambda: batch(1, body=encode_varint(-5) + records(1)[1:]),
        INVALID_RECORD,
    ),
    "record_offset_delta_wrong": (
        lambda: batch(
            2,
            body=encode_record(offset_delta=0, key=None, value=b"a")
            + encode_record(offset_delta=7, key=None, value=b"b"),
        ),
        INVALID_RECORD,
    ),
    "record_garbage_varints": (lambda: batch(1, body=b"\xff" * 40), INVALID_RECORD),
    "control_batch": (lambda: batch(attributes=0x20, producer_id=5), INVALID_RECORD),
    "control_batch_no_pid": (lambda: batch(attributes=0x20), INVALID_RECORD),
    # Kafka refuses transactional records in a request without a transactional.id before it
    # looks at them, authorizer or not (KafkaApis.handleProduceRequest).
    "transactional_no_pid": (lambda: batch(attributes=0x10), TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    "good_then_bad_crc": (lambda: batch() + with_bad_crc(), CORRUPT_MESSAGE),
    "good_then_magic1": (lambda: batch() + with_magic(1), INVALID_RECORD),
    "good_then_truncated": (lambda: batch() + batch()[:-3], CORRUPT_MESSAGE),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_bad_batch_is_refused_and_nothing_is_appended(srv: BrokerProcess, case: str) -> None:
    make, expected = BAD_BATCHES[case]
    assert callable(make)
    topic = create_topic(srv)
    assert produce(srv, topic, [(0, batch(3))])[0] == (0, 0)
    result = produce(srv, topic, [(0, make())])
    assert result[0][0] == expected, result
    assert result[0][1] == -1
    assert end_offsets(srv, topic, [0, 1]) == {0: 3, 1: 0}
    confluent_roundtrip(srv, topic, 0)


@pytest.mark.parametrize("codec", [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD])
def test_valid_compressed_batches_are_accepted(srv: BrokerProcess, codec: int) -> None:
    topic = create_topic(srv)
    assert produce(srv, topic, [(0, compressed(codec, 5))])[0] == (0, 0)
    assert end_offsets(srv, topic, [0]) == {0: 5}
    confluent_roundtrip(srv, topic, 0)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_real_client_compressed_batches_pass_validation(srv: BrokerProcess, codec: str) -> None:
    """librdkafka's framing of each codec (zstd frames, xerial-less snappy, lz4 frames)."""
    topic = create_topic(srv, partitions=1)
    producer = Producer(
        {"bootstrap.servers": srv.bootstrap, "compression.type": codec, "linger.ms": 50}
    )
    errors: list[object] = []
    for i in range(500):
        value = (f"{codec}-{i}-" * 20).encode()
        producer.produce(
            topic, value=value, on_delivery=lambda e, m: errors.append(e) if e else None
        )
    assert producer.flush(15) == 0
    assert errors == []
    assert end_offsets(srv, topic, [0]) == {0: 500}
    confluent_roundtrip(srv, topic, 0)


def test_null_records_is_an_error(srv: BrokerProcess) -> None:
    topic = create_topic(srv)
    assert produce(srv, topic, [(0, None)])[0] == (INVALID_RECORD, -1)
    assert end_offsets(srv, topic, [0]) == {0: 0}


def test_batch_above_max_message_bytes(srv: BrokerProcess) -> None:
    topic = create_topic(srv, config={"max.message.bytes": "2000"})
    assert produce(srv, topic, [(0, batch(2, value=b"v" * 800))])[0] == (0, 0)
    big = batch(1, value=b"v" * 3000)
    assert produce(srv, topic, [(0, big)])[0] == (MESSAGE_TOO_LARGE, -1)
    assert produce(srv, topic, [(0, batch(1) + big)])[0] == (MESSAGE_TOO_LARGE, -1)
    assert end_offsets(srv, topic, [0]) == {0: 2}
    confluent_roundtrip(srv, topic, 0)


def test_one_good_one_bad_partition(srv: BrokerProcess) -> None:
    topic = create_topic(srv, partitions=3)
    result = produce(
        srv, topic, [(0, batch(4)), (1, batch(2) + with_bad_crc()), (2, with_magic(1))]
    )
    assert result == {0: (0, 0), 1: (CORRUPT_MESSAGE, -1), 2: (INVALID_RECORD, -1)}
    assert end_offsets(srv, topic, [0, 1, 2]) == {0: 4, 1: 0, 2: 0}
    for partition in range(3):
        confluent_roundtrip(srv, topic, partition)


def test_unknown_partition_next_to_good_one(srv: BrokerProcess) -> None:
    topic = create_topic(srv, partitions=1)
    result = produce(srv, topic, [(0, batch(2)), (7, batch(2)), (-1, batch(1))])
    assert result[0] == (0, 0)
    assert result[7][0] == 3 and result[-1][0] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    assert end_offsets(srv, topic, [0]) == {0: 2}


def test_acks0_bad_batch_closes_and_appends_nothing(srv: BrokerProcess) -> None:
    topic = create_topic(srv)
    with RawClient(srv.port) as client:
        client.send(request(PRODUCE, 9, produce_body({topic: [(0, with_bad_crc())]}, acks=0)))
        client.expect_closed()
    assert end_offsets(srv, topic, [0]) == {0: 0}
    confluent_roundtrip(srv, topic, 0)


def test_invalid_acks_is_refused(srv: BrokerProcess) -> None:
    topic = create_topic(srv)
    assert produce(srv, topic, [(0, batch(2))], acks=5)[0][0] == 21  # INVALID_REQUIRED_ACKS
    assert end_offsets(srv, topic, [0]) == {0: 0}


@pytest.mark.parametrize("codec", ["zstd", "gzip", "lz4", "snappy"])
def test_decompression_bomb_is_corrupt_with_bounded_memory(
    broker: BrokerProcess, codec: str
) -> None:
    topic = create_topic(broker)
    data = bomb(codec)
    assert len(data) < MB, len(data)
    peak_before = status_kb(pid(broker), "VmHWM")
    rss_before = rss_kb(broker)
    for _ in range(3):
        assert produce(broker, topic, [(0, data)])[0] == (CORRUPT_MESSAGE, -1)
    assert end_offsets(broker, topic, [0]) == {0: 0}
    assert rss_kb(broker) - rss_before < RSS_SLACK_KB
    assert status_kb(pid(broker), "VmHWM") - peak_before < RSS_SLACK_KB
    assert_healthy(broker)
    confluent_roundtrip(broker, topic, 0)


def test_records_overrunning_a_compressed_batch(srv: BrokerProcess) -> None:
    first = encode_record(offset_delta=0, key=None, value=b"a")
    body = zlib.compress(first + encode_varint(500) + b"\x00" * 10)
    topic = create_topic(srv)
    assert produce(srv, topic, [(0, batch(2, body=body, attributes=Codec.GZIP))])[0] == (
        INVALID_RECORD,
        -1,
    )
    assert end_offsets(srv, topic, [0]) == {0: 0}


def test_produce_to_rejected_partition_from_many_clients(srv: BrokerProcess) -> None:
    """Bad producers interleaved with good ones: only the good batches land, in order."""
    topic = create_topic(srv, partitions=1)
    good_total = 0
    for i in range(20):
        if i % 2:
            assert produce(srv, topic, [(0, with_bad_crc())])[0][0] == CORRUPT_MESSAGE
        else:
            code, base = produce(srv, topic, [(0, batch(3))])[0]
            assert (code, base) == (0, good_total)
            good_total += 3
    assert end_offsets(srv, topic, [0]) == {0: good_total}
    confluent_roundtrip(srv, topic, 0)
