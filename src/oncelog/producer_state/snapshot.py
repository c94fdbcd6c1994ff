"""Producer-state snapshots: `<20-digit offset>.snapshot` in the partition directory.

A snapshot holds every producer's epoch and its cached batches (all five, so duplicates
are still recognised after a restart) as of `offset` (the log end when it was taken).
Written atomically, versioned and CRC32C-checked; recovery loads the newest snapshot not
beyond the log end that passes its checksum and replays the batches after it.

Layout (big-endian): magic "OLPS" | version int16 | crc32c uint32 of the payload |
payload: offset int64 | producer count int32 | per producer: producer id int64,
epoch int16, last timestamp int64, coordinator epoch int32, first offset of the open
transaction int64 (-1: none), batch count int8, per batch: first seq int32,
last seq int32, last offset int64, offset delta int32, timestamp int64.
"""

from __future__ import annotations

import contextlib
import os
import struct
import uuid
from collections.abc import Iterable
from pathlib import Path

from crc32c import crc32c

from oncelog.fileio import CorruptFileError, write_atomically
from oncelog.producer_state.entry import MAX_CACHED_BATCHES, BatchMetadata, ProducerStateEntry

SUFFIX = ".snapshot"
VERSION = 2
_MAGIC = b"OLPS"
_HEAD = struct.Struct(">4shI")
_PAYLOAD_HEAD = struct.Struct(">qi")
_PRODUCER = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqiq")
_PRODUCER_AND_BATCHES = [
    struct.Struct(_PRODUCER.format + _BATCH.format[1:] * n) for n in range(MAX_CACHED_BATCHES + 1)
]


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SUFFIX}"


def list_snapshots(directory: Path) -> list[int]:
    """Offsets of the snapshot files present, ascending."""
    out = []
    for path in directory.glob(f"*{SUFFIX}"):
        stem = path.name[: -len(SUFFIX)]
        if stem.isdigit():
            out.append(int(stem))
    return sorted(out)


def encode(offset: int, entries: Iterable[ProducerStateEntry]) -> bytes:
    items = list(entries)
    parts = [_PAYLOAD_HEAD.pack(offset, len(items))]
    for entry in items:
        batches = entry.batch_fields()
        parts.append(
            _PRODUCER_AND_BATCHES[len(batches) // 5].pack(
                entry.producer_id,
                entry.producer_epoch,
                entry.last_timestamp,
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
                len(batches) // 5,
                *batches,
            )
        )
    payload = b"".join(parts)
    return _HEAD.pack(_MAGIC, VERSION, crc32c(payload)) + payload


def decode(data: bytes) -> tuple[int, list[ProducerStateEntry]]:
    """(offset, entries) of a snapshot, or CorruptFileError."""
    if len(data) < _HEAD.size + _PAYLOAD_HEAD.size:
        raise CorruptFileError("snapshot shorter than its header")
    magic, version, crc = _HEAD.unpack_from(data, 0)
    payload = memoryview(data)[_HEAD.size :]
    if magic != _MAGIC or version != VERSION:
        raise CorruptFileError(f"not a version {VERSION} producer snapshot")
    if crc32c(payload) != crc:
        raise CorruptFileError("snapshot checksum mismatch")
    try:
        offset, count = _PAYLOAD_HEAD.unpack_from(payload, 0)
        pos = _PAYLOAD_HEAD.size
        entries = []
        for _ in range(count):
            pid, epoch, last_ts, coord_epoch, txn_first, nbatches = _PRODUCER.unpack_from(
                payload, pos
            )
            pos += _PRODUCER.size
            batches = []
            for _ in range(nbatches):
                batches.append(BatchMetadata(*_BATCH.unpack_from(payload, pos)))
                pos += _BATCH.size
            entries.append(ProducerStateEntry(pid, epoch, batches, last_ts, coord_epoch, txn_first))
    except struct.error as exc:
        raise CorruptFileError(f"snapshot payload truncated: {exc}") from exc
    except ValueError as exc:  # a batch this broker cannot have written
        raise CorruptFileError(f"snapshot holds an impossible batch: {exc}") from exc
    if pos != len(payload):
        raise CorruptFileError("bytes after the last producer in the snapshot")
    return int(offset), entries


def write(directory: Path, offset: int, entries: Iterable[ProducerStateEntry]) -> Path:
    path = snapshot_path(directory, offset)
    write_atomically(path, encode(offset, entries))
    return path


def write_pending(directory: Path, offset: int, data: bytes) -> Path:
    """The first half of an atomic write, for a writer that must check before publishing:
    `data` fsynced under a name of its own (`*.tmp`, which a load deletes)."""
    tmp = directory / f"{offset:020d}{SUFFIX}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def publish(pending: Path, directory: Path, offset: int) -> Path:
    """The second half: rename a `write_pending` file into place; durable once the caller
    fsyncs the directory."""
    path = snapshot_path(directory, offset)
    os.replace(pending, path)
    return path


def delete_older(directory: Path, keep: int) -> None:
    """Keep only the newest `keep` snapshots."""
    offsets = list_snapshots(directory)
    for offset in offsets[: max(0, len(offsets) - keep)]:
        with contextlib.suppress(FileNotFoundError):
            snapshot_path(directory, offset).unlink()


def delete_after(directory: Path, offset: int) -> None:
    """Remove snapshots beyond `offset` (the log was truncated below them)."""
    for snap in list_snapshots(directory):
        if snap > offset:
            with contextlib.suppress(FileNotFoundError):
                snapshot_path(directory, snap).unlink()


def delete_before(directory: Path, offset: int) -> None:
    """Remove snapshots below `offset` (the cleaner rewrote the log below it, so a replay
    starting there could miss a transaction's end)."""
    for snap in list_snapshots(directory):
        if snap < offset:
            with contextlib.suppress(FileNotFoundError):
                snapshot_path(directory, snap).unlink()
