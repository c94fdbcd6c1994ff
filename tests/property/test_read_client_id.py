"""The C helper's request-header reader (`_speedups.read_client_id`) against the Python one,
which stays the reference and words the errors: on any bytes, the C reader either gives the
Python reader's answer or declines (None), and it declines whatever Python refuses."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol import headers
from oncelog.protocol.headers import HeaderError, read_client_id_python

c_read = headers._c_read_client_id


def python_read(frame: bytes, flexible: bool) -> tuple[str | None, int] | None:
    try:
        return read_client_id_python(frame, flexible)
    except HeaderError:
        return None


def header(client_id: bytes | None, tags: bytes, declared: int | None = None) -> bytes:
    length = (-1 if client_id is None else len(client_id)) if declared is None else declared
    return struct.pack(">hhih", 0, 9, 7, length) + (client_id or b"") + tags


def test_the_c_reader_is_built_where_the_tests_run() -> None:
    assert c_read is not None


frames = st.one_of(
    st.binary(max_size=40),
    st.builds(
        header,
        st.one_of(st.none(), st.text(max_size=12).map(str.encode), st.binary(max_size=12)),
        st.sampled_from([b"", b"\x00", b"\x01\x00\x00", b"\x00body", b"\x80"]),
        st.one_of(st.none(), st.integers(-3, 20)),
    ),
)


@settings(max_examples=1000, deadline=None)
@given(frames, st.booleans())
def test_c_reader_agrees_with_python_or_declines(frame: bytes, flexible: bool) -> None:
    assert c_read is not None
    ours = c_read(frame, flexible)
    reference = python_read(frame, flexible)
    if ours is not None:
        assert ours == reference
    if reference is None:
        assert ours is None


@pytest.mark.parametrize(
    ("frame", "flexible", "expected"),
    [
        (header(b"rdkafka", b"\x00"), True, ("rdkafka", 18)),
        (header(b"rdkafka", b""), False, ("rdkafka", 17)),
        (header(None, b"\x00"), True, (None, 11)),
        (header(b"", b""), False, ("", 10)),
        (header("zoë".encode(), b""), False, ("zoë", 14)),
    ],
)
def test_common_headers_are_read_in_c(
    frame: bytes, flexible: bool, expected: tuple[str | None, int]
) -> None:
    assert c_read is not None
    assert c_read(frame, flexible) == expected
    assert headers.read_client_id(memoryview(frame), flexible) == expected


@pytest.mark.parametrize(
    "frame",
    [header(b"\xff\xfe", b""), header(b"abc", b"", declared=9), header(None, b"", declared=-2)],
)
def test_bad_headers_still_raise_the_python_errors(frame: bytes) -> None:
    with pytest.raises(HeaderError):
        headers.read_client_id(frame, False)
