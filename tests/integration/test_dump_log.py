"""`oncelog dump-log` on what the real broker wrote for confluent-kafka's transactions and
group commits: markers, the aborted-transaction index, the producer snapshot and both
internal topics read back as Kafka's tool prints them."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

OVERRIDES = {
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.num.partitions": "1",
}


def dump_log(*args: str) -> tuple[int, str, str]:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", "dump-log", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout, result.stderr


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A stopped broker's data dir after one committed and one aborted transaction on
    `events` and a group's commit of offset 3."""
    data = tmp_path_factory.mktemp("dump") / "data"
    proc = BrokerProcess(data, OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for future in admin.create_topics([NewTopic("events", 1, 1)]).values():
            future.result(10)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "transactional.id": "dumped"})
        producer.init_transactions(10)
        producer.begin_transaction()
        for i in range(3):
            producer.produce("events", f"kept-{i}".encode(), key=b"k", partition=0)
        producer.commit_transaction(10)
        producer.begin_transaction()
        for i in range(2):
            producer.produce("events", f"dropped-{i}".encode(), partition=0)
        assert producer.flush(10) == 0  # written before the abort: the log holds them
        producer.abort_transaction(10)
        del producer
        consumer = Consumer({"bootstrap.servers": proc.bootstrap, "group.id": "readers"})
        consumer.commit(offsets=[TopicPartition("events", 0, 3)], asynchronous=False)
        consumer.close()
        assert proc.stop() == 0  # a clean stop writes the producer snapshot
        yield data
    finally:
        proc.kill()


def records(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| ")]


def batches(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("baseOffset: ")]


def test_the_segment_shows_both_transactions_and_their_markers(written: Path) -> None:
    code, out, err = dump_log("--files", str(written / "events-0" / f"{0:020d}.log"))
    assert code == 0 and err == ""
    shown = batches(out)
    assert len(shown) == 4, out
    assert all("isTransactional: true" in line for line in shown)
    assert ["isControl: true" in line for line in shown] == [False, True, False, True]
    producer_ids = {line.split("producerId: ")[1].split()[0] for line in shown}
    assert len(producer_ids) == 1 and int(producer_ids.pop()) >= 0
    assert "baseSequence: 0 lastSequence: 2" in shown[0]
    assert "baseSequence: 3 lastSequence: 4" in shown[2]

    code, out, _ = dump_log(
        "--files", str(written / "events-0" / f"{0:020d}.log"), "--print-data-log"
    )
    lines = records(out)
    assert [line.split("payload: ")[-1] for line in lines if "payload" in line] == [
        "kept-0",
        "kept-1",
        "kept-2",
        "dropped-0",
        "dropped-1",
    ]
    assert lines[3].startswith("| offset: 3 ") and "endTxnMarker: COMMIT" in lines[3]
    assert lines[6].startswith("| offset: 6 ") and "endTxnMarker: ABORT" in lines[6]


def test_the_aborted_transaction_index_and_the_snapshot(written: Path) -> None:
    partition = written / "events-0"
    snapshots = sorted(partition.glob("*.snapshot"))
    assert snapshots, sorted(p.name for p in partition.iterdir())
    files = ",".join(str(p) for p in [partition / f"{0:020d}.txnindex", snapshots[-1]])
    code, out, err = dump_log("--files", files)
    assert code == 0 and err == ""
    # Kafka's lastStableOffset of an abort with no other open transaction: past its marker
    assert "firstOffset: 4 lastOffset: 6 lastStableOffset: 7" in out
    entries = [line for line in out.splitlines() if line.startswith("producerId: ")]
    assert len(entries) == 1
    assert "producerEpoch: 0" in entries[0]
    assert "currentTxnFirstOffset: OptionalLong.empty" in entries[0]  # both ended
    # the oldest of the producer's cached batches, as Kafka's tool prints
    assert "firstSequence: 0 lastSequence: 2 lastOffset: 2" in entries[0]


def test_the_transaction_log_decoder_shows_the_two_phase_commit(written: Path) -> None:
    log = written / "__transaction_state-0" / f"{0:020d}.log"
    code, out, _ = dump_log("--files", str(log), "--transaction-log-decoder")
    assert code == 0
    lines = records(out)
    assert all("key: transaction_metadata::transactionalId=dumped" in line for line in lines)
    states = [line.split("state=")[1].split(",")[0] for line in lines]
    assert states == [
        "Empty",
        "Ongoing",
        "PrepareCommit",
        "CompleteCommit",
        "Ongoing",
        "PrepareAbort",
        "CompleteAbort",
    ]
    assert any("state=PrepareAbort,partitions=[events-0]" in line for line in lines)


def test_the_offsets_decoder_shows_the_group_commit(written: Path) -> None:
    log = written / "__consumer_offsets-0" / f"{0:020d}.log"
    code, out, _ = dump_log("--files", str(log), "--offsets-decoder")
    assert code == 0
    assert (
        'key: {"type":"1","data":{"group":"readers","topic":"events","partition":0}} '
        'payload: {"version":"3","data":{"offset":3,'
    ) in out


def test_a_missing_file_is_one_line(written: Path) -> None:
    code, out, err = dump_log("--files", str(written / "events-0" / f"{99:020d}.log"))
    assert code == 1 and out == ""
    assert err.startswith("Error: ") and err.count("\n") == 1
    code, _, err = dump_log(
        "--files", str(written / "events-0" / f"{0:020d}.log"), "--max-bytes", "0"
    )
    assert code == 2 and err.count("\n") == 1


def test_kafkas_other_options_are_taken_or_refused_in_one_line(written: Path) -> None:
    log = str(written / "events-0" / f"{0:020d}.log")
    code, out, _ = dump_log("--files", log, "--print-data-log", "--max-message-size", "1000",
                            "--value-decoder-class", "kafka.serializer.StringDecoder")  # fmt: skip
    assert code == 0 and "payload: kept-0" in out
    code, _, err = dump_log("--files", log, "--value-decoder-class", "com.example.Avro")
    assert code == 2 and err.count("\n") == 1 and "StringDecoder" in err
    code, _, err = dump_log("--files", log, "--cluster-metadata-decoder")
    assert code == 2 and err.count("\n") == 1 and "etcd" in err
    # A partial read (--max-bytes) does not call the rest of the segment invalid, as Kafka.
    code, out, _ = dump_log("--files", log, "--max-bytes", "200")
    assert code == 0 and "invalid bytes" not in out and 1 <= out.count("baseOffset: ") < 4
