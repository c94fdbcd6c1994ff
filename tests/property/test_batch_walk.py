"""The C batch walk and marker reader read stored regions exactly as their Python references
do: on well-formed logs, on torn tails, and on arbitrary (damaged) bytes."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.protocol.records import _speedups as speedups
from oncelog.protocol.records import batch as batch_mod
from oncelog.protocol.records import control
from oncelog.protocol.records.batch import BatchHeader, build_batch, iter_batches_python
from oncelog.protocol.records.control import build_marker, parse_marker_at_python
from oncelog.protocol.records.record import encode_record


def _data_batch(base: int, count: int, pid: int) -> bytes:
    body = b"".join(encode_record(offset_delta=i, key=b"k%d" % i, value=b"v") for i in range(count))
    return build_batch(
        base_offset=base,
        records=body,
        record_count=count,
        last_offset_delta=count - 1,
        base_timestamp=1,
        max_timestamp=2,
        attributes=0x10 if pid >= 0 else 0,
        producer_id=pid,
        producer_epoch=3 if pid >= 0 else -1,
        base_sequence=0 if pid >= 0 else -1,
    )


batches = st.lists(
    st.one_of(
        st.builds(_data_batch, st.integers(0, 2**40), st.integers(1, 5), st.integers(-1, 9)),
        st.builds(
            lambda pid, commit, epoch: build_marker(
                producer_id=pid,
                producer_epoch=1,
                commit=commit,
                coordinator_epoch=epoch,
                timestamp=5,
            ),
            st.integers(0, 2**40),
            st.booleans(),
            st.integers(-1, 2**31 - 1),
        ),
    ),
    max_size=8,
)


def _region(parts: list[bytes], cut: int, flips: list[tuple[int, int]]) -> bytes:
    data = bytearray(b"".join(parts))
    for where, value in flips:
        if data:
            data[where % len(data)] = value
    return bytes(data[: max(0, len(data) - cut)])


@given(batches, st.integers(0, 80), st.lists(st.tuples(st.integers(0), st.integers(0, 255))))
def test_c_walk_matches_python(parts: list[bytes], cut: int, flips: list[tuple[int, int]]) -> None:
    data = _region(parts, cut, flips)
    walked = speedups.walk_batches(data, BatchHeader)
    assert walked == list(iter_batches_python(data))
    assert all(type(h) is BatchHeader for _, h in walked)
    assert list(batch_mod.iter_batches(memoryview(data))) == walked


@given(st.binary(max_size=300), st.integers(0, 300), st.integers(0, 300))
def test_c_walk_of_any_bytes_and_bounds(data: bytes, start: int, end: int) -> None:
    start = min(start, len(data))
    end = max(start, min(end, len(data)))
    expected = list(iter_batches_python(data[start:end]))
    assert speedups.walk_batches(data, BatchHeader, start, end) == expected


@given(batches, st.integers(0, 80), st.lists(st.tuples(st.integers(0), st.integers(0, 255))))
def test_c_marker_reader_matches_python(
    parts: list[bytes], cut: int, flips: list[tuple[int, int]]
) -> None:
    data = _region(parts, cut, flips)
    positions = [0]
    for part in parts:
        positions.append(positions[-1] + len(part))
    for pos in [*positions, len(data) + 5, -1]:
        assert speedups.parse_marker_at(data, pos) == parse_marker_at_python(data, pos)


def test_markers_read_as_built() -> None:
    for commit in (True, False):
        marker = build_marker(
            producer_id=7, producer_epoch=2, commit=commit, coordinator_epoch=11, timestamp=1
        )
        assert control.parse_marker_at(b"xx" + marker, 2) == (commit, 11)
        assert parse_marker_at_python(b"xx" + marker, 2) == (commit, 11)
    assert control.parse_marker_at(_data_batch(0, 1, 3), 0) is None


def _offsets_from(parts: list[bytes], start: int) -> list[bytes]:
    """The batches with consecutive offsets from `start` (a segment's well-formed content)."""
    out, offset = [], start
    for part in parts:
        data = bytearray(part)
        data[0:8] = offset.to_bytes(8, "big")
        offset += int.from_bytes(part[23:27], "big", signed=True) + 1
        out.append(bytes(data))
    return out


@given(
    batches,
    st.integers(0, 80),
    st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
    st.integers(20, 400),
)
def test_segment_recovery_in_c_matches_python(
    parts: list[bytes], cut: int, flips: list[tuple[int, int]], interval: int
) -> None:
    """A recovering load (plausibility, CRC, index rebuild) gives the same result, indexes and
    max timestamp whether the walk runs in C (`plan_scan`) or in Python."""
    import tempfile
    from pathlib import Path

    from oncelog.storage import segment as segment_mod

    data = _region(_offsets_from(parts, 100), cut, flips)
    seen = []
    for c_walk in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            seg = segment_mod.LogSegment(Path(tmp), 100, interval)
            seg.log_path.write_bytes(data)
            saved = segment_mod._speedups
            segment_mod._speedups = saved if c_walk else None
            try:
                result = seg.load(recover=True)
            finally:
                segment_mod._speedups = saved
            seen.append(
                (
                    result,
                    seg.log_path.read_bytes(),
                    seg.index.path.read_bytes(),
                    seg.time_index.path.read_bytes(),
                    seg.max_timestamp,
                )
            )
            seg.close()
    assert seen[0] == seen[1]


@given(batches, st.integers(0, 80), st.integers(-1, 2**41))
def test_c_span_matches_the_walk(parts: list[bytes], cut: int, max_offset: int) -> None:
    """A read's cut (bytes and next offset of the whole batches below `max_offset`)."""
    data = _region(_offsets_from(parts, 0), cut, [])
    expected_cut, expected_next = 0, -1
    for pos, header in iter_batches_python(data):
        if 0 <= max_offset <= header.base_offset:
            break
        expected_cut, expected_next = pos + header.size, header.next_offset
    assert speedups.span_batches(data, max_offset) == (expected_cut, expected_next)


@settings(max_examples=200, deadline=None)
@given(
    base_offset=st.integers(0, 2**63 - 1),
    leader_epoch=st.integers(-1, 2**31 - 1),
    values=st.lists(st.binary(max_size=20), min_size=1, max_size=4),
)
def test_stamping_a_batch_in_c_matches_python(
    base_offset: int, leader_epoch: int, values: list[bytes]
) -> None:
    from oncelog.protocol.records import batch as batch_module

    body = b"".join(encode_record(offset_delta=i, key=None, value=v) for i, v in enumerate(values))
    data = batch_module.build_batch(
        base_offset=0,
        records=body,
        record_count=len(values),
        last_offset_delta=len(values) - 1,
        base_timestamp=1,
        max_timestamp=1,
    )
    header = batch_module.parse_header(data)
    head, stored = batch_module.stamp_batch(memoryview(data), base_offset, leader_epoch, header)
    py_head, py_stored = batch_module.stamp_batch_python(data, base_offset, leader_epoch, header)
    assert bytes(head) == bytes(py_head) and stored == py_stored
    assert type(stored) is batch_module.BatchHeader
    assert batch_module.parse_header(bytes(head) + data[61:]) == stored
