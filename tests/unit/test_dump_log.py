"""`oncelog dump-log` on files built byte by byte: Kafka's lines for batches, records and
markers, the internal topics' decoders, indexes, snapshots, and what it reports when a file
is damaged."""

from __future__ import annotations

import io
import struct
from pathlib import Path

from oncelog.cli.dump_log import Dumper, offsets_record, transaction_record
from oncelog.coordinator.group.records import (
    GroupKey,
    GroupRecord,
    GroupValue,
    MemberValue,
    OffsetKey,
    OffsetValue,
    encode_key,
    encode_value,
)
from oncelog.coordinator.txn.metadata import TxnMetadata
from oncelog.coordinator.txn.records import encode_key as txn_key
from oncelog.coordinator.txn.records import encode_value as txn_value
from oncelog.coordinator.txn.state import TxnState
from oncelog.producer_state import snapshot
from oncelog.producer_state.entry import BatchMetadata, ProducerStateEntry
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, build_batch, rewrite_offsets
from oncelog.protocol.records.compression import Codec, compress
from oncelog.protocol.records.control import build_marker
from oncelog.protocol.records.record import encode_record
from oncelog.types import TopicPartition

TS = 1_700_000_000_000


def batch(
    base_offset: int,
    values: list[bytes | None],
    *,
    key: bytes | None = None,
    producer_id: int = -1,
    sequence: int = -1,
    attributes: int = 0,
    codec: int = 0,
    headers: tuple[tuple[str, bytes | None], ...] = (),
) -> bytes:
    body = b"".join(
        encode_record(offset_delta=i, timestamp_delta=i, key=key, value=v, headers=headers)
        for i, v in enumerate(values)
    )
    if codec:
        body = compress(codec, body)
    return build_batch(
        base_offset=base_offset,
        records=body,
        record_count=len(values),
        last_offset_delta=len(values) - 1,
        base_timestamp=TS,
        max_timestamp=TS + len(values) - 1,
        attributes=attributes | codec,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=sequence,
    )


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    data = bytearray(
        build_marker(
            producer_id=producer_id,
            producer_epoch=0,
            commit=commit,
            coordinator_epoch=7,
            timestamp=TS + 10,
        )
    )
    rewrite_offsets(data, 0, offset, 0)
    return bytes(data)


def dump(*paths: Path, **options: object) -> tuple[str, str, bool]:
    out, err = io.StringIO(), io.StringIO()
    dumper = Dumper(out, err, **options)  # type: ignore[arg-type]
    ok = all([dumper.dump(p) for p in paths])
    dumper.report()
    return out.getvalue(), err.getvalue(), ok


def fields(line: str) -> dict[str, str]:
    """`name: value` pairs of a batch line (values have no spaces)."""
    words = line.lstrip("| ").split(" ")
    return {words[i].rstrip(":"): words[i + 1] for i in range(0, len(words) - 1, 2)}


def test_a_transaction_reads_as_kafka_prints_it(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(
        batch(0, [b"a", b"b"], key=b"k", producer_id=4, sequence=5, attributes=TRANSACTIONAL_FLAG)
        + marker(2, 4, commit=True)
        + batch(3, [b"x"], producer_id=4, sequence=7, attributes=TRANSACTIONAL_FLAG)
        + marker(4, 4, commit=False)
    )
    out, err, ok = dump(log, print_data=True)
    assert ok and err == ""
    lines = out.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    first = fields(lines[2])
    assert first["baseOffset"] == "0" and first["lastOffset"] == "1" and first["count"] == "2"
    assert first["baseSequence"] == "5" and first["lastSequence"] == "6"
    assert first["producerId"] == "4" and first["producerEpoch"] == "0"
    assert first["isTransactional"] == "true" and first["isControl"] == "false"
    assert first["position"] == "0" and first["CreateTime"] == str(TS + 1)
    assert first["compresscodec"] == "none" and first["isvalid"] == "true"
    assert lines[3] == (
        f"| offset: 0 CreateTime: {TS} keySize: 1 valueSize: 1 sequence: 5 headerKeys: [] "
        "key: k payload: a"
    )
    assert lines[4].startswith("| offset: 1 ") and "sequence: 6" in lines[4]
    assert fields(lines[5])["isControl"] == "true"
    assert lines[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 7")
    assert "payload" not in lines[6]  # a marker's bytes are not data
    assert lines[-1].endswith("endTxnMarker: ABORT coordinatorEpoch: 7")


def test_shallow_by_default_and_metadata_skipped_on_request(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000005.log"
    log.write_bytes(batch(5, [b"one", b"two"], headers=(("h1", b"v"), ("h2", None))))
    out, _, _ = dump(log)
    assert out.splitlines()[1] == "Log starting offset: 5"
    assert not [line for line in out.splitlines() if line.startswith("|")]
    out, _, _ = dump(log, deep=True)
    assert "headerKeys: [h1,h2]" in out and "payload" not in out
    out, _, _ = dump(log, print_data=True, skip_metadata=True)
    assert [line for line in out.splitlines() if line.startswith("|")] == [
        "| payload: one",
        "| payload: two",
    ]


def test_compressed_records_are_read(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(batch(0, [b"x" * 100, b"y" * 100], codec=Codec.GZIP))
    out, _, _ = dump(log, print_data=True)
    assert "compresscodec: gzip" in out
    assert "payload: " + "y" * 100 in out


def test_damage_is_reported_not_raised(tmp_path: Path) -> None:
    good = batch(0, [b"a"])
    damaged = bytearray(batch(1, [b"b"]))
    damaged[-2] ^= 0xFF  # its value: the CRC no longer matches
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(good + bytes(damaged) + batch(5, [b"c"]) + b"\x00" * 7)
    out, err, ok = dump(log, deep=True)
    assert ok
    lines = [line for line in out.splitlines() if line.startswith("baseOffset")]
    assert [fields(line)["isvalid"] for line in lines] == ["true", "false", "true"]
    assert out.splitlines()[-1] == f"Found 7 invalid bytes at the end of {log.name}"
    assert f"Non-consecutive offsets in {log}\n  1 is followed by 5" in err


def test_offsets_topic_records_decode_to_kafka_json() -> None:
    key = encode_key(OffsetKey("g", "t", 3))
    value = encode_value(OffsetValue(42, 1, "meta", TS))
    shown_key, payload = offsets_record(0, key, value)
    assert shown_key == '{"type":"1","data":{"group":"g","topic":"t","partition":3}}'
    assert payload == (
        '{"version":"3","data":{"offset":42,"leaderEpoch":1,"metadata":"meta",'
        f'"commitTimestamp":{TS}}}}}'
    )
    assert offsets_record(0, key, None) == (shown_key, "<DELETE>")
    assignment = struct.pack(">hih1sii", 0, 1, 1, b"t", 1, 3) + struct.pack(">i", -1)
    subscription = struct.pack(">hih1s", 0, 1, 1, b"t") + struct.pack(">i", -1)
    member = MemberValue("m-1", None, "c", "/127.0.0.1", 300, 45, subscription, assignment)
    group = GroupValue("consumer", 2, "range", "m-1", TS, (member,))
    record = GroupRecord(GroupKey("g"), group)
    shown_key, payload = offsets_record(5, encode_key(record.key), encode_value(group))
    assert shown_key == '{"type":"2","data":{"group":"g"}}'
    assert payload is not None and '"generation":2' in payload
    assert '"subscription":{"version":0,"topics":["t"]}' in payload
    assert '"assignedPartitions":[{"topic":"t","partitions":[3]}]' in payload
    assert offsets_record(9, b"\x00\x09xx", b"")[0] is not None  # unknown key: one line
    assert offsets_record(9, None, b"")[1] is None


def test_transaction_log_records_decode_as_kafka_prints_them() -> None:
    meta = TxnMetadata(
        "tx",
        8,
        1,
        60000,
        TxnState.PREPARE_COMMIT,
        frozenset({TopicPartition("b", 0), TopicPartition("a", 2)}),
        TS,
        TS - 5,
    )
    assert transaction_record(0, txn_key("tx"), txn_value(meta)) == (
        "transaction_metadata::transactionalId=tx",
        "producerId:8,producerEpoch:1,state=PrepareCommit,partitions=[a-2,b-0],"
        f"txnLastUpdateTimestamp={TS},txnTimeoutMs=60000",
    )
    assert transaction_record(0, txn_key("tx"), None)[1] == "<DELETE>"
    assert transaction_record(0, b"\x00\x05", b"")[0] == "unknown::version=5"


def test_indexes_snapshots_and_aborted_transactions(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000010.log"
    first = batch(10, [b"a", b"b"])
    log.write_bytes(first + batch(12, [b"c"]))
    index = tmp_path / "00000000000000000010.index"
    index.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 2, len(first)))
    timeindex = tmp_path / "00000000000000000010.timeindex"
    timeindex.write_bytes(struct.pack(">qi", TS + 1, 1) + struct.pack(">qi", TS, 2))
    txnindex = tmp_path / "00000000000000000010.txnindex"
    txnindex.write_bytes(struct.pack(">hqqqq", 0, 4, 10, 12, 10) + b"\x00\x01")
    entry = ProducerStateEntry(
        4, 0, [BatchMetadata(0, 1, 11, 1, TS)], TS, 3, current_txn_first_offset=10
    )
    snap = snapshot.write(tmp_path, 13, [entry])
    out, err, ok = dump(index, timeindex, txnindex, snap)
    assert ok
    assert "offset: 10 position: 0\noffset: 12 position: " in out
    assert f"timestamp: {TS + 1} offset: 11\ntimestamp: {TS} offset: 12" in out
    assert "version: 0 producerId: 4 firstOffset: 10 lastOffset: 12 lastStableOffset: 10" in out
    assert (
        "producerId: 4 producerEpoch: 0 coordinatorEpoch: 3 "
        f"currentTxnFirstOffset: OptionalLong[10] lastTimestamp: {TS} firstSequence: 0 "
        f"lastSequence: 1 lastOffset: 11 offsetDelta: 1 timestamp: {TS}"
    ) in out
    assert "Found out of order timestamp in :" in err and "Mismatches" not in err
    out, _, ok = dump(index, sanity_only=True)
    assert ok and out.splitlines()[-1] == f"{index} passed sanity check."


def test_bad_indexes_and_snapshots_are_reported(tmp_path: Path) -> None:
    log = tmp_path / "00000000000000000000.log"
    log.write_bytes(batch(0, [b"a"]))
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 0, 0) + struct.pack(">ii", 5, 9999))
    out, err, ok = dump(index, verify_only=True)
    assert ok and "position" not in out
    assert f"Mismatches in :{index}\n  Index offset: 5, log offset: -1" in err
    _, err, ok = dump(index, sanity_only=True)
    assert not ok and "past the log" in err
    snap = tmp_path / "00000000000000000001.snapshot"
    snap.write_bytes(b"OLPS junk")
    _, err, ok = dump(snap)
    assert not ok and err.count("\n") == 1
    _, err, ok = dump(tmp_path / "00000000000000000009.log")
    assert not ok and err.startswith("Error: ")
    out, err, ok = dump(tmp_path / "notes.txt")
    assert ok and out == "" and err == f"Ignoring unknown file {tmp_path / 'notes.txt'}\n"
