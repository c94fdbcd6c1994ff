"""The hand-written Produce reader against kio's: the same request decodes to the same fields
(records as views of the frame), and anything it does not take plainly goes to kio."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.codec import DecodeError, build, decode_request, encode_entity, request_class
from oncelog.protocol.fast_requests import decode_produce

PRODUCE = 0

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


@settings(max_examples=300, deadline=None)
@given(body=requests, version=st.integers(3, 11), pad=st.binary(max_size=3))
def test_produce_requests_read_as_kio_reads_them(
    body: dict[str, Any], version: int, pad: bytes
) -> None:
    cls = request_class(PRODUCE, version)
    frame = b"head" + encode_entity(build(cls, body)) + pad
    fast = decode_produce(version, frame, 4)
    assert fast is not None
    assert _fields(fast) == _fields(decode_request(cls, frame, 4))
    for topic in fast.topic_data:
        for p in topic.partition_data:
            assert p.records is None or (isinstance(p.records, memoryview) and p.records.readonly)


@settings(max_examples=300, deadline=None)
@given(body=requests, version=st.integers(3, 11), data=st.data())
def test_damaged_produce_requests_go_to_kio(
    body: dict[str, Any], version: int, data: st.DataObject
) -> None:
    """Cut or garbled, a request either still reads as kio reads it, or goes to kio."""
    cls = request_class(PRODUCE, version)
    raw = bytearray(encode_entity(build(cls, body)))
    if raw:
        for _ in range(data.draw(st.integers(1, 3))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    frame = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    fast = decode_produce(version, frame, 0)
    if fast is None:
        return
    try:
        expected = decode_request(cls, frame, 0)
    except DecodeError:
        raise AssertionError("the hand reader took a request kio refuses") from None
    assert _fields(fast) == _fields(expected)


def test_negative_lengths_other_than_null_go_to_kio() -> None:
    head = b"\xff\xff" + b"\xff\xff" + (1000).to_bytes(4, "big")  # null id, acks, timeout
    topic = (1).to_bytes(4, "big") + b"\x00\x01t" + (1).to_bytes(4, "big") + bytes(4)
    for length in (-2, -(2**31)):
        frame = head + topic + length.to_bytes(4, "big", signed=True)
        assert decode_produce(3, frame, 0) is None
    null = decode_produce(3, head + topic + (-1).to_bytes(4, "big", signed=True), 0)
    assert null is not None and null.topic_data[0].partition_data[0].records is None
    bad_name = head + (1).to_bytes(4, "big") + b"\xff\xfe"
    assert decode_produce(3, bad_name, 0) is None
