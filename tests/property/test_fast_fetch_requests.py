"""The C reader of Fetch requests (`fast_requests.decode_fetch`) against kio's: the same
request reads to the same fields in every version the broker speaks (kio's defaults where a
version lacks a field), and anything it does not take plainly (damage, a tagged field) goes
to kio."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.codec import DecodeError, build, decode_request, encode_entity, request_class
from oncelog.protocol.fast_requests import FetchRequest, _speedups, decode_fetch, fetch_max_wait_ms

pytestmark = pytest.mark.skipif(_speedups is None, reason="the C helper is not built")

FETCH = 1
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)

partitions = st.fixed_dictionaries(
    {
        "partition": i32,
        "current_leader_epoch": i32,
        "fetch_offset": i64,
        "last_fetched_epoch": i32,
        "log_start_offset": i64,
        "partition_max_bytes": i32,
    }
)
requests = st.fixed_dictionaries(
    {
        "replica_id": i32,
        "max_wait": st.integers(0, 2**31 - 1).map(lambda ms: timedelta(milliseconds=ms)),
        "min_bytes": i32,
        "max_bytes": i32,
        "isolation_level": st.integers(-128, 127),
        "session_id": i32,
        "session_epoch": i32,
        "topics": st.lists(
            st.fixed_dictionaries(
                {"topic": names, "partitions": st.lists(partitions, max_size=4)}
            ),
            max_size=3,
        ),
        "forgotten_topics_data": st.lists(
            st.fixed_dictionaries({"topic": names, "partitions": st.lists(i32, max_size=3)}),
            max_size=2,
        ),
        "rack_id": names,
    }
)


def _build(version: int, body: dict[str, Any]) -> bytes:
    cls = request_class(FETCH, version)
    names_of = {f for f in cls.__dataclass_fields__}
    top = {k: v for k, v in body.items() if k in names_of}
    topic_cls = cls.__dataclass_fields__["topics"].type.__args__[0]
    part_cls = topic_cls.__dataclass_fields__["partitions"].type.__args__[0]
    part_names = set(part_cls.__dataclass_fields__)
    top["topics"] = [
        {
            "topic": t["topic"],
            "partitions": [
                {k: v for k, v in p.items() if k in part_names} for p in t["partitions"]
            ],
        }
        for t in body["topics"]
    ]
    return encode_entity(build(cls, top))


def _fields(request: Any) -> Any:
    return (
        int(getattr(request, "replica_id", -1)),
        request.max_wait,
        int(request.min_bytes),
        int(request.max_bytes),
        int(getattr(request, "isolation_level", 0)),
        int(getattr(request, "session_id", 0)),
        int(getattr(request, "session_epoch", -1)),
        [
            (
                str(t.topic),
                [
                    (
                        int(p.partition),
                        int(getattr(p, "current_leader_epoch", -1)),
                        int(p.fetch_offset),
                        int(getattr(p, "last_fetched_epoch", -1)),
                        int(getattr(p, "log_start_offset", -1)),
                        int(p.partition_max_bytes),
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
        [
            (str(t.topic), [int(i) for i in t.partitions])
            for t in getattr(request, "forgotten_topics_data", ())
        ],
        str(getattr(request, "rack_id", "")),
        getattr(request, "cluster_id", None),
    )


@settings(max_examples=300, deadline=None)
@given(body=requests, version=st.integers(4, 12), pad=st.binary(max_size=3))
def test_fetch_requests_read_as_kio_reads_them(
    body: dict[str, Any], version: int, pad: bytes
) -> None:
    frame = b"head" + _build(version, body) + pad
    fast = decode_fetch(version, frame, 4)
    assert isinstance(fast, FetchRequest)
    kio = decode_request(request_class(FETCH, version), frame, 4)
    assert _fields(fast) == _fields(kio)
    wait_ms = body["max_wait"] // timedelta(milliseconds=1)
    assert fetch_max_wait_ms(fast) == fetch_max_wait_ms(kio) == wait_ms


@settings(max_examples=300, deadline=None)
@given(body=requests, version=st.integers(4, 12), data=st.data())
def test_damaged_fetch_requests_go_to_kio(
    body: dict[str, Any], version: int, data: st.DataObject
) -> None:
    raw = bytearray(_build(version, body))
    if raw:
        for _ in range(data.draw(st.integers(1, 3))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    frame = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    fast = decode_fetch(version, frame, 0)
    if fast is None:
        return
    try:
        expected = decode_request(request_class(FETCH, version), frame, 0)
    except DecodeError:
        raise AssertionError("the C reader took a request kio refuses") from None
    assert _fields(fast) == _fields(expected)


def test_every_cut_of_a_fetch_goes_to_kio_or_reads_as_kio() -> None:
    body = {
        "replica_id": -1,
        "max_wait": timedelta(milliseconds=500),
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": "t",
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": 3,
                        "fetch_offset": 100 + p,
                        "last_fetched_epoch": 2,
                        "log_start_offset": 0,
                        "partition_max_bytes": 1 << 20,
                    }
                    for p in range(2)
                ],
            }
        ],
        "forgotten_topics_data": [{"topic": "old", "partitions": [1, 2]}],
        "rack_id": "r1",
    }
    for version in (4, 7, 11, 12):
        whole = _build(version, body)
        assert decode_fetch(version, whole, 0) is not None
        for cut in range(len(whole)):
            fast = decode_fetch(version, whole[:cut], 0)
            if fast is not None:
                expected = decode_request(request_class(FETCH, version), whole[:cut], 0)
                assert _fields(fast) == _fields(expected)


def test_a_tagged_field_goes_to_kio() -> None:
    body = {
        "cluster_id": "c",
        "replica_id": -1,
        "max_wait": timedelta(milliseconds=5),
        "min_bytes": 1,
        "max_bytes": 100,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    frame = encode_entity(build(request_class(FETCH, 12), body))
    assert decode_fetch(12, frame, 0) is None
    assert decode_request(request_class(FETCH, 12), frame, 0).cluster_id == "c"
