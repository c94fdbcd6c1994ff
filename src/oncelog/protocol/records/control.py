"""Control batches: the COMMIT and ABORT markers that end a transaction on a partition.

A marker is a batch with the transactional and control attributes, the producer's id and
epoch, no sequence, and one record whose key is (version int16 = 0, type int16: 0 = ABORT,
1 = COMMIT) and whose value is (version int16 = 0, coordinator epoch int32). Consumers skip
control records; read_committed consumers use them to drop aborted data.
"""

from __future__ import annotations

import struct

from oncelog.protocol.records.batch import (
    CONTROL_FLAG,
    HEADER_SIZE,
    NO_SEQUENCE,
    TRANSACTIONAL_FLAG,
    build_batch,
    parse_header,
)
from oncelog.protocol.records.record import RecordFormatError, decode_varint, encode_record
from oncelog.protocol.records.speedups import speedups as _speedups

ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class ControlRecordError(ValueError):
    """A control batch whose record is not a transaction marker."""


def build_marker(
    *, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    record = encode_record(
        offset_delta=0,
        key=_KEY.pack(0, COMMIT if commit else ABORT),
        value=_VALUE.pack(0, coordinator_epoch),
    )
    return build_batch(
        base_offset=0,
        records=record,
        record_count=1,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        attributes=TRANSACTIONAL_FLAG | CONTROL_FLAG,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
    )


def parse_marker(batch: bytes | bytearray | memoryview) -> tuple[bool, int]:
    """(is COMMIT, coordinator epoch) of a stored control batch."""
    marker = parse_marker_at(batch, 0)
    if marker is None:
        raise ControlRecordError("control record is not a transaction marker")
    return marker


def parse_marker_at(buf: bytes | bytearray | memoryview, pos: int) -> tuple[bool, int] | None:
    """(is COMMIT, coordinator epoch) of the control batch at `pos` of a stored region, or
    None if its record is not a transaction marker. The C version reads it in place (no
    slice per marker: a coordinator's start replays one marker per transaction)."""
    if _speedups is not None:
        result: tuple[bool, int] | None = _speedups.parse_marker_at(buf, pos)
        return result
    return parse_marker_at_python(buf, pos)


def parse_marker_at_python(
    buf: bytes | bytearray | memoryview, pos: int
) -> tuple[bool, int] | None:
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        return None
    header = parse_header(buf, pos)
    end = min(len(buf), pos + header.size)
    try:
        length, p = decode_varint(buf, pos + HEADER_SIZE, end)
        record_end = min(p + length, end)
        _, p = decode_varint(buf, p + 1, record_end)  # timestamp delta
        _, p = decode_varint(buf, p, record_end)  # offset delta
        key_len, p = decode_varint(buf, p, record_end)
        if end - p < _KEY.size:
            return None
        version, kind = _KEY.unpack_from(buf, p)
        p += key_len
        if p < pos + HEADER_SIZE:
            return None
        value_len, p = decode_varint(buf, p, record_end)
        coordinator_epoch = -1
        if value_len >= _VALUE.size:
            if end - p < _VALUE.size:
                return None
            _, coordinator_epoch = _VALUE.unpack_from(buf, p)
    except RecordFormatError:
        return None
    if version != 0 or kind not in (ABORT, COMMIT):
        return None
    return kind == COMMIT, int(coordinator_epoch)
