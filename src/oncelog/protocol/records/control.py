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
from oncelog.protocol.records.record import decode_varint, encode_record

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
    header = parse_header(batch, 0)
    end = min(len(batch), header.size)
    try:
        length, pos = decode_varint(batch, HEADER_SIZE, end)
        record_end = pos + length
        _, pos = decode_varint(batch, pos + 1, record_end)  # timestamp delta
        _, pos = decode_varint(batch, pos, record_end)  # offset delta
        key_len, pos = decode_varint(batch, pos, record_end)
        version, kind = _KEY.unpack_from(batch, pos)
        pos += key_len
        value_len, pos = decode_varint(batch, pos, record_end)
        _, coordinator_epoch = (
            _VALUE.unpack_from(batch, pos) if value_len >= _VALUE.size else (0, -1)
        )
    except (ValueError, struct.error) as exc:
        raise ControlRecordError(f"undecodable control record: {exc}") from exc
    if version != 0 or kind not in (ABORT, COMMIT):
        raise ControlRecordError(f"control record version {version} type {kind}")
    return kind == COMMIT, int(coordinator_epoch)
