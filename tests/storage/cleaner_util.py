"""Keyed, transactional workloads on a PartitionLog and reading them back as a consumer does."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, build_batch, iter_batches
from oncelog.protocol.records.compression import Codec, batch_records, compress
from oncelog.protocol.records.control import parse_marker
from oncelog.protocol.records.record import (
    encode_record,
    record_keys_and_values,
    record_offsets_and_timestamps,
)
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from oncelog.storage.partition_log import AppendInfo, PartitionLog
from tests.storage.util import T0, validated

Record = tuple[bytes, bytes | None]


def keyed_batch(
    records: Sequence[Record],
    *,
    producer_id: int = -1,
    epoch: int = -1,
    sequence: int = -1,
    transactional: bool = False,
    timestamp: int = T0,
    codec: Codec = Codec.NONE,
) -> bytes:
    body = b"".join(
        encode_record(offset_delta=i, timestamp_delta=i, key=k, value=v)
        for i, (k, v) in enumerate(records)
    )
    return build_batch(
        base_offset=0,
        records=compress(codec, body),
        record_count=len(records),
        last_offset_delta=len(records) - 1,
        base_timestamp=timestamp,
        max_timestamp=timestamp + len(records) - 1,
        attributes=int(codec) | (TRANSACTIONAL_FLAG if transactional else 0),
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


@dataclass
class Producer:
    """An idempotent (optionally transactional) producer writing to one log."""

    plog: PartitionLog
    producer_id: int
    epoch: int = 0
    sequence: int = 0
    transactional: bool = False
    in_txn: bool = field(default=False)

    def send(self, records: Sequence[Record], codec: Codec = Codec.NONE) -> AppendInfo:
        batch = keyed_batch(
            records,
            producer_id=self.producer_id,
            epoch=self.epoch,
            sequence=self.sequence,
            transactional=self.transactional,
            timestamp=self.plog.clock.wall_ms(),
            codec=codec,
        )
        info = self.plog.append(validated(batch), 0)
        self.sequence += len(records)
        self.in_txn = self.transactional
        return info

    def end(self, commit: bool) -> AppendInfo:
        self.in_txn = False
        return self.plog.append(
            EndTxnMarker(self.producer_id, self.epoch, 0, commit), 0, AppendOrigin.COORDINATOR
        )


def send_plain(plog: PartitionLog, records: Sequence[Record]) -> AppendInfo:
    batch = keyed_batch(records, timestamp=plog.clock.wall_ms())
    return plog.append(validated(batch), 0)


def consume(plog: PartitionLog, *, read_committed: bool) -> list[tuple[int, bytes, bytes | None]]:
    """(offset, key, value) of every record a consumer reading from the log start gets, with
    the Java consumer's aborted-transaction filter for read_committed."""
    out: list[tuple[int, bytes, bytes | None]] = []
    offset = plog.log_start_offset
    pending: dict[tuple[int, int], int] = {}
    aborted_pids: set[int] = set()
    while offset < plog.log_end_offset:
        result = plog.read(offset, 1 << 20, read_committed=read_committed)
        if not result.records:
            break
        for txn in result.aborted or []:
            pending[(txn.producer_id, txn.first_offset)] = txn.first_offset
        data = bytes(result.records)
        for pos, header in iter_batches(data):
            offset = header.next_offset
            for key in [k for k, first in pending.items() if first <= header.last_offset]:
                aborted_pids.add(key[0])
                del pending[key]
            if header.is_control:
                if header.record_count and not parse_marker(data[pos : pos + header.size])[0]:
                    aborted_pids.discard(header.producer_id)
                continue
            if read_committed and header.is_transactional and header.producer_id in aborted_pids:
                continue
            body = batch_records(data, pos, header)
            offsets = record_offsets_and_timestamps(
                body, header.base_offset, header.base_timestamp, header.record_count
            )
            for (rec_offset, _), (k, v) in zip(
                offsets, record_keys_and_values(body, header.record_count), strict=True
            ):
                assert k is not None
                out.append((rec_offset, k, v))
    return out


def table(records: Sequence[tuple[int, bytes, bytes | None]]) -> dict[bytes, bytes]:
    """The key -> value table the records amount to (a tombstone deletes)."""
    out: dict[bytes, bytes] = {}
    for _, key, value in sorted(records):
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def tombstones(records: Sequence[tuple[int, bytes, bytes | None]]) -> list[int]:
    return [offset for offset, _, value in records if value is None]


def record_fsyncs_and_renames(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """(function, thread ident) of every os.fsync and os.replace in this process from now
    on: which thread a swap's file work runs in."""
    seen: list[tuple[str, int]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        seen.append(("fsync", threading.get_ident()))
        real_fsync(fd)

    def replace_(src: object, dst: object, **kw: object) -> None:
        seen.append(("replace", threading.get_ident()))
        real_replace(src, dst, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace_)
    return seen
