"""The replica fetcher's hand-written Fetch codec against kio's, the oracle: the follower's
request is kio's bytes, an answer reads as kio reads it (records as views of the frame), and
anything the hand reader does not take plainly goes to kio."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader

from oncelog.protocol.codec import build, encode_entity, request_class, response_class
from oncelog.protocol.fast_fetch import (
    FOLLOWER_FETCH_VERSION,
    FollowerFetchPartition,
    decode_fetch_response,
    decode_fetch_response_python,
    encode_follower_fetch,
)

FETCH = 1
#: The reader on the fetcher's path (C when built) and the Python one it is held to.
READERS = pytest.mark.parametrize(
    "decode", [decode_fetch_response, decode_fetch_response_python], ids=["c", "python"]
)
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
names = st.text(max_size=12)

follower_partitions = st.builds(
    FollowerFetchPartition,
    partition=i32,
    current_leader_epoch=i32,
    fetch_offset=i64,
    log_start_offset=i64,
    partition_max_bytes=i32,
    last_fetched_epoch=i32,
)


@settings(max_examples=300, deadline=None)
@given(
    replica_id=i32,
    max_wait=st.integers(0, 2**31 - 1),
    min_bytes=i32,
    max_bytes=i32,
    topics=st.lists(st.tuples(names, st.lists(follower_partitions, max_size=4)), max_size=3),
    session_id=i32,
    session_epoch=i32,
    forgotten=st.lists(st.tuples(names, st.lists(i32, max_size=4)), max_size=3),
)
def test_the_follower_fetch_is_kios_bytes(
    replica_id: int,
    max_wait: int,
    min_bytes: int,
    max_bytes: int,
    topics: list[tuple[str, list[FollowerFetchPartition]]],
    session_id: int,
    session_epoch: int,
    forgotten: list[tuple[str, list[int]]],
) -> None:
    body = {
        "replica_id": replica_id,
        "max_wait": max_wait,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": session_epoch,
        "topics": [
            {
                "topic": name,
                "partitions": [
                    {
                        "partition": p.partition,
                        "current_leader_epoch": p.current_leader_epoch,
                        "fetch_offset": p.fetch_offset,
                        "last_fetched_epoch": p.last_fetched_epoch,
                        "log_start_offset": p.log_start_offset,
                        "partition_max_bytes": p.partition_max_bytes,
                    }
                    for p in partitions
                ],
            }
            for name, partitions in topics
        ],
        "forgotten_topics_data": [
            {"topic": name, "partitions": indexes} for name, indexes in forgotten
        ],
        "rack_id": "",
    }
    expected = encode_entity(build(request_class(FETCH, FOLLOWER_FETCH_VERSION), body))
    got = encode_follower_fetch(
        replica_id, max_wait, min_bytes, max_bytes, topics, session_id, session_epoch, forgotten
    )
    assert got == expected


fetch_partitions = st.fixed_dictionaries(
    {
        "partition_index": i32,
        "error_code": st.sampled_from([0, 1, 3, 6, 74, 75]),
        "high_watermark": i64,
        "last_stable_offset": i64,
        "log_start_offset": i64,
        "aborted_transactions": st.none()
        | st.lists(st.fixed_dictionaries({"producer_id": i64, "first_offset": i64}), max_size=3),
        "preferred_read_replica": i32,
        "records": st.none() | st.binary(max_size=400),
    }
)
fetch_answers = st.fixed_dictionaries(
    {
        "throttle_time": st.integers(0, 2**31 - 1),
        "error_code": st.sampled_from([0, 1, 70]),
        "session_id": i32,
        "responses": st.lists(
            st.fixed_dictionaries(
                {"topic": names, "partitions": st.lists(fetch_partitions, max_size=4)}
            ),
            max_size=3,
        ),
    }
)


def _kio(version: int, frame: bytes, offset: int) -> Any:
    entity, _ = entity_reader(response_class(FETCH, version))(frame, offset)
    return entity


def _fields(response: Any, version: int) -> Any:
    def aborted(p: Any) -> Any:
        if p.aborted_transactions is None:
            return None
        return [(int(t.producer_id), int(t.first_offset)) for t in p.aborted_transactions]

    return (
        int(response.error_code) if version >= 7 else 0,
        int(response.session_id) if version >= 7 else 0,
        [
            (
                str(t.topic),
                [
                    (
                        int(p.partition_index),
                        int(p.error_code),
                        int(p.high_watermark),
                        int(p.last_stable_offset),
                        int(p.log_start_offset) if version >= 5 else -1,
                        aborted(p),
                        int(p.preferred_read_replica) if version >= 11 else -1,
                        None if p.records is None else bytes(p.records),
                    )
                    for p in t.partitions
                ],
            )
            for t in response.responses
        ],
    )


@READERS
@settings(max_examples=300, deadline=None)
@given(answer=fetch_answers, version=st.integers(4, 12), pad=st.binary(max_size=3))
def test_answers_read_as_kio_reads_them(
    decode: Any, answer: dict[str, Any], version: int, pad: bytes
) -> None:
    frame = b"head" + encode_entity(build(response_class(FETCH, version), answer)) + pad
    fast = decode(version, frame, 4)
    assert fast is not None
    assert _fields(fast, version) == _fields(_kio(version, frame, 4), version)
    for topic in fast.responses:
        for p in topic.partitions:
            assert p.records is None or (isinstance(p.records, memoryview) and p.records.readonly)


@settings(max_examples=300, deadline=None)
@given(answer=fetch_answers, version=st.integers(4, 12), data=st.data())
def test_damaged_answers_go_to_kio(answer: dict[str, Any], version: int, data: Any) -> None:
    """Cut or garbled, an answer either still reads as kio reads it, or goes to kio; the C
    and Python readers take and leave the same ones."""
    raw = bytearray(encode_entity(build(response_class(FETCH, version), answer)))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    frame = bytes(raw[: data.draw(st.integers(0, len(raw)))])
    fast = decode_fetch_response(version, frame, 0)
    python = decode_fetch_response_python(version, frame, 0)
    assert (fast is None) == (python is None)
    if fast is None or python is None:
        return
    assert _fields(fast, version) == _fields(python, version)
    try:
        expected = _kio(version, frame, 0)
    except Exception:
        raise AssertionError(f"the hand reader took an answer kio refuses: {frame!r}") from None
    assert _fields(fast, version) == _fields(expected, version)


@pytest.mark.parametrize(
    "tagged",
    [
        {"diverging_epoch": {"epoch": 3, "end_offset": 10}},
        {"current_leader": {"leader_id": 2, "leader_epoch": 4}},
        {"snapshot_id": {"end_offset": 10, "epoch": 3}},
    ],
)
@READERS
def test_tagged_fields_go_to_kio(decode: Any, tagged: dict[str, Any]) -> None:
    partition = {
        "partition_index": 0,
        "error_code": 0,
        "high_watermark": 5,
        "last_stable_offset": 5,
        "log_start_offset": 0,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"x",
        **tagged,
    }
    answer = {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [partition]}],
    }
    frame = encode_entity(build(response_class(FETCH, 12), answer))
    assert decode(12, frame, 0) is None
    assert _kio(12, frame, 0).responses[0].partitions[0].records == b"x"


@READERS
def test_versions_outside_4_to_12_go_to_kio(decode: Any) -> None:
    assert decode(3, b"\x00" * 64, 0) is None
    assert decode(13, b"\x00" * 64, 0) is None
    assert decode(12, b"\x00" * 4, 5) is None  # an offset past the end


@READERS
def test_an_unknown_error_code_goes_to_kio(decode: Any) -> None:
    """kio refuses an error code it does not know; so does the hand reader (it leaves it)."""
    for version in (7, 12):
        frame = bytearray(
            encode_entity(
                build(
                    response_class(FETCH, version),
                    {"throttle_time": 0, "error_code": 0, "session_id": 0, "responses": []},
                )
            )
        )
        frame[4:6] = (256).to_bytes(2, "big")
        assert decode(version, bytes(frame), 0) is None
