"""Keys and values of `__consumer_offsets`, in Kafka's own formats so its tools read them.

Every key and value starts with an int16 schema version. Keys: version 0/1 is an offset
commit (group, topic, partition), version 2 is group metadata (group). We write
OffsetCommitValue v3 and GroupMetadataValue v3 (the last non-flexible versions) and read
v0-v3 of both. A record with a null value (tombstone) deletes its key.

Transactional offset commits (TxnOffsetCommit) travel in TRANSACTIONAL batches carrying the
producer id and epoch, so the partition tracks them as an open transaction and the COMMIT or
ABORT control batch that follows decides them; `decode_entries` returns both, in log order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, build_batch, iter_batches
from oncelog.protocol.records.compression import batch_records
from oncelog.protocol.records.control import parse_marker_at
from oncelog.protocol.records.record import encode_record, record_keys_and_values

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class RecordDecodeError(ValueError):
    """A key or value of the offsets topic that is not one of Kafka's known layouts."""


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units, int32 arithmetic)."""
    h = 0
    raw = text.encode("utf-16-be")
    for i in range(0, len(raw), 2):
        h = (31 * h + ((raw[i] << 8) | raw[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, partitions: int) -> int:
    """The `__consumer_offsets` partition of a group, as Kafka's Utils.abs(hash) % n."""
    h = java_string_hash(group_id)
    return (0 if h == -(2**31) else abs(h)) % partitions


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group_id: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    state_timestamp: int = -1
    members: tuple[MemberValue, ...] = field(default=())


Key = OffsetKey | GroupKey
Value = OffsetValue | GroupValue


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One record of the offsets topic; `value` None is a tombstone. A transactional offset
    commit names its producer (id >= 0): it stays pending until that producer's marker."""

    key: Key
    value: Value | None
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TxnEnd:
    """A COMMIT/ABORT marker in the offsets topic: decides `producer_id`'s pending offsets."""

    producer_id: int
    commit: bool


LogEntry = GroupRecord | TxnEnd


# -- encoding ----------------------------------------------------------------------------------


def _str(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def _bytes(blob: bytes) -> bytes:
    return _I32.pack(len(blob)) + blob


def encode_key(key: Key) -> bytes:
    if isinstance(key, OffsetKey):
        return (
            _I16.pack(OFFSET_KEY_VERSION)
            + _str(key.group_id)
            + _str(key.topic)
            + _I32.pack(key.partition)
        )
    return _I16.pack(GROUP_KEY_VERSION) + _str(key.group_id)


def encode_value(value: Value | None) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, OffsetValue):
        return (
            _I16.pack(OFFSET_VALUE_VERSION)
            + _I64.pack(value.offset)
            + _I32.pack(value.leader_epoch)
            + _str(value.metadata)
            + _I64.pack(value.commit_timestamp)
        )
    out = bytearray(_I16.pack(GROUP_VALUE_VERSION))
    out += _str(value.protocol_type) + _I32.pack(value.generation)
    out += _str(value.protocol) + _str(value.leader) + _I64.pack(value.state_timestamp)
    out += _I32.pack(len(value.members))
    for m in value.members:
        out += _str(m.member_id) + _str(m.group_instance_id) + _str(m.client_id)
        out += _str(m.client_host) + _I32.pack(m.rebalance_timeout_ms)
        out += _I32.pack(m.session_timeout_ms) + _bytes(m.subscription) + _bytes(m.assignment)
    return bytes(out)


# -- decoding ----------------------------------------------------------------------------------


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def _take(self, s: struct.Struct) -> int:
        if self.pos + s.size > len(self.buf):
            raise RecordDecodeError("offsets-topic record ends early")
        (value,) = s.unpack_from(self.buf, self.pos)
        self.pos += s.size
        return int(value)

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def nullable_str(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        return self._raw(n).decode()

    def str(self) -> str:
        return self.nullable_str() or ""

    def blob(self) -> bytes:
        n = self.i32()
        return b"" if n < 0 else self._raw(n)

    def _raw(self, n: int) -> bytes:
        if self.pos + n > len(self.buf):
            raise RecordDecodeError("offsets-topic record ends early")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out


def decode_key(raw: bytes) -> Key:
    r = _Reader(raw)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.str(), r.str(), r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.str())
    raise RecordDecodeError(f"unknown offsets-topic key version {version}")


def decode_value(key: Key, raw: bytes | None) -> Value | None:
    if raw is None:
        return None
    r = _Reader(raw)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordDecodeError(f"unknown offsets-topic value version {version}")
    if isinstance(key, OffsetKey):
        return _decode_offset(r, version)
    return _decode_group(r, version)


def _decode_offset(r: _Reader, version: int) -> OffsetValue:
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.str()
    timestamp = r.i64()
    if version == 1:
        r.i64()  # expire timestamp, no longer used
    return OffsetValue(offset, epoch, metadata, timestamp)


def _decode_group(r: _Reader, version: int) -> GroupValue:
    protocol_type = r.str()
    generation = r.i32()
    protocol = r.nullable_str()
    leader = r.nullable_str()
    state_timestamp = r.i64() if version >= 2 else -1
    members = []
    for _ in range(max(r.i32(), 0)):
        member_id = r.str()
        instance_id = r.nullable_str() if version >= 3 else None
        client_id = r.str()
        client_host = r.str()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout < 0:
            rebalance_timeout = session_timeout
        members.append(
            MemberValue(
                member_id,
                instance_id,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.blob(),
                r.blob(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, state_timestamp, tuple(members))


def decode_batches(data: bytes | memoryview) -> tuple[list[GroupRecord], int]:
    """Every group record in stored batches (control batches skipped), and the offset after
    the last whole batch (-1 if there was none)."""
    entries, next_offset = decode_entries(data)
    return [e for e in entries if isinstance(e, GroupRecord)], next_offset


def decode_entries(data: bytes | memoryview) -> tuple[list[LogEntry], int]:
    """Group records and transaction markers of stored batches in log order, and the offset
    after the last whole batch (-1 if there was none). Replaying these rebuilds the
    coordinator, transactional offsets included."""
    out: list[LogEntry] = []
    next_offset = -1
    for pos, header in iter_batches(data):
        next_offset = header.next_offset
        if header.is_control:
            marker = parse_marker_at(data, pos)
            if marker is None:
                continue  # not a transaction marker: nothing for the coordinator
            out.append(TxnEnd(header.producer_id, marker[0]))
            continue
        body = batch_records(data, pos, header)
        pid, epoch = (
            (header.producer_id, header.producer_epoch) if header.is_transactional else (-1, -1)
        )
        for raw_key, raw_value in record_keys_and_values(body, header.record_count):
            if raw_key is None:
                continue
            key = decode_key(raw_key)
            out.append(GroupRecord(key, decode_value(key, raw_value), pid, epoch))
    return out, next_offset


def encode_batch(
    records: list[GroupRecord], timestamp: int, producer_id: int = -1, producer_epoch: int = -1
) -> bytes:
    """One uncompressed batch holding `records`, ready for the partition log's append; with
    a producer id it is a transactional batch of that producer (sequence from 0, unchecked:
    the coordinator is the writer, as Kafka's coordinator-origin appends)."""
    body = b"".join(
        encode_record(offset_delta=i, key=encode_key(r.key), value=encode_value(r.value))
        for i, r in enumerate(records)
    )
    transactional = producer_id >= 0
    return build_batch(
        base_offset=0,
        records=body,
        record_count=len(records),
        last_offset_delta=len(records) - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        attributes=TRANSACTIONAL_FLAG if transactional else 0,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=0 if transactional else -1,
    )
