"""The C check of a client's batch (`_speedups.check_client_batch`) against the Python
validator it short-cuts: it passes a batch only when the validator would, with the same
header, and passes every valid single uncompressed batch (else it would not be the short
cut). Batches are built, then damaged at random."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.errors import KafkaError
from oncelog.protocol.records.batch import BatchHeader, build_batch
from oncelog.protocol.records.record import encode_record
from oncelog.storage import validator

_speedups = pytest.importorskip("oncelog.protocol.records._speedups")


def python_validate(data: bytes, max_bytes: int, compacted: bool) -> BatchHeader | str:
    saved, validator._speedups = validator._speedups, None
    try:
        checked = validator.validate_produce_records(data, max_bytes, compacted=compacted)
    except KafkaError as exc:
        return exc.code.name
    finally:
        validator._speedups = saved
    assert len(checked.batches) == 1
    return checked.batches[0][1]


records_st = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=8)), st.binary(max_size=40)),
    min_size=1,
    max_size=6,
)


@st.composite
def batches(draw: st.DrawFn) -> bytes:
    records = draw(records_st)
    body = b"".join(
        encode_record(offset_delta=i, key=k, value=v) for i, (k, v) in enumerate(records)
    )
    attributes = draw(st.sampled_from([0, 0, 0, 0x10, 0x20, 0x01, 0x04]))
    producer_id = draw(st.sampled_from([-1, 0, 7]))
    return build_batch(
        base_offset=draw(st.sampled_from([0, 5])),
        records=body,
        record_count=len(records),
        last_offset_delta=len(records) - 1,
        base_timestamp=1_700_000_000_000,
        max_timestamp=1_700_000_000_000,
        attributes=attributes,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
    )


damage = st.one_of(
    st.none(),
    st.tuples(st.just("flip"), st.integers(0, 10_000), st.integers(1, 255)),
    st.tuples(st.just("cut"), st.integers(1, 30)),
    st.tuples(st.just("extra"), st.binary(min_size=1, max_size=70)),
)


@settings(max_examples=400, deadline=None)
@given(batches(), damage, st.booleans(), st.sampled_from([100, 1_000_000]))
def test_the_c_check_passes_exactly_what_the_validator_passes(
    data: bytes, how: tuple[object, ...] | None, compacted: bool, max_bytes: int
) -> None:
    raw = bytearray(data)
    if how is not None and how[0] == "flip":
        raw[int(how[1]) % len(raw)] ^= int(how[2])  # type: ignore[call-overload]
    elif how is not None and how[0] == "cut":
        del raw[-int(how[1]) :]  # type: ignore[call-overload]
    elif how is not None:
        raw += how[1]  # type: ignore[arg-type]
    blob = bytes(raw)
    fast = _speedups.check_client_batch(blob, max_bytes, compacted, BatchHeader)
    expected = python_validate(blob, max_bytes, compacted)
    if fast is not None:
        assert fast == expected
    elif isinstance(expected, BatchHeader):
        # The C check leaves compressed batches to Python, and only those.
        assert expected.compression != 0
