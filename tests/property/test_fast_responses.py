"""The hand-written Produce and Fetch encoders against kio's generic encoder, the oracle: the
same answer mapping gives the same frame in every version the broker speaks."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.fileio import FileRegion
from oncelog.protocol import fast_responses
from oncelog.protocol.codec import (
    Buffer,
    build,
    encode_fast_response,
    encode_response,
    response_class,
)
from oncelog.protocol.fast_responses import encode_response_body

PRODUCE, FETCH = 0, 1
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)
codes = st.sampled_from([0, 1, 3, 6, 10, 19, 45, 47, 87])
names = st.text(min_size=0, max_size=12)
messages = st.none() | st.text(max_size=30)

_FILE = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the test module
_FILE.write(os.urandom(1 << 16))
_FILE.flush()


def _join(parts: list[Buffer]) -> bytes:
    return b"".join(p.read() if isinstance(p, FileRegion) else bytes(p) for p in parts)


def _oracle(api_key: int, version: int, answer: dict[str, Any]) -> bytes:
    return _join(encode_response(api_key, 7, build(response_class(api_key, version), answer)))


produce_partitions = st.fixed_dictionaries(
    {
        "index": i32,
        "error_code": codes,
        "base_offset": i64,
        "log_append_time": st.integers(-1, 2**40),
        "log_start_offset": i64,
        "record_errors": st.lists(
            st.fixed_dictionaries(
                {"batch_index": i32, "batch_index_error_message": messages}
            ),
            max_size=3,
        ),
        "error_message": messages,
    }
)
produce_answers = st.fixed_dictionaries(
    {
        "responses": st.lists(
            st.fixed_dictionaries(
                {"name": names, "partition_responses": st.lists(produce_partitions, max_size=4)}
            ),
            max_size=3,
        ),
        "throttle_time": st.integers(0, 2**31 - 1),
    }
)


@contextmanager
def python_encoders_only() -> Iterator[None]:
    saved, fast_responses._speedups = fast_responses._speedups, None
    try:
        yield
    finally:
        fast_responses._speedups = saved


@pytest.mark.parametrize("python_only", [False, True], ids=["c", "python"])
@settings(max_examples=300, deadline=None)
@given(answer=produce_answers, version=st.integers(3, 11))
def test_produce_answers_match_kio(python_only: bool, answer: dict[str, Any], version: int) -> None:
    with python_encoders_only() if python_only else nullcontext():
        fast = encode_fast_response(PRODUCE, version, 7, answer)
    assert fast is not None
    assert _join(fast) == _oracle(PRODUCE, version, answer)
    if not python_only and fast_responses._speedups is not None:
        assert len(fast) == 1 and isinstance(fast[0], bytes)  # the C encoder wrote it


def test_produce_answers_the_c_encoder_leaves_to_python_still_match_kio() -> None:
    partition: dict[str, Any] = {
        "index": 3,
        "error_code": 0,
        "base_offset": 5,
        "log_append_time": -1,
        "log_start_offset": 0,
        "record_errors": [],
        "error_message": None,
    }
    odd: list[dict[str, Any]] = [
        {"responses": ({"name": "t", "partition_responses": (partition,)},)},  # tuples
        {"responses": [{"name": "t", "partition_responses": [{**partition, "index": True}]}]},
    ]
    for answer in odd:
        for version in (3, 8, 11):
            fast = encode_fast_response(PRODUCE, version, 7, answer)
            assert fast is not None
            assert _join(fast) == _oracle(PRODUCE, version, answer)


def _records(kind: str, data: bytes, offset: int) -> Any:
    if kind == "none":
        return None
    if kind == "view":
        return memoryview(data)
    if kind == "region":
        return FileRegion(_FILE.fileno(), offset, len(data) + 1)
    return data


fetch_partitions = st.fixed_dictionaries(
    {
        "partition_index": i32,
        "error_code": codes,
        "high_watermark": i64,
        "last_stable_offset": i64,
        "log_start_offset": i64,
        "aborted_transactions": st.none()
        | st.lists(st.fixed_dictionaries({"producer_id": i64, "first_offset": i64}), max_size=3),
        "preferred_read_replica": i32,
        "records": st.tuples(
            st.sampled_from(["bytes", "view", "region", "none"]),
            st.binary(max_size=3000),
            st.integers(0, 60_000),
        ),
    }
)
fetch_answers = st.fixed_dictionaries(
    {
        "throttle_time": st.integers(0, 2**31 - 1),
        "error_code": codes,
        "session_id": i32,
        "responses": st.lists(
            st.fixed_dictionaries(
                {"topic": names, "partitions": st.lists(fetch_partitions, max_size=4)}
            ),
            max_size=3,
        ),
    }
)


@pytest.mark.parametrize("python_only", [False, True], ids=["c", "python"])
@settings(max_examples=300, deadline=None)
@given(answer=fetch_answers, version=st.integers(4, 12))
def test_fetch_answers_match_kio(python_only: bool, answer: dict[str, Any], version: int) -> None:
    big = []
    for topic in answer["responses"]:
        for p in topic["partitions"]:
            p["records"] = records = _records(*p["records"])
            if isinstance(records, FileRegion) or (records is not None and len(records) >= 1024):
                big.append(records)
    with python_encoders_only() if python_only else nullcontext():
        fast = encode_fast_response(FETCH, version, 7, answer)
    assert fast is not None
    assert _join(fast) == _oracle(FETCH, version, answer)
    # Large records and file regions are pieces of their own, sent as they are.
    assert [p for p in fast if any(p is r for r in big)] == big
    if not python_only and fast_responses._speedups is not None:
        assert not any(isinstance(p, bytearray) for p in fast)  # the C encoder wrote it


def test_odd_fetch_answers_still_match_kio() -> None:
    """Shapes the handlers do not make: the C encoder writes them alike or leaves them to
    the Python one."""
    partition: dict[str, Any] = {
        "partition_index": 3,
        "error_code": 0,
        "high_watermark": 5,
        "last_stable_offset": 5,
        "log_start_offset": 0,
        "aborted_transactions": [{"producer_id": 1, "first_offset": 2}],
        "preferred_read_replica": -1,
        "records": b"x" * 10,
    }
    answer: dict[str, Any] = {
        "throttle_time": 0,
        "error_code": 0,
        "session_id": 0,
        "responses": [{"topic": "t", "partitions": [partition]}],
    }
    odd_partitions: list[dict[str, Any]] = [
        {**partition, "records": bytearray(b"y" * 5)},
        {**partition, "partition_index": True},
        # An aborted transaction with a key the encoders do not write.
        {**partition, "aborted_transactions": [{"producer_id": 1, "first_offset": 2, "x": 3}]},
    ]
    odd = [{**answer, "responses": [{"topic": "t", "partitions": [p]}]} for p in odd_partitions]
    odd.append({**answer, "responses": ({"topic": "t", "partitions": (partition,)},)})  # tuples
    for case in odd:
        for version in (4, 11, 12):
            fast = encode_fast_response(FETCH, version, 7, case)
            assert fast is not None
            assert _join(fast) == _oracle(FETCH, version, case)


def test_answers_the_hand_encoders_do_not_know_go_to_kio() -> None:
    partition = {"index": 0, "error_code": 0, "base_offset": 5, "current_leader": {}}
    answer = {"responses": [{"name": "t", "partition_responses": [partition]}]}
    assert encode_response_body(PRODUCE, 11, answer) is None
    assert encode_response_body(PRODUCE, 2, {"responses": []}) is None
    assert encode_response_body(FETCH, 13, {"responses": []}) is None
    assert encode_response_body(3, 12, {"topics": []}) is None
