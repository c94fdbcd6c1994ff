"""Validation of the records a client produces, before any byte is appended.

Checks each batch of one partition's produce data and either returns them all, ready to be
offset-assigned, or raises the Kafka error for the first problem, so a partition never gets
part of a request. A client's data must be exactly one batch, as Kafka's LogValidator
requires of magic v2: a Produce answer has one base offset per partition, so several batches
could not each be acknowledged for what happened to them. Costs per batch: header parsing and
a C CRC32C; records are walked only to check the count and offset deltas (uncompressed in
place, compressed after a capped decompression), and for a compacted topic their keys, in the
same C walk, as Kafka refuses a record without a key there: the cleaner could never drop it.

`check_follower_batches` checks a follower's append of the leader's stored batches (framing,
magic, CRC32C, offsets) the same way: all of them before anything is written.
"""

from __future__ import annotations

from typing import NamedTuple

from crc32c import crc32c

from oncelog.errors import (
    CorruptMessage,
    InvalidRecord,
    MessageTooLarge,
    UnsupportedCompressionType,
)
from oncelog.protocol.records.batch import (
    CONTROL_FLAG,
    CRC_START,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    BatchHeader,
    compute_crc,
    iter_batches,
    parse_header,
    peek_prefix,
)
from oncelog.protocol.records.compression import Codec, DecompressionError, decompress
from oncelog.protocol.records.control import parse_marker_at
from oncelog.protocol.records.record import KeylessRecordsError, RecordFormatError, check_records
from oncelog.protocol.records.speedups import speedups as _speedups
from oncelog.storage.log_info import UnexpectedAppendOffset

_MIN_LEGACY_LENGTH = 14  # the smallest magic v0 message after its offset and length


class KeylessRecords(InvalidRecord):
    """Records without a key produced to a compacted topic; `indexes` are their positions in
    the batch, which the Produce response lists in record_errors as Kafka does."""

    def __init__(self, indexes: list[int]) -> None:
        super().__init__(f"{len(indexes)} records without a key for a compacted topic")
        self.indexes = indexes

    def record_errors(self, partition: str) -> list[tuple[int, str]]:
        """(batch index, message) per keyless record, in Kafka's words (LogValidator)."""
        why = f"Compacted topic cannot accept message without key in topic partition {partition}"
        return [(index, why) for index in self.indexes]

    def kafka_message(self, partition: str) -> str:
        """The partition's error message, as Kafka's RecordValidationException words it."""
        errors = self.record_errors(partition)
        shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
        return (
            f"One or more records have been rejected due to {len(errors)} record errors in "
            f"total, and only showing the first three errors at most: [{shown}]"
        )


class ValidatedRecords(NamedTuple):
    """The batches of one partition's produce data, all checked (a NamedTuple: one is made
    for every partition of every Produce)."""

    data: bytes | memoryview  # a Produce's records are views of its request frame
    batches: list[tuple[int, BatchHeader]]  # (position in data, header)
    record_count: int


_new_tuple = tuple.__new__


def validate_produce_records(
    data: bytes | memoryview,
    max_message_bytes: int,
    *,
    client: bool = True,
    compacted: bool = False,
) -> ValidatedRecords:
    """Check every batch in `data`; raise the first error as a typed KafkaError.

    `client`: the data came in a Produce request and must be one batch (INVALID_RECORD
    otherwise, as Kafka). The broker's own appends (coordinator records) may carry several.
    `compacted`: the topic's cleanup.policy has compact; every record needs a key
    (KeylessRecords, an INVALID_RECORD, otherwise).
    Errors come in Kafka's order: sizes and CRCs of all batches, then the batch count, then
    each batch's contents.
    """
    if client and _speedups is not None:
        # The common case in one C call; anything it does not pass is judged (and worded)
        # below, which stays the reference.
        header = _speedups.check_client_batch(data, max_message_bytes, compacted, BatchHeader)
        if header is not None:  # tuple.__new__: without the NamedTuple's Python `__new__`
            return _new_tuple(ValidatedRecords, (data, [(0, header)], header.record_count))
    if not data:
        raise InvalidRecord("produce request has no record batches for the partition")
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    while pos < len(data):
        header = _checked_header(data, pos)
        if header.size > max_message_bytes:
            raise MessageTooLarge(
                f"batch of {header.size} bytes exceeds max.message.bytes={max_message_bytes}"
            )
        if compute_crc(data, pos, header.size) != header.crc:
            raise CorruptMessage(f"CRC32C mismatch in batch at byte {pos}")
        batches.append((pos, header))
        pos += header.size
    if client and len(batches) > 1:
        raise InvalidRecord(
            f"produce data for one partition holds {len(batches)} record batches; "
            "a v2 MessageSet may not have more than one batch"
        )
    records = 0
    for pos, header in batches:
        _check_batch(data, pos, header, compacted)
        records += header.record_count
    return ValidatedRecords(data, batches, records)


def _checked_header(data: bytes | memoryview, pos: int) -> BatchHeader:
    """Sizes first, as Kafka reads them: only a batch whose length fits is judged by magic."""
    remaining = len(data) - pos
    if remaining <= MAGIC_OFFSET:
        raise CorruptMessage(f"{remaining} trailing bytes are not a record batch")
    _, batch_length = peek_prefix(data, pos)
    if batch_length < _MIN_LEGACY_LENGTH or batch_length + LOG_OVERHEAD > remaining:
        raise CorruptMessage(
            f"batchLength {batch_length} inconsistent with {remaining} bytes received"
        )
    magic = data[pos + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        if magic < CURRENT_MAGIC:
            raise InvalidRecord(f"record batches must be magic v2, got magic v{magic}")
        raise CorruptMessage(f"unknown record batch magic {magic}")
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptMessage(f"batchLength {batch_length} is shorter than a v2 batch header")
    return parse_header(data, pos)


def _check_batch(data: bytes | memoryview, pos: int, header: BatchHeader, compacted: bool) -> None:
    """The contents of one batch whose size and CRC were checked."""
    if header.is_control:
        raise InvalidRecord("clients are not allowed to write control records")
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecord("transactional batch without a producer id")
    if header.record_count <= 0 or header.last_offset_delta != header.record_count - 1:
        raise InvalidRecord(
            f"record count {header.record_count} does not match lastOffsetDelta "
            f"{header.last_offset_delta}"
        )
    codec = header.compression
    if codec > Codec.ZSTD:
        raise UnsupportedCompressionType(f"unknown compression codec {codec}")
    body_start, body_end = pos + HEADER_SIZE, pos + header.size
    try:
        if codec == Codec.NONE:
            check_records(data, body_start, body_end, header.record_count, compacted)
        else:
            plain = decompress(codec, memoryview(data)[body_start:body_end])
            check_records(plain, 0, len(plain), header.record_count, compacted)
    except DecompressionError as exc:
        raise CorruptMessage(str(exc)) from exc
    except KeylessRecordsError as exc:
        raise KeylessRecords(exc.indexes) from exc
    except RecordFormatError as exc:
        raise InvalidRecord(str(exc)) from exc


def check_follower_batches(
    view: memoryview, tp: object, log_end: int, log_start: int
) -> tuple[list[tuple[int, BatchHeader]], dict[int, tuple[bool, int]], int, int, int]:
    """Check a follower append (`PartitionLog.append` of origin REPLICATION: the leader's stored
    batches) before anything is written: (position, header) of each complete batch, the
    markers of the control batches by offset, the bytes they span, their records and their
    largest max timestamp; raise for the first invalid one (`UnexpectedAppendOffset` when the
    first starts below `log_end`). One pass without per-batch helper calls: it runs on every
    batch a follower stores."""
    batches = list(iter_batches(view))
    valid = batches[-1][0] + batches[-1][1].size if batches else 0
    rest = len(view) - valid
    if rest >= LOG_OVERHEAD and peek_prefix(view, valid)[1] < MIN_BATCH_LENGTH:
        raise CorruptMessage(
            f"{tp}: batch at byte {valid} of a follower append has length "
            f"{peek_prefix(view, valid)[1]}"
        )
    markers: dict[int, tuple[bool, int]] = {}
    next_offset = log_end
    records = 0
    max_timestamp = -1
    for k, (pos, header) in enumerate(batches):
        base = header.base_offset
        if header.magic != CURRENT_MAGIC:
            raise CorruptMessage(f"{tp}: batch at offset {base} has magic v{header.magic}")
        end = pos + header.batch_length + LOG_OVERHEAD
        if crc32c(view[pos + CRC_START : end]) != header.crc:
            raise CorruptMessage(
                f"{tp}: CRC32C mismatch in the batch at offset {base} "
                f"(byte {pos}) of a follower append"
            )
        delta = header.last_offset_delta
        if delta < 0 or header.record_count < 0:
            raise InvalidRecord(
                f"{tp}: batch at offset {base} has lastOffsetDelta "
                f"{delta}, {header.record_count} records"
            )
        if base < next_offset:
            if k == 0:
                raise UnexpectedAppendOffset(
                    f"{tp}: follower append starts at offset {base}, "
                    f"below the log end {next_offset} (log start {log_start})",
                    base,
                    batches[-1][1].last_offset,
                )
            raise InvalidRecord(
                f"{tp}: offsets out of order in a follower append: batch at "
                f"{base} follows one ending at {next_offset - 1}"
            )
        if header.attributes & CONTROL_FLAG and header.producer_id >= 0 and header.record_count:
            # (a control batch without records is a marker the leader's cleaner emptied)
            marker = parse_marker_at(view, pos)
            if marker is None:
                raise InvalidRecord(
                    f"{tp}: control batch at offset {base} is not a transaction marker"
                )
            markers[base] = marker
        next_offset = base + delta + 1
        records += header.record_count
        max_timestamp = max(max_timestamp, header.max_timestamp)
    return batches, markers, valid, records, max_timestamp
