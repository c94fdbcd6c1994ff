"""What a cleaning round does to one batch (`cleaner.py`): where its records are, the batch
rebuilt with the records it keeps (or emptied to its header, for its producer's epoch and
sequence), and which batches and markers of transactions may go (Kafka's
CleanedTransactionMetadata). Pure functions of bytes: the round runs them in a worker."""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from oncelog.protocol.records.batch import (
    COMPRESSION_MASK,
    DELETE_HORIZON_FLAG,
    BatchHeader,
    build_batch,
)
from oncelog.protocol.records.compression import compress
from oncelog.protocol.records.control import ControlRecordError, parse_marker
from oncelog.protocol.records.record import decode_varint, encode_varint
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.storage.txn_index import AbortedTxn


class CleanerError(Exception):
    """A cleaning round could not be done; nothing was swapped."""


# -- records -----------------------------------------------------------------------------------


class Record(NamedTuple):
    """Where one record's parts are in a decompressed batch body (-1 lengths: null)."""

    start: int
    end: int
    body: int
    after_ts: int
    ts_delta: int
    offset_delta: int
    key_start: int
    key_length: int
    value_length: int


def records_of(body: bytes, count: int) -> list[Record]:
    """The records of a decompressed batch body (in C when the extension is built)."""
    if _speedups is not None:
        try:
            return [Record._make(r) for r in _speedups.scan_records(body, count)]
        except ValueError as exc:
            raise CleanerError(f"undecodable records: {exc}") from exc
    return scan_records_python(body, count)


def scan_records_python(body: bytes, count: int) -> list[Record]:
    """The reference implementation of `_speedups.scan_records`."""
    out: list[Record] = []
    pos, end = 0, len(body)
    for _ in range(count):
        length, start = decode_varint(body, pos, end)
        rec_end = start + length
        if length < 1 or rec_end > end:
            raise CleanerError("undecodable records: a record overruns its batch")
        ts_delta, after_ts = decode_varint(body, start + 1, rec_end)
        offset_delta, p = decode_varint(body, after_ts, rec_end)
        key_len, key_start = decode_varint(body, p, rec_end)
        value_len, _ = decode_varint(body, key_start + max(key_len, 0), rec_end)
        out.append(
            Record(
                pos, rec_end, start, after_ts, ts_delta, offset_delta, key_start, key_len, value_len
            )
        )
        pos = rec_end
    return out


def key_of(body: bytes, rec: Record) -> bytes | None:
    if rec.key_length < 0:
        return None
    return body[rec.key_start : rec.key_start + rec.key_length]


def horizon_of(header: BatchHeader) -> int | None:
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def rebuild(header: BatchHeader, body: bytes, kept: list[Record], horizon: int | None) -> bytes:
    """The batch with only `kept` records (offsets and last offset delta unchanged); with a
    new `horizon`, the base timestamp becomes it and record timestamp deltas follow."""
    base_ts = header.base_timestamp
    attributes = header.attributes
    pieces: list[bytes] = []
    if horizon is not None and horizon_of(header) is None:
        for rec in kept:
            new_body = (
                body[rec.body : rec.body + 1]
                + encode_varint(base_ts + rec.ts_delta - horizon)
                + body[rec.after_ts : rec.end]
            )
            pieces.append(encode_varint(len(new_body)) + new_body)
        base_ts = horizon
        attributes |= DELETE_HORIZON_FLAG
    else:
        pieces = [body[rec.start : rec.end] for rec in kept]
    if header.log_append_time:
        max_ts = header.max_timestamp
    else:
        old_base = header.base_timestamp
        max_ts = max(old_base + rec.ts_delta for rec in kept)
    records = b"".join(pieces)
    return build_batch(
        base_offset=header.base_offset,
        records=compress(header.compression, records) if header.compression else records,
        record_count=len(kept),
        last_offset_delta=header.last_offset_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        attributes=attributes,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
    )


def empty_batch(header: BatchHeader) -> bytes:
    """Only the header of a batch, for its producer's sequence and epoch (Kafka's empty
    batch: no records, no compression, no delete horizon)."""
    return build_batch(
        base_offset=header.base_offset,
        records=b"",
        record_count=0,
        last_offset_delta=header.last_offset_delta,
        base_timestamp=header.max_timestamp,
        max_timestamp=header.max_timestamp,
        attributes=header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_FLAG),
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        partition_leader_epoch=header.partition_leader_epoch,
    )


# -- transactions ------------------------------------------------------------------------------


class CleanedTransactions:
    """Which batches belong to aborted transactions and which markers may go, as the round
    walks the log in offset order (Kafka's CleanedTransactionMetadata)."""

    def __init__(self, aborted: Iterable[AbortedTxn]) -> None:
        self._pending = sorted(aborted, key=lambda t: t.first_offset)
        self._next = 0
        self._aborted: dict[int, tuple[AbortedTxn, list[bool]]] = {}
        self._committed: set[int] = set()
        self.kept_aborts: list[AbortedTxn] = []
        """Aborted transactions whose marker this round keeps because it saw their data."""

    def _start_up_to(self, offset: int) -> None:
        pending = self._pending
        while self._next < len(pending) and pending[self._next].first_offset <= offset:
            txn = pending[self._next]
            self._aborted.setdefault(txn.producer_id, (txn, [False]))
            self._next += 1

    def on_batch(self, header: BatchHeader) -> bool:
        """True if the data batch belongs to an aborted transaction."""
        self._start_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1][0] = True
            return True
        self._committed.add(header.producer_id)
        return False

    def on_marker(self, header: BatchHeader, commit: bool | None) -> bool:
        """True if the marker may be removed (`commit` None: an emptied control batch)."""
        self._start_up_to(header.last_offset)
        pid = header.producer_id
        if commit is None:
            return True
        if not commit:
            ongoing = self._aborted.pop(pid, None)
            if ongoing is not None and ongoing[1][0]:
                self.kept_aborts.append(ongoing[0])
                return False
            return True
        if pid in self._committed:
            self._committed.discard(pid)
            return False
        return True


def marker_kind(data: bytes | memoryview, pos: int, header: BatchHeader) -> bool | None:
    if header.record_count == 0:
        return None
    try:
        return parse_marker(data[pos : pos + header.size])[0]
    except ControlRecordError:
        return None
