"""The zero-copy Produce decoder agrees with kio on every version, and never accepts what the
generic decoder would refuse (it returns None and leaves the verdict to kio)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.codec import DecodeError, build, decode_request, encode_entity, request_class
from oncelog.protocol.produce_request import decode_produce

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12)
partitions = st.lists(
    st.tuples(st.integers(-(2**31), 2**31 - 1), st.none() | st.binary(max_size=64)), max_size=4
)
requests = st.fixed_dictionaries(
    {
        "transactional_id": st.none() | names,
        "acks": st.sampled_from([-1, 0, 1, 2]),
        "timeout": st.integers(0, 2**31 - 1),
        "topic_data": st.lists(st.tuples(names, partitions), max_size=3),
    }
)


def encoded(version: int, req: dict[str, Any]) -> bytes:
    body = {
        **req,
        "topic_data": [
            {"name": n, "partition_data": [{"index": i, "records": r} for i, r in ps]}
            for n, ps in req["topic_data"]
        ],
    }
    return encode_entity(build(request_class(0, version), body))


def same(fast: Any, slow: Any) -> None:
    assert fast.transactional_id == slow.transactional_id
    assert fast.acks == slow.acks
    assert [t.name for t in fast.topic_data] == [t.name for t in slow.topic_data]
    for ft, st_ in zip(fast.topic_data, slow.topic_data, strict=True):
        got = [
            (p.index, None if p.records is None else bytes(p.records)) for p in ft.partition_data
        ]
        want = [(p.index, p.records) for p in st_.partition_data]
        assert got == want


@settings(max_examples=300, deadline=None)
@given(st.integers(3, 11), requests)
def test_fast_decoder_equals_kio(version: int, req: dict[str, Any]) -> None:
    buf = b"\x00" * 5 + encoded(version, req)
    fast = decode_produce(buf, 5, version)
    assert fast is not None
    same(fast, decode_request(request_class(0, version), buf, 5))


@settings(max_examples=500, deadline=None)
@given(st.integers(3, 11), requests, st.data())
def test_fast_decoder_never_accepts_what_kio_refuses(
    version: int, req: dict[str, Any], data: st.DataObject
) -> None:
    buf = bytearray(encoded(version, req))
    if buf and data.draw(st.booleans()):
        del buf[data.draw(st.integers(0, len(buf) - 1)) :]
    for _ in range(data.draw(st.integers(0, 3))):
        if buf:
            buf[data.draw(st.integers(0, len(buf) - 1))] = data.draw(st.integers(0, 255))
    mutated = bytes(buf)
    fast = decode_produce(mutated, 0, version)
    if fast is None:
        return
    try:
        slow = decode_request(request_class(0, version), mutated, 0)
    except DecodeError as exc:
        raise AssertionError(f"fast path accepted what kio refuses: {exc}") from exc
    same(fast, slow)
