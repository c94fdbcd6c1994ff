"""The C record walker agrees with the Python reference on any input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.records import record
from oncelog.protocol.records.record import (
    KeylessRecordsError,
    RecordFormatError,
    check_records,
    check_records_python,
    encode_record,
)


def outcome(fn: object, buf: bytes, start: int, end: int, count: int) -> str | None:
    try:
        fn(buf, start, end, count)  # type: ignore[operator]
    except RecordFormatError as exc:
        return str(exc)
    return None


def test_the_c_extension_is_built() -> None:
    # The produce path relies on it for speed; a silent fallback would hide a build problem.
    assert record._speedups is not None


@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(st.binary(max_size=40), min_size=1, max_size=8),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=3),
    count_delta=st.integers(-2, 2),
    trim=st.integers(0, 3),
)
def test_c_and_python_agree(
    values: list[bytes], flips: list[tuple[int, int]], count_delta: int, trim: int
) -> None:
    buf = bytearray(
        b"".join(encode_record(offset_delta=i, key=None, value=v) for i, v in enumerate(values))
    )
    for pos, byte in flips:
        if pos < len(buf):
            buf[pos] = byte
    data = bytes(buf)
    end = max(0, len(data) - trim)
    count = max(0, len(values) + count_delta)
    assert outcome(check_records, data, 0, end, count) == outcome(
        check_records_python, data, 0, end, count
    )


@pytest.mark.parametrize("data", [b"", b"\xff" * 12, b"\x01"])
def test_garbage_is_refused_the_same_way(data: bytes) -> None:
    assert outcome(check_records, data, 0, len(data), 1) == outcome(
        check_records_python, data, 0, len(data), 1
    )


def outcome_keyed(fn: object, buf: bytes, start: int, end: int, count: int) -> object:
    try:
        fn(buf, start, end, count, True)  # type: ignore[operator]
    except KeylessRecordsError as exc:
        return ("keyless", exc.indexes)
    except RecordFormatError as exc:
        return str(exc)
    return None


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.none() | st.binary(max_size=8), st.binary(max_size=20)), min_size=1, max_size=8
    ),
    flips=st.lists(st.tuples(st.integers(0, 300), st.integers(0, 255)), max_size=2),
    count_delta=st.integers(-1, 1),
)
def test_c_and_python_agree_on_keys(
    records: list[tuple[bytes | None, bytes]], flips: list[tuple[int, int]], count_delta: int
) -> None:
    buf = bytearray(
        b"".join(encode_record(offset_delta=i, key=k, value=v) for i, (k, v) in enumerate(records))
    )
    for pos, byte in flips:
        if pos < len(buf):
            buf[pos] = byte
    data = bytes(buf)
    count = max(0, len(records) + count_delta)
    assert outcome_keyed(check_records, data, 0, len(data), count) == outcome_keyed(
        check_records_python, data, 0, len(data), count
    )


def test_keyless_records_are_listed_and_only_when_asked() -> None:
    data = b"".join(
        encode_record(offset_delta=i, key=k, value=b"v")
        for i, k in enumerate([b"a", None, b"", None])
    )
    for fn in (check_records, check_records_python):
        fn(data, 0, len(data), 4)  # no key check for a topic that is not compacted
        with pytest.raises(KeylessRecordsError) as info:
            fn(data, 0, len(data), 4, True)
        assert info.value.indexes == [1, 3]  # an empty key is a key


def test_a_malformed_record_wins_over_a_missing_key() -> None:
    data = encode_record(offset_delta=0, key=None, value=b"v") + encode_record(
        offset_delta=5, key=b"k", value=b"v"
    )
    for fn in (check_records, check_records_python):
        with pytest.raises(RecordFormatError, match="offset delta 5") as info:
            fn(data, 0, len(data), 2, True)
        assert not isinstance(info.value, KeylessRecordsError)
