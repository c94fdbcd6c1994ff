"""`oncelog dump-log`: a partition's files printed as `kafka-dump-log.sh` prints them.

Segments (`.log`: one line per batch with its producer id, epoch, sequences, transactional
and control flags; with `--deep-iteration` one `| offset: ...` line per record, markers as
`endTxnMarker: COMMIT coordinatorEpoch: N`), offset and time indexes, producer-state
snapshots and aborted-transaction indexes. `--offsets-decoder` and
`--transaction-log-decoder` print `__consumer_offsets` and `__transaction_state` records as
Kafka's decoders do. It only reads, so it is safe on a running broker's log dir: the tail of
an active segment may be a batch still being written, reported as invalid bytes at the end.
The checks a broker would run at startup are reported on stderr: offsets that do not follow
each other, index entries that point at no batch, time-index timestamps that go back.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import struct
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from oncelog.cli.console import exits_quietly, fail
from oncelog.client.overview import consumer_assignment
from oncelog.coordinator.group.records import (
    GroupValue,
    OffsetKey,
    OffsetValue,
    RecordDecodeError,
    decode_key,
    decode_value,
)
from oncelog.coordinator.txn.records import TxnRecordError
from oncelog.coordinator.txn.records import decode as decode_txn
from oncelog.fileio import CorruptFileError
from oncelog.producer_state import snapshot
from oncelog.protocol.records.batch import (
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG,
    HEADER_SIZE,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    NO_SEQUENCE,
    BatchHeader,
    compute_crc,
    parse_header,
)
from oncelog.protocol.records.compression import Codec, DecompressionError, batch_records
from oncelog.protocol.records.record import DecodedRecord, RecordFormatError, decode_records

DESCRIPTION = """\
Print segments (.log), offset and time indexes (.index, .timeindex), producer-state
snapshots (.snapshot) and aborted-transaction indexes (.txnindex) of a partition
directory, as kafka-dump-log.sh does. Safe on a running broker's files.

examples:
  oncelog dump-log --files oncelog-data/t-0/00000000000000000000.log --print-data-log
  oncelog dump-log --files 00000000000000000000.log --transaction-log-decoder
  oncelog dump-log --files 00000000000000000000.snapshot,00000000000000000000.txnindex
"""

#: Kafka's default --max-bytes; only with it is a segment's invalid tail reported.
DEFAULT_MAX_BYTES = 2**31 - 1
#: The decoder classes Kafka's tool takes that print what this one prints.
STRING_DECODERS = ("org.apache.kafka.tools.api.StringDecoder", "kafka.serializer.StringDecoder")
_NOT_HERE = {
    "--cluster-metadata-decoder": "oncelog keeps the cluster's metadata in etcd, not in a log",
    "--remote-log-metadata-decoder": "oncelog has no tiered storage",
    "--share-group-state-decoder": "oncelog has no share groups",
}
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_TXN_ENTRY = struct.Struct(">hqqqq")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_MARKERS = {0: "ABORT", 1: "COMMIT"}
_TXN_STATES = {
    "EMPTY": "Empty",
    "ONGOING": "Ongoing",
    "PREPARE_COMMIT": "PrepareCommit",
    "PREPARE_ABORT": "PrepareAbort",
    "COMPLETE_COMMIT": "CompleteCommit",
    "COMPLETE_ABORT": "CompleteAbort",
    "DEAD": "Dead",
    "PREPARE_EPOCH_FENCE": "PrepareEpochFence",
}

#: (key, payload) of one record's key and value bytes, as the chosen decoder prints them.
Parser = Callable[[int, bytes | None, bytes | None], tuple[str | None, str | None]]


def add_parsers(sub: Any) -> None:
    p = sub.add_parser(
        "dump-log",
        help="print segments, indexes and snapshots of a partition (like kafka-dump-log)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--files", required=True, metavar="FILE[,FILE...]", help="the files to print, in order"
    )
    p.add_argument(
        "--print-data-log",
        action="store_true",
        help="print each record's key and value too (implies --deep-iteration)",
    )
    p.add_argument("--deep-iteration", action="store_true", help="print every record")
    p.add_argument(
        "--skip-record-metadata",
        action="store_true",
        help="with --print-data-log, print only keys and values",
    )
    p.add_argument(
        "--verify-index-only",
        action="store_true",
        help="check indexes against their segment without printing their entries",
    )
    p.add_argument(
        "--index-sanity-check",
        action="store_true",
        help="only check that indexes pass the broker's startup check",
    )
    p.add_argument(
        "--max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        metavar="N",
        help="read at most N bytes of each segment",
    )
    # Kafka's options that change nothing here, so that scripts written for its tool run.
    p.add_argument("--max-message-size", type=int, metavar="N", help=argparse.SUPPRESS)
    for option in ("--key-decoder-class", "--value-decoder-class"):
        p.add_argument(option, metavar="CLASS", help=f"{STRING_DECODERS[0]} (the only one)")
    for option in _NOT_HERE:
        p.add_argument(option, action="store_true", help=argparse.SUPPRESS)
    decoders = p.add_mutually_exclusive_group()
    decoders.add_argument(
        "--offsets-decoder",
        action="store_true",
        help="decode __consumer_offsets records (implies --print-data-log)",
    )
    decoders.add_argument(
        "--transaction-log-decoder",
        action="store_true",
        help="decode __transaction_state records (implies --print-data-log)",
    )
    p.set_defaults(func=run)


@exits_quietly
def run(args: argparse.Namespace) -> int:
    if args.max_bytes <= 0:
        return fail("--max-bytes must be positive", 2)
    for option, why in _NOT_HERE.items():
        if getattr(args, option[2:].replace("-", "_")):
            return fail(f"{option}: {why}", 2)
    for chosen in (args.key_decoder_class, args.value_decoder_class):
        if chosen is not None and chosen not in STRING_DECODERS:
            return fail(f"decoder class {chosen}: only {STRING_DECODERS[0]} is available", 2)
    parser: Parser = _text
    if args.offsets_decoder:
        parser = offsets_record
    elif args.transaction_log_decoder:
        parser = transaction_record
    printing = args.print_data_log or parser is not _text
    dumper = Dumper(
        sys.stdout,
        sys.stderr,
        print_data=printing,
        deep=printing or args.deep_iteration,
        skip_metadata=args.skip_record_metadata,
        verify_only=args.verify_index_only,
        sanity_only=args.index_sanity_check,
        max_bytes=args.max_bytes,
        parser=parser,
    )
    status = 0
    for name in (n.strip() for n in args.files.split(",")):
        if not name:
            continue
        try:
            if not dumper.dump(Path(name)):
                status = 1
        except OSError as exc:
            fail(f"cannot read {name}: {exc.strerror or exc}")
            status = 1
    dumper.report()
    return status


class Dumper:
    """Prints files to `out`; what a broker's startup checks would find goes to `err`."""

    def __init__(
        self,
        out: TextIO,
        err: TextIO,
        *,
        print_data: bool = False,
        deep: bool = False,
        skip_metadata: bool = False,
        verify_only: bool = False,
        sanity_only: bool = False,
        max_bytes: int = DEFAULT_MAX_BYTES,
        parser: Parser | None = None,
    ) -> None:
        self.out = out
        self.err = err
        self.print_data = print_data
        self.deep = deep or print_data
        self.skip_metadata = skip_metadata
        self.verify_only = verify_only
        self.sanity_only = sanity_only
        self.max_bytes = max_bytes
        self.parser = parser or _text
        self.gaps: dict[str, list[tuple[int, int]]] = {}
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.time_regressions: dict[str, list[tuple[int, int]]] = {}

    def dump(self, path: Path) -> bool:
        """Print one file; False when it could not be read as what its name says."""
        suffix = path.suffix
        if suffix not in _KINDS:
            print(f"Ignoring unknown file {path}", file=self.err)
            return True
        if not path.is_file():
            print(f"Error: {path} is not a file", file=self.err)
            return False
        print(f"Dumping {path}", file=self.out)
        return _KINDS[suffix](self, path)

    # -- segments ------------------------------------------------------------------------------

    def dump_log(self, path: Path) -> bool:
        print(f"Log starting offset: {_base_offset(path)}", file=self.out)
        with _segment(path, self.max_bytes) as segment:
            valid = 0
            last_offset = -1
            for pos, header, batch in segment.batches():
                self._print_batch(header, pos, batch)
                if self.deep:
                    last_offset = self._print_records(path, batch, header, last_offset)
                valid = pos + header.size
            trailing = segment.size - valid
        if trailing > 0 and self.max_bytes == DEFAULT_MAX_BYTES:
            print(f"Found {trailing} invalid bytes at the end of {path.name}", file=self.out)
        return True

    def _print_batch(self, h: BatchHeader, pos: int, batch: bytes) -> None:
        """Kafka's batch line; `pos` is where the batch starts in its segment."""
        horizon = (
            f"OptionalLong[{h.base_timestamp}]"
            if h.attributes & DELETE_HORIZON_FLAG
            else "OptionalLong.empty"
        )
        valid = compute_crc(batch, 0, h.size) == h.crc
        print(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.record_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} "
            f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
            f"partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {_bool(h.is_transactional)} isControl: {_bool(h.is_control)} "
            f"deleteHorizonMs: {horizon} position: {pos} "
            f"{_timestamp_type(h)}: {h.max_timestamp} size: {h.size} magic: {h.magic} "
            f"compresscodec: {_codec_name(h.compression)} crc: {h.crc} isvalid: {_bool(valid)}",
            file=self.out,
        )

    def _print_records(self, path: Path, batch: bytes, h: BatchHeader, last_offset: int) -> int:
        try:
            records = decode_records(batch_records(batch, 0, h), h.record_count)
        except (DecompressionError, RecordFormatError) as exc:
            print(f"| cannot read the records of this batch: {exc}", file=self.out)
            return last_offset
        for record in records:
            offset = h.base_offset + record.offset_delta
            if last_offset >= 0 and offset != last_offset + 1:
                self.gaps.setdefault(str(path), []).append((last_offset, offset))
            last_offset = offset
            self.out.write(self._record_line(h, offset, record) + "\n")
        return last_offset

    def _record_line(self, h: BatchHeader, offset: int, record: DecodedRecord) -> str:
        parts: list[str] = []
        if not self.skip_metadata:
            ts = h.max_timestamp if h.log_append_time else h.base_timestamp + record.timestamp_delta
            sequence = (
                NO_SEQUENCE
                if h.base_sequence == NO_SEQUENCE
                else (h.base_sequence + record.offset_delta) % 2**31
            )
            header_keys = ",".join(name for name, _ in record.headers)
            parts.append(
                f"offset: {offset} {_timestamp_type(h)}: {ts} "
                f"keySize: {_size(record.key)} valueSize: {_size(record.value)} "
                f"sequence: {sequence} headerKeys: [{header_keys}]"
            )
            if h.is_control:
                parts.append(_control(record))
        if self.print_data and not h.is_control:
            key, payload = self.parser(offset, record.key, record.value)
            if key is not None:
                parts.append(f"key: {key}")
            if payload is not None:
                parts.append(f"payload: {payload}")
        return "| " + " ".join(parts)

    # -- indexes and snapshots -----------------------------------------------------------------

    def dump_index(self, path: Path) -> bool:
        data = path.read_bytes()
        base = _base_offset(path)
        log = _sibling(path, ".log")
        if not data:
            print(f"{path} is empty.", file=self.out)
            return True
        with contextlib.ExitStack() as files:
            segment = files.enter_context(_segment(log)) if log.exists() else None
            log_size = segment.size if segment is not None else 0
            if self.sanity_only:
                return self._sanity(path, _index_problem(data, base, log_size))
            for i, (rel, position) in enumerate(_OFFSET_ENTRY.iter_unpack(_whole(data, 8))):
                if i > 0 and rel == 0:
                    break  # Kafka's rule: zeros of a preallocated file, nothing written there
                offset = base + rel
                found = segment.header_at(position) if segment is not None else None
                if found is None or offset not in (found.base_offset, found.last_offset):
                    shown = -1 if found is None else found.base_offset
                    self.index_mismatches.setdefault(str(path), []).append((offset, shown))
                if not self.verify_only:
                    print(f"offset: {offset} position: {position}", file=self.out)
        return True

    def dump_time_index(self, path: Path) -> bool:
        data = path.read_bytes()
        base = _base_offset(path)
        if self.sanity_only:
            return self._sanity(path, _time_index_problem(data, base))
        previous = -1
        for i, (ts, rel) in enumerate(_TIME_ENTRY.iter_unpack(_whole(data, 12))):
            if i > 0 and rel == 0 and ts == 0:
                break
            if previous >= ts:
                self.time_regressions.setdefault(str(path), []).append((ts, previous))
            previous = ts
            if not self.verify_only:
                print(f"timestamp: {ts} offset: {base + rel}", file=self.out)
        return True

    def dump_snapshot(self, path: Path) -> bool:
        try:
            _, entries = snapshot.decode(path.read_bytes())
        except CorruptFileError as exc:
            print(f"{path}: {exc}", file=self.err)
            return False
        for e in entries:
            txn_first = (
                "OptionalLong.empty"
                if e.current_txn_first_offset < 0
                else f"OptionalLong[{e.current_txn_first_offset}]"
            )
            line = (
                f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
                f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn_first} "
                f"lastTimestamp: {e.last_timestamp} "
            )
            if e.batches:
                b = e.batches[0]
                line += (
                    f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} "
                    f"lastOffset: {b.last_offset} offsetDelta: {b.offset_delta} "
                    f"timestamp: {b.timestamp}"
                )
            print(line, file=self.out)
        return True

    def dump_txn_index(self, path: Path) -> bool:
        for version, pid, first, last, lso in _TXN_ENTRY.iter_unpack(
            _whole(path.read_bytes(), _TXN_ENTRY.size)
        ):
            print(
                f"version: {version} producerId: {pid} firstOffset: {first} "
                f"lastOffset: {last} lastStableOffset: {lso}",
                file=self.out,
            )
        return True

    def _sanity(self, path: Path, problem: str | None) -> bool:
        if problem is not None:
            print(f"{path}: {problem}", file=self.err)
            return False
        print(f"{path} passed sanity check.", file=self.out)
        return True

    def report(self) -> None:
        """What the files' checks found, on stderr, as Kafka's tool reports it."""
        for name, pairs in self.index_mismatches.items():
            print(f"Mismatches in :{name}", file=self.err)
            for indexed, found in pairs:
                print(f"  Index offset: {indexed}, log offset: {found}", file=self.err)
        for name, pairs in self.time_regressions.items():
            print(f"Found out of order timestamp in :{name}", file=self.err)
            for ts, previous in pairs:
                print(
                    f"  Index timestamp: {ts}, Previously indexed timestamp: {previous}",
                    file=self.err,
                )
        for name, pairs in self.gaps.items():
            print(f"Non-consecutive offsets in {name}", file=self.err)
            for first, second in pairs:
                print(f"  {first} is followed by {second}", file=self.err)


_KINDS: dict[str, Callable[[Dumper, Path], bool]] = {
    ".log": Dumper.dump_log,
    ".index": Dumper.dump_index,
    ".timeindex": Dumper.dump_time_index,
    snapshot.SUFFIX: Dumper.dump_snapshot,
    ".txnindex": Dumper.dump_txn_index,
}


# -- decoders ----------------------------------------------------------------------------------


def _text(offset: int, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """Kafka's default StringDecoder: UTF-8, malformed bytes replaced."""
    return (
        None if key is None else key.decode("utf-8", "replace"),
        None if value is None else value.decode("utf-8", "replace"),
    )


def offsets_record(
    offset: int, key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None]:
    """A `__consumer_offsets` record as Kafka's offsets decoder prints it: key and value as
    JSON with their schema version, a tombstone as `<DELETE>`."""
    if key is None:
        return f"Error at offset {offset}, skipping. The record has no key.", None
    try:
        decoded_key = decode_key(key)
        decoded_value = decode_value(decoded_key, value)
    except (RecordDecodeError, struct.error, UnicodeDecodeError) as exc:
        return f"Unknown record type at offset {offset}, skipping. {exc}", None
    key_version = _version(key)
    if isinstance(decoded_key, OffsetKey):
        key_data: dict[str, Any] = {
            "group": decoded_key.group_id,
            "topic": decoded_key.topic,
            "partition": decoded_key.partition,
        }
    else:
        key_data = {"group": decoded_key.group_id}
    shown_key = _json({"type": str(key_version), "data": key_data})
    if decoded_value is None or value is None:
        return shown_key, "<DELETE>"
    data = (
        _offset_json(decoded_value)
        if isinstance(decoded_value, OffsetValue)
        else _group_json(decoded_value)
    )
    return shown_key, _json({"version": str(_version(value)), "data": data})


def _offset_json(v: OffsetValue) -> dict[str, Any]:
    return {
        "offset": v.offset,
        "leaderEpoch": v.leader_epoch,
        "metadata": v.metadata,
        "commitTimestamp": v.commit_timestamp,
    }


def _group_json(v: GroupValue) -> dict[str, Any]:
    consumer = v.protocol_type == "consumer"
    return {
        "protocolType": v.protocol_type,
        "generation": v.generation,
        "protocol": v.protocol,
        "leader": v.leader,
        "currentStateTimestamp": v.state_timestamp,
        "members": [
            {
                "memberId": m.member_id,
                "groupInstanceId": m.group_instance_id,
                "clientId": m.client_id,
                "clientHost": m.client_host,
                "rebalanceTimeout": m.rebalance_timeout_ms,
                "sessionTimeout": m.session_timeout_ms,
                "subscription": _subscription(m.subscription) if consumer else _b64(m.subscription),
                "assignment": _assignment(m.assignment) if consumer else _b64(m.assignment),
            }
            for m in v.members
        ],
    }


def _subscription(data: bytes) -> Any:
    """A ConsumerProtocolSubscription's version and topics (the bytes as base64 when they
    are not one)."""
    try:
        (version, count) = struct.unpack_from(">hi", data, 0)
        pos, topics = 6, []
        for _ in range(max(count, 0)):
            (size,) = struct.unpack_from(">h", data, pos)
            topics.append(data[pos + 2 : pos + 2 + size].decode())
            pos += 2 + size
    except (struct.error, UnicodeDecodeError):
        return _b64(data)
    return {"version": version, "topics": topics}


def _assignment(data: bytes) -> Any:
    if len(data) < 2:
        return _b64(data)
    partitions: dict[str, list[int]] = {}
    for tp in consumer_assignment(data):
        partitions.setdefault(tp.topic, []).append(tp.partition)
    return {
        "version": _version(data),
        "assignedPartitions": [{"topic": t, "partitions": p} for t, p in partitions.items()],
    }


def transaction_record(
    offset: int, key: bytes | None, value: bytes | None
) -> tuple[str | None, str | None]:
    """A `__transaction_state` record as Kafka's transaction-log decoder prints it."""
    if key is None or len(key) < 2:
        return f"Error at offset {offset}, skipping. The record has no key.", None
    try:
        transactional_id, meta = decode_txn(key, value)
    except (TxnRecordError, struct.error, UnicodeDecodeError, ValueError):
        return f"unknown::version={_version(key)}", None
    shown_key = f"transaction_metadata::transactionalId={transactional_id}"
    if meta is None:
        return shown_key, "<DELETE>"
    partitions = ",".join(f"{tp.topic}-{tp.partition}" for tp in sorted(meta.partitions))
    return shown_key, (
        f"producerId:{meta.producer_id},producerEpoch:{meta.producer_epoch},"
        f"state={_TXN_STATES.get(meta.state.name, meta.state.name)},"
        f"partitions=[{partitions}],txnLastUpdateTimestamp={meta.last_update_ms},"
        f"txnTimeoutMs={meta.timeout_ms}"
    )


# -- reading -----------------------------------------------------------------------------------


class _Segment:
    """A segment read batch by batch (never whole: it may be large, and may be growing or
    cut by the broker while it is read)."""

    def __init__(self, f: BinaryIO, limit: int) -> None:
        self.f = f
        self.size = min(f.seek(0, 2), limit)

    def header_at(self, position: int) -> BatchHeader | None:
        """The v2 batch header at `position`, if one is there."""
        if position < 0 or self.size - position < HEADER_SIZE:
            return None
        self.f.seek(position)
        head = self.f.read(HEADER_SIZE)
        if len(head) < HEADER_SIZE or head[MAGIC_OFFSET] != CURRENT_MAGIC:
            return None
        return parse_header(head, 0)

    def batches(self) -> Iterator[tuple[int, BatchHeader, bytes]]:
        """(position, header, bytes) of each whole v2 batch from the start; stops at the
        first bytes that are not one (a partial tail, garbage, another magic)."""
        pos = 0
        while True:
            header = self.header_at(pos)
            if header is None or header.batch_length < MIN_BATCH_LENGTH:
                return
            if pos + header.size > self.size:
                return
            self.f.seek(pos)
            batch = self.f.read(header.size)
            if len(batch) < header.size:
                return
            yield pos, header, batch
            pos += header.size


@contextlib.contextmanager
def _segment(path: Path, limit: int = DEFAULT_MAX_BYTES) -> Iterator[_Segment]:
    with path.open("rb") as f:
        yield _Segment(f, limit)


def _index_problem(data: bytes, base: int, log_size: int) -> str | None:
    """What the broker's startup check of an offset index refuses (it then rebuilds it)."""
    if len(data) % _OFFSET_ENTRY.size:
        return f"size {len(data)} is not a multiple of {_OFFSET_ENTRY.size}"
    last_offset, last_pos = base - 1, -1
    for rel, position in _OFFSET_ENTRY.iter_unpack(data):
        offset = base + rel
        if offset <= last_offset or position <= last_pos or position >= log_size:
            return f"entry (offset {offset}, position {position}) is out of order or past the log"
        last_offset, last_pos = offset, position
    return None


def _time_index_problem(data: bytes, base: int) -> str | None:
    if len(data) % _TIME_ENTRY.size:
        return f"size {len(data)} is not a multiple of {_TIME_ENTRY.size}"
    last_ts, last_offset = -1, base - 1
    for ts, rel in _TIME_ENTRY.iter_unpack(data):
        if ts < last_ts or base + rel < last_offset:
            return f"entry (timestamp {ts}, offset {base + rel}) goes back"
        last_ts, last_offset = ts, base + rel
    return None


def _base_offset(path: Path) -> int:
    try:
        return int(path.name.split(".")[0])
    except ValueError:
        return 0


def _sibling(path: Path, suffix: str) -> Path:
    return path.with_name(path.name.split(".")[0] + suffix)


def _whole(data: bytes, size: int) -> bytes:
    """The entries that are whole (a crash may have cut the last one)."""
    return data[: len(data) - len(data) % size]


def _control(record: DecodedRecord) -> str:
    key = record.key or b""
    if len(key) < _CONTROL_KEY.size:
        return "controlType: UNKNOWN(-1)"
    _, kind = _CONTROL_KEY.unpack_from(key, 0)
    value = record.value or b""
    if kind in _MARKERS and len(value) >= _CONTROL_VALUE.size:
        _, coordinator_epoch = _CONTROL_VALUE.unpack_from(value, 0)
        return f"endTxnMarker: {_MARKERS[kind]} coordinatorEpoch: {coordinator_epoch}"
    return f"controlType: UNKNOWN({kind})"


def _timestamp_type(h: BatchHeader) -> str:
    return "LogAppendTime" if h.log_append_time else "CreateTime"


def _codec_name(codec: int) -> str:
    try:
        return Codec(codec).name.lower()
    except ValueError:
        return f"unknown({codec})"


def _size(blob: bytes | None) -> int:
    return -1 if blob is None else len(blob)


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _version(raw: bytes) -> int:
    return int(struct.unpack_from(">h", raw, 0)[0]) if len(raw) >= 2 else -1


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))
