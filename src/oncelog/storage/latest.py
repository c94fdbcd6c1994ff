"""Reading a log as a cleaning would leave it: how a coordinator loads its internal topic.

A start replays `__consumer_offsets` and `__transaction_state` from their first offset. The
cleaner bounds what is on disk, but the active segment is never cleaned and a day of
transactions leaves one marker per transaction (kept for delete.retention.ms, as Kafka does),
so the replay must not cost Python work per superseded record or per batch. Two passes over the
log, both in C when the extension is built (`_speedups.collect_latest` / `select_latest`):

1. the latest offset of every key below the last stable offset, aborted data left out;
2. the batches again, each either kept whole (markers, everything from the LSO on, batches
   whose records are all latest), dropped (all superseded, aborted, or empty) or rebuilt with
   the records that stay.

Only batches of producers with aborted transactions (per the `.txnindex`) and compressed
batches (the coordinators never write any) come back to Python. `read_latest_python` is the
reference the property tests compare with, and the fallback without the extension.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from hashlib import blake2b

from oncelog.fileio import FileRegion
from oncelog.protocol.records.batch import BatchHeader, iter_batches, parse_header, span_batches
from oncelog.protocol.records.compression import batch_records
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.storage.cleaned_batches import (
    CleanedTransactions,
    Record,
    marker_kind,
    rebuild,
    records_of,
)
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.txn_index import AbortedTxn


def read_latest(
    plog: PartitionLog, chunk_bytes: int = 1 << 20, *, to_log_end: bool = False
) -> Iterator[bytes]:
    """The log's batches up to the high watermark, with what a cleaning would remove left
    out: records whose key has a later record (not of an aborted transaction) below the last
    stable offset, and aborted transactions' data. Markers, tombstones and everything at or
    above the last stable offset pass; offsets are kept. Replaying this gives a coordinator
    the same state as replaying every record (it must, since the cleaner does the same on
    disk).

    `to_log_end`: up to the log end instead (a coordinator loading on a new leader, whose
    high watermark may lag what its followers already acknowledged; its whole log becomes
    the partition's history)."""
    if _speedups is None:
        yield from read_latest_python(plog, chunk_bytes, to_log_end=to_log_end)
        return
    end, stable = _bounds(plog, to_log_end)
    start = plog.log_start_offset
    aborted = [t for s in plog.segments for t in s.txn_index.entries]
    latest, dead = _collect(plog, start, stable, aborted, chunk_bytes)
    for data in _chunks(plog, start, end, chunk_bytes):
        items, _, _, _ = _speedups.select_latest(data, stable, end, latest, dead)
        view = memoryview(data)
        out: list[bytes | memoryview] = []
        for pos, size, whole in items:
            if whole:
                out.append(view[pos : pos + size])
                continue
            kept = _kept(data, pos, parse_header(data, pos), latest, _key)
            if kept is not None:
                out.append(kept)
        if out:
            yield b"".join(out)


def _collect(
    plog: PartitionLog, start: int, stable: int, aborted: list[AbortedTxn], chunk_bytes: int
) -> tuple[dict[bytes, int], set[int]]:
    """Key -> offset of its latest record below `stable` (aborted data left out), and the
    base offsets of the aborted data batches."""
    assert _speedups is not None
    latest: dict[bytes, int] = {}
    dead: set[int] = set()
    suspects = {t.producer_id for t in aborted}
    txns = CleanedTransactions(aborted)
    for data in _chunks(plog, start, stable, chunk_bytes):
        held, _, _, _ = _speedups.collect_latest(data, stable, latest, suspects)
        for pos in held:
            header = parse_header(data, pos)
            if header.is_control:
                txns.on_marker(header, marker_kind(data, pos, header))
                continue
            if header.producer_id in suspects and txns.on_batch(header):
                dead.add(header.base_offset)
                continue
            if not header.record_count:
                continue
            body = batch_records(data, pos, header)
            for rec in records_of(body, header.record_count):
                if rec.key_length >= 0:
                    key, offset = _key(body, rec), header.base_offset + rec.offset_delta
                    if offset > latest.get(key, -1):
                        latest[key] = offset
    return latest, dead


def _kept(
    data: bytes,
    pos: int,
    header: BatchHeader,
    latest: dict[bytes, int],
    key_of: Callable[[bytes, Record], bytes],
) -> bytes | memoryview | None:
    """The batch at `pos` with only its records that stay (a record stays if its key is null
    or has no later record): itself if all do, None if none does."""
    body = batch_records(data, pos, header)
    kept = [
        rec
        for rec in records_of(body, header.record_count)
        if rec.key_length < 0
        or header.base_offset + rec.offset_delta >= latest.get(key_of(body, rec), -1)
    ]
    if len(kept) == header.record_count:
        return memoryview(data)[pos : pos + header.size]
    return rebuild(header, body, kept, None) if kept else None


def _key(body: bytes, rec: Record) -> bytes:
    return body[rec.key_start : rec.key_start + rec.key_length]


def _bounds(plog: PartitionLog, to_log_end: bool) -> tuple[int, int]:
    """(where reading ends, the last stable offset below it)."""
    if not to_log_end:
        return plog.high_watermark, plog.last_stable_offset
    end = plog.log_end_offset
    first_unstable = plog.producer_state.first_unstable_offset()
    return end, end if first_unstable is None else min(first_unstable, end)


def _chunks(plog: PartitionLog, start: int, upper: int, chunk_bytes: int) -> Iterator[bytes]:
    """Whole batches from `start` to below `upper`, about `chunk_bytes` at a time."""
    offset = start
    beyond_hw = upper > plog.high_watermark
    while offset < upper:
        records = plog.read(offset, chunk_bytes, upper, for_follower=beyond_hw).records
        data = records.read() if isinstance(records, FileRegion) else bytes(records)
        _, next_offset = span_batches(data)
        if next_offset < 0:
            return
        yield data
        offset = next_offset


# -- the reference ------------------------------------------------------------------------------


def read_latest_python(
    plog: PartitionLog, chunk_bytes: int = 1 << 20, *, to_log_end: bool = False
) -> Iterator[bytes]:
    """`read_latest` batch by batch in Python (key digests in the map)."""
    end, stable = _bounds(plog, to_log_end)
    start = plog.log_start_offset
    aborted = [t for s in plog.segments for t in s.txn_index.entries]
    latest = _latest_digests(plog, start, stable, aborted, chunk_bytes)
    txns = CleanedTransactions(aborted)
    for data in _chunks(plog, start, end, chunk_bytes):
        out: list[bytes | memoryview] = []
        view = memoryview(data)
        for pos, header in iter_batches(data):
            whole = view[pos : pos + header.size]
            if header.base_offset >= stable:
                out.append(whole)
            elif header.is_control:
                txns.on_marker(header, marker_kind(data, pos, header))
                out.append(whole)
            elif not txns.on_batch(header) and header.record_count:
                kept = _kept(data, pos, header, latest, _digest)
                if kept is not None:
                    out.append(kept)
        if out:
            yield b"".join(out)


def _digest(body: bytes, rec: Record) -> bytes:
    return blake2b(body[rec.key_start : rec.key_start + rec.key_length], digest_size=16).digest()


def _latest_digests(
    plog: PartitionLog, start: int, stable: int, aborted: list[AbortedTxn], chunk_bytes: int
) -> dict[bytes, int]:
    """Key digest -> offset of its latest record below `stable`, aborted data left out."""
    latest: dict[bytes, int] = {}
    txns = CleanedTransactions(aborted)
    for data in _chunks(plog, start, stable, chunk_bytes):
        for pos, header in iter_batches(data):
            if header.is_control:
                txns.on_marker(header, marker_kind(data, pos, header))
            elif not txns.on_batch(header) and header.record_count:
                body = batch_records(data, pos, header)
                for rec in records_of(body, header.record_count):
                    if rec.key_length >= 0:
                        latest[_digest(body, rec)] = header.base_offset + rec.offset_delta
    return latest
