"""The Spark source's C record decoder (`_speedups.append_records`) against its Python
reference (`append_records_python`): the same 16 Arrow buffers byte for byte for any records,
any offset window and any sequence of batches appended to one set of columns, and both refuse
the same malformed bodies."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.records.columns import RecordColumns, append_records_python
from oncelog.protocol.records.record import RecordFormatError, encode_record
from oncelog.protocol.records.speedups import speedups

pytestmark = pytest.mark.skipif(speedups is None, reason="C extension not built")

blobs = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=6), blobs), max_size=3)
records = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), blobs, blobs, headers), min_size=0, max_size=12
)


def body_of(
    recs: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
) -> bytes:
    return b"".join(
        encode_record(offset_delta=i, timestamp_delta=ts, key=k, value=v, headers=h)
        for i, (ts, k, v, h) in enumerate(recs)
    )


batch = st.tuples(
    records,
    st.integers(0, 2**40),  # base offset
    st.integers(-(2**40), 2**40),  # base timestamp
    st.sampled_from([-1, 0, 1_700_000_000_000]),  # append time
    st.integers(0, 6),  # window start, relative
    st.integers(0, 14),  # window length
)


@settings(max_examples=400, deadline=None)
@given(st.lists(batch, min_size=1, max_size=4), st.booleans())
def test_c_equals_python(batches: list[tuple], with_headers: bool) -> None:
    c = RecordColumns(with_headers)
    py = RecordColumns(with_headers)
    for recs, base, ts, append, lo, width in batches:
        body = body_of(recs)
        args = (body, len(recs), base, ts, append, base + lo, base + lo + width)
        assert speedups is not None
        n_c = speedups.append_records(*args, c.cols, with_headers)
        n_py = append_records_python(*args, py.cols, with_headers)
        assert n_c == n_py == len([i for i in range(len(recs)) if lo <= i < lo + width])
    assert c.cols == py.cols


@settings(max_examples=300, deadline=None)
@given(records.filter(bool), st.data(), st.booleans())
def test_both_refuse_the_same_bodies(
    recs: list[tuple], data: st.DataObject, with_headers: bool
) -> None:
    body = bytearray(body_of(recs))
    cut = data.draw(st.integers(0, len(body) - 1))
    mutated = bytes(body[:cut]) if data.draw(st.booleans()) else bytes(body) + b"\x00"
    outcomes = []
    for fn in (speedups.append_records if speedups else None, append_records_python):
        assert fn is not None
        cols = RecordColumns(with_headers).cols
        try:
            outcomes.append(("ok", fn(mutated, len(recs), 0, 0, -1, 0, 2**62, cols, with_headers)))
        except (ValueError, RecordFormatError):
            outcomes.append(("error", None))
    assert outcomes[0][0] == outcomes[1][0]


def test_a_record_without_headers_has_a_null_list() -> None:
    cols = RecordColumns(True)
    body = body_of([(0, b"k", b"v", []), (1, None, b"w", [("h", None), ("i", b"x")])])
    assert cols.append(body, 2, 10, 5, -1, 0, 100) == 2
    assert cols.rows == 2 and cols.header_count == 2
    assert cols.cols[9] == bytearray([0b10]) and cols.cols[13] == bytearray([0b10])
