"""The hand-written Produce reader against kio's: the same request decodes to the same fields
(records as views of the frame), and anything it does not take plainly goes to kio."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.codec import DecodeError, build, decode_request, encode_entity, request_class
from oncelog.protocol.fast_requests import (
    _speedups,
    decode_produce,
    decode_produce_python,
    produce_timeout_ms,
)

PRODUCE = 0

Reader = Callable[[int, bytes, int], Any]

#: Both readers: the C one (when built, else the same Python one again) and the Python one.
readers = pytest.mark.parametrize(
    "reader",
    [
        pytest.param(decode_produce, id="c" if _speedups is not None else "default"),
        pytest.param(decode_produce_python, id="python"),
    ],
)

requests = st.fixed_dictionaries(
    {
        "transactional_id": st.none() | st.text(max_size=20),
        "acks": st.sampled_from([-1, 0, 1, 2, -2]),
        "timeout": st.integers(0, 2**31 - 1),
        "topic_data": st.lists(
            st.fixed_dictionaries(
                {
                    "name": st.text(max_size=20),
                    "partition_data": st.lists(
                        st.fixed_dictionaries(
                            {
                                "index": st.integers(-(2**31), 2**31 - 1),
                                "records": st.none() | st.binary(max_size=300),
                            }
                        ),
                        max_size=4,
                    ),
                }
            ),
            max_size=3,
        ),
    }
)


def _fields(request: Any) -> Any:
    return (
        request.transactional_id,
        int(request.acks),
        request.timeout,
        [
            (
                str(t.name),
                [
                    (int(p.index), None if p.records is None else bytes(p.records))
                    for p in t.partition_data
                ],
            )
            for t in request.topic_data
        ],
    )


@readers
@settings(max_examples=300, deadline=None)
@given(body=requests, version=st.integers(3, 11), pad=st.binary(max_size=3))
def test_produce_requests_read_as_kio_reads_them(
    reader: Reader, body: dict[str, Any], version: int, pad: bytes
) -> None:
    cls = request_class(PRODUCE, version)
    frame = b"head" + encode_entity(build(cls, body)) + pad
    fast = reader(version, frame, 4)
    assert fast is not None
    kio = decode_request(cls, frame, 4)
    assert _fields(fast) == _fields(kio)
    assert produce_timeout_ms(fast) == produce_timeout_ms(kio) == body["timeout"]
    for topic in fast.topic_data:
        for p in topic.partition_data:
            assert p.records is None or (isinstance(p.records, memoryview) and p.records.readonly)


@readers
@settings(max_examples=300, deadline=None)
@given(body=requests, version=st.integers(3, 11), data=st.data())
def test_damaged_produce_requests_go_to_kio(
    reader: Reader, body: dict[str, Any], version: int, data: st.DataObject
) -> None:
    """Cut or garbled, a request either still reads as kio reads it, or goes to kio."""
    cls = request_class(PRODUCE, version)
    raw = bytearray(encode_entity(build(cls, body)))
    if raw:
        for _ in range(data.draw(st.integers(1, 3))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    frame = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    fast = reader(version, frame, 0)
    if fast is None:
        return
    try:
        expected = decode_request(cls, frame, 0)
    except DecodeError:
        raise AssertionError("the hand reader took a request kio refuses") from None
    assert _fields(fast) == _fields(expected)


@readers
def test_negative_lengths_other_than_null_go_to_kio(reader: Reader) -> None:
    head = b"\xff\xff" + b"\xff\xff" + (1000).to_bytes(4, "big")  # null id, acks, timeout
    topic = (1).to_bytes(4, "big") + b"\x00\x01t" + (1).to_bytes(4, "big") + bytes(4)
    for length in (-2, -(2**31)):
        frame = head + topic + length.to_bytes(4, "big", signed=True)
        assert reader(3, frame, 0) is None
    null = reader(3, head + topic + (-1).to_bytes(4, "big", signed=True), 0)
    assert null is not None and null.topic_data[0].partition_data[0].records is None
    bad_name = head + (1).to_bytes(4, "big") + b"\xff\xfe"
    assert reader(3, bad_name, 0) is None


@readers
def test_every_cut_of_a_request_goes_to_kio_or_reads_as_kio(reader: Reader) -> None:
    body = {
        "transactional_id": "tx",
        "acks": -1,
        "timeout": 1000,
        "topic_data": [
            {"name": "a", "partition_data": [{"index": 0, "records": b"xyz"}]},
            {"name": "b", "partition_data": [{"index": 1, "records": None}]},
        ],
    }
    for version in (8, 9, 11):
        cls = request_class(PRODUCE, version)
        whole = encode_entity(build(cls, body))
        assert reader(version, whole, 0) is not None
        for cut in range(len(whole)):
            fast = reader(version, whole[:cut], 0)
            if fast is not None:
                assert _fields(fast) == _fields(decode_request(cls, whole[:cut], 0))
