"""Helpers to build record batches and drive storage objects in tests."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.protocol.records.batch import build_batch, iter_batches
from oncelog.protocol.records.compression import Codec, compress
from oncelog.protocol.records.record import encode_record
from oncelog.storage.local_log import LogHooks
from oncelog.storage.partition_log import AppendInfo, PartitionLog
from oncelog.storage.validator import ValidatedRecords, validate_produce_records
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000


def make_batch(
    values: Sequence[bytes | None],
    *,
    timestamps: Sequence[int] | None = None,
    timestamp: int = T0,
    codec: Codec = Codec.NONE,
    base_offset: int = 0,
) -> bytes:
    """A producer batch with one record per value (all at `timestamp` unless `timestamps`)."""
    stamps = list(timestamps) if timestamps is not None else [timestamp] * len(values)
    assert values and len(stamps) == len(values)
    base_ts = stamps[0]
    body = b"".join(
        encode_record(offset_delta=i, timestamp_delta=ts - base_ts, key=None, value=v)
        for i, (v, ts) in enumerate(zip(values, stamps, strict=True))
    )
    return build_batch(
        base_offset=base_offset,
        records=compress(codec, body),
        record_count=len(values),
        last_offset_delta=len(values) - 1,
        base_timestamp=base_ts,
        max_timestamp=max(stamps),
        attributes=int(codec),
    )


def validated(data: bytes, *, client: bool = True) -> ValidatedRecords:
    """`client=False`: several batches in one append, as the broker's own appends may."""
    return validate_produce_records(data, 1 << 30, client=client)


def append(
    plog: PartitionLog,
    values: Sequence[bytes | None],
    *,
    timestamps: Sequence[int] | None = None,
    timestamp: int = T0,
    codec: Codec = Codec.NONE,
) -> AppendInfo:
    batch = make_batch(values, timestamps=timestamps, timestamp=timestamp, codec=codec)
    return plog.append(validated(batch), 0)


def open_log(
    root: Path,
    config: LogConfig | None = None,
    clock: ManualClock | None = None,
    *,
    clean: bool = True,
    recovery_point: int = 0,
    log_start_offset: int = 0,
    hooks: LogHooks | None = None,
) -> PartitionLog:
    """Load (or create) the log of TP under `root`."""
    return PartitionLog.load(
        root / str(TP),
        TP,
        config or LogConfig(),
        clock or ManualClock(T0),
        clean=clean,
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        hooks=hooks,
    )


def batch_offsets(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch in a read result."""
    return [(h.base_offset, h.last_offset) for _, h in iter_batches(data)]


def read_all(plog: PartitionLog, start: int | None = None, max_bytes: int = 1 << 20) -> bytes:
    """Every stored byte from `start` (default log start) to the end, fetch by fetch."""
    offset = plog.log_start_offset if start is None else start
    out = bytearray()
    while offset < plog.log_end_offset:
        data = plog.read(offset, max_bytes).records
        assert data, f"no data at {offset} below the log end {plog.log_end_offset}"
        out += data
        offset = batch_offsets(data)[-1][1] + 1
    return bytes(out)


SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def segment_files(directory: Path) -> list[str]:
    """Names of the segment files in a partition directory (other files are not ours)."""
    return sorted(p.name for p in directory.iterdir() if p.suffix in SEGMENT_SUFFIXES)
