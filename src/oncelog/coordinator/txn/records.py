"""`__transaction_state` records in Kafka's format (TransactionLogKey/Value version 0).

Key: version int16 = 0, transactional id (int16-length string).
Value: version int16 = 0, producer id int64, producer epoch int16, timeout ms int32, status
int8, partitions (int32 count of: topic string, int32 count of int32 partition), last update
timestamp int64, start timestamp int64. A null value (tombstone) removes the id.
Each record carries the whole metadata, so replaying the log rebuilds the coordinator.
"""

from __future__ import annotations

import struct
from collections import defaultdict

from oncelog.coordinator.txn.metadata import TxnMetadata
from oncelog.coordinator.txn.state import TxnState
from oncelog.protocol.records.batch import build_batch, iter_batches
from oncelog.protocol.records.compression import batch_records
from oncelog.protocol.records.record import encode_record, record_keys_and_values
from oncelog.types import TopicPartition

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_VALUE_HEAD = struct.Struct(">hqhib")
_VALUE_TAIL = struct.Struct(">qq")


class TxnRecordError(ValueError):
    """A `__transaction_state` record this coordinator cannot read."""


def encode_key(transactional_id: str) -> bytes:
    raw = transactional_id.encode()
    return _I16.pack(0) + _I16.pack(len(raw)) + raw


def encode_value(meta: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(meta.partitions):
        by_topic[tp.topic].append(tp.partition)
    parts = [
        _VALUE_HEAD.pack(
            0, meta.producer_id, meta.producer_epoch, meta.timeout_ms, int(meta.state)
        ),
        _I32.pack(len(by_topic)),
    ]
    for topic, partitions in by_topic.items():
        raw = topic.encode()
        parts.append(_I16.pack(len(raw)) + raw + _I32.pack(len(partitions)))
        parts.extend(_I32.pack(p) for p in partitions)
    parts.append(_VALUE_TAIL.pack(meta.last_update_ms, meta.start_ms))
    return b"".join(parts)


def decode(key: bytes, value: bytes | None) -> tuple[str, TxnMetadata | None]:
    try:
        (version,) = _I16.unpack_from(key, 0)
        (length,) = _I16.unpack_from(key, 2)
        txn_id = key[4 : 4 + length].decode()
        if version != 0:
            raise TxnRecordError(f"key version {version}")
        if value is None:
            return txn_id, None
        version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(value, 0)
        if version != 0:
            raise TxnRecordError(f"value version {version}")
        pos = _VALUE_HEAD.size
        (topics,) = _I32.unpack_from(value, pos)
        pos += 4
        partitions = set()
        for _ in range(topics):
            (tlen,) = _I16.unpack_from(value, pos)
            topic = value[pos + 2 : pos + 2 + tlen].decode()
            pos += 2 + tlen
            (count,) = _I32.unpack_from(value, pos)
            pos += 4
            for _ in range(count):
                partitions.add(TopicPartition(topic, _I32.unpack_from(value, pos)[0]))
                pos += 4
        last_update, start = _VALUE_TAIL.unpack_from(value, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise TxnRecordError(f"undecodable transaction record: {exc}") from exc
    return txn_id, TxnMetadata(
        txn_id, pid, epoch, timeout, TxnState(status), frozenset(partitions), last_update, start
    )


def encode_batch(records: list[tuple[str, TxnMetadata | None]], timestamp: int) -> bytes:
    body = b"".join(
        encode_record(
            offset_delta=i,
            key=encode_key(txn_id),
            value=None if meta is None else encode_value(meta),
        )
        for i, (txn_id, meta) in enumerate(records)
    )
    return build_batch(
        base_offset=0,
        records=body,
        record_count=len(records),
        last_offset_delta=len(records) - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
    )


def decode_batches(data: bytes | memoryview) -> tuple[list[tuple[str, TxnMetadata | None]], int]:
    """Records of the stored batches in `data` and the offset after the last one."""
    out: list[tuple[str, TxnMetadata | None]] = []
    next_offset = -1
    for pos, header in iter_batches(data):
        next_offset = header.next_offset
        if header.is_control:
            continue
        body = batch_records(data, pos, header)
        for key, value in record_keys_and_values(body, header.record_count):
            if key is None:
                raise TxnRecordError("transaction record without a key")
            out.append(decode(key, value))
    return out, next_offset
