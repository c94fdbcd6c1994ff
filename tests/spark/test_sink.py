"""The exactly-once Kafka sink against a real broker, in Spark local mode.

Input is Spark's JSON file source (one file per micro-batch), not the oncelog source, so these
tests depend on the sink alone. Output is read back with read_committed and compared exactly.
A driver crash before Spark's commit is simulated by deleting the checkpoint's `commits/N`:
Spark then replays batch N with the same input on restart.

Run as a module (`python -m tests.spark.test_sink ARGS_JSON`) it runs one streaming query in
its own SparkSession: the retry test needs `local[2,4]`, which the shared session is not.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from oncelog.spark.markers import Marker, marker_group
from oncelog.spark.sink import read_seal, transactional_producer
from oncelog.spark.sink_options import SinkOptions
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic
from tests.spark.spark_env import spark_env

FORMAT = "oncelog"
ROOT = Path(__file__).resolve().parents[2]
Rec = tuple[bytes | None, bytes | None]


def write_input(src: Path, index: int, rows: list[dict[str, Any]]) -> None:
    """One JSON file = one micro-batch (maxFilesPerTrigger=1); mtimes fix the batch order."""
    src.mkdir(parents=True, exist_ok=True)
    path = src / f"part-{index:03d}.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stamp = 1_700_000_000 + index
    os.utime(path, (stamp, stamp))


def rows_of(batch: int, n: int) -> list[dict[str, Any]]:
    return [{"key": f"k{i % 7}", "value": f"b{batch}-r{i}"} for i in range(n)]


def expected(*batches: list[dict[str, Any]]) -> Counter[Rec]:
    return Counter((r["key"].encode(), r["value"].encode()) for b in batches for r in b)


def run_stream(spark: Any, src: Path, ckpt: Path, options: dict[str, str]) -> str:
    """Run the query until the available input is written (AvailableNow); return its id."""
    from oncelog.spark.datasource import OncelogDataSource

    spark.dataSource.register(OncelogDataSource)
    df = (
        spark.readStream.schema("key string, value string")
        .option("maxFilesPerTrigger", 1)
        .json(str(src))
        .repartition(2, "key")
    )
    query = (
        df.writeStream.format(FORMAT)
        .options(**options)
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(180)
    finally:
        query.stop()
    return str(query.id)


def read_topic(bootstrap: str, topic: str, committed: bool = True) -> Counter[Rec]:
    """Everything in the topic, read from the start until the end offsets are reached."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed" if committed else "read_uncommitted",
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        tps = [TopicPartition(topic, p, 0) for p in meta.partitions]
        ends = {}
        for tp in tps:
            _low, high = consumer.get_watermark_offsets(tp, timeout=10)
            ends[tp.partition] = high
        consumer.assign(tps)
        out: Counter[Rec] = Counter()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            positions = consumer.position(tps)
            if all(p.offset >= ends[p.partition] or ends[p.partition] == 0 for p in positions):
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error():
                continue
            out[(msg.key(), msg.value())] += 1
        else:
            raise AssertionError(f"did not reach the end offsets {ends} of {topic}")
        return out
    finally:
        consumer.close()


def sink_options(bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap, "topic": topic, **extra}


def drop_commit(ckpt: Path, batch: int) -> None:
    """Simulate a driver crash after the sink wrote `batch` but before Spark committed it."""
    (ckpt / "commits" / str(batch)).unlink()
    (ckpt / "commits" / f".{batch}.crc").unlink(missing_ok=True)


def test_stream_writes_exactly_the_input(spark: Any, broker: BrokerProcess, tmp_path: Path) -> None:
    create_topic(broker.bootstrap, "out", 3)
    batches = [rows_of(b, 40) for b in range(3)]
    for b, rows in enumerate(batches):
        write_input(tmp_path / "in", b, rows)
    opts = sink_options(broker.bootstrap, "out")
    query_id = run_stream(spark, tmp_path / "in", tmp_path / "ckpt", opts)
    assert read_topic(broker.bootstrap, "out") == expected(*batches)
    seal = read_seal(SinkOptions.parse(opts), query_id)
    assert seal is not None and (seal.batch_id, seal.records, seal.skipped) == (2, 40, 0)


@pytest.mark.parametrize("semantics", ["exactly-once", "at-least-once"])
def test_replay_after_driver_crash(
    spark: Any, broker: BrokerProcess, tmp_path: Path, semantics: str
) -> None:
    """Exactly-once skips the replayed batch; the at-least-once contrast duplicates it."""
    create_topic(broker.bootstrap, "out", 2)
    batches = [rows_of(b, 30) for b in range(2)]
    for b, rows in enumerate(batches):
        write_input(tmp_path / "in", b, rows)
    opts = sink_options(broker.bootstrap, "out", semantics=semantics)
    query_id = run_stream(spark, tmp_path / "in", tmp_path / "ckpt", opts)
    assert read_topic(broker.bootstrap, "out") == expected(*batches)

    drop_commit(tmp_path / "ckpt", 1)
    assert run_stream(spark, tmp_path / "in", tmp_path / "ckpt", opts) == query_id
    assert (tmp_path / "ckpt" / "commits" / "1").exists()  # the replay did run

    out = read_topic(broker.bootstrap, "out")
    if semantics == "at-least-once":
        assert out == expected(batches[0], batches[1], batches[1])
        return
    assert out == expected(*batches)
    parsed = SinkOptions.parse(opts)
    seal = read_seal(parsed, query_id)
    assert seal is not None and (seal.batch_id, seal.records, seal.partitions) == (1, 30, 2)
    assert seal.skipped == 2  # both partitions found their marker and skipped
    for partition in range(2):
        marker = read_marker_of(parsed, query_id, partition)
        assert marker is not None and marker.batch_id == 1


def read_marker_of(opts: SinkOptions, query_id: str, partition: int) -> Marker | None:
    from oncelog.spark.sink import group_client, marker_partition, read_marker

    consumer = group_client(opts, marker_group(opts.sink_id, query_id, partition))
    try:
        return read_marker(consumer, marker_partition(opts))
    finally:
        consumer.close()


def test_non_deterministic_replay_fails_loudly(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    create_topic(broker.bootstrap, "out", 2)
    first = rows_of(0, 20)
    write_input(tmp_path / "in", 0, first)
    opts = sink_options(broker.bootstrap, "out")
    run_stream(spark, tmp_path / "in", tmp_path / "ckpt", opts)
    drop_commit(tmp_path / "ckpt", 0)
    write_input(tmp_path / "in", 0, rows_of(9, 20))  # same file, other records
    with pytest.raises(Exception, match="non-deterministic replay of batch 0 partition"):
        run_stream(spark, tmp_path / "in", tmp_path / "ckpt", opts)
    assert read_topic(broker.bootstrap, "out") == expected(first)


def test_failed_task_attempt_is_retried_exactly_once(broker: BrokerProcess, tmp_path: Path) -> None:
    """Attempt 0 of batch 1 partition 0 produces a record, flushes it and dies with its
    transaction open; the retry's init_transactions aborts it. Own session: local[2,4]."""
    create_topic(broker.bootstrap, "out", 2)
    batches = [rows_of(b, 25) for b in range(2)]
    for b, rows in enumerate(batches):
        write_input(tmp_path / "in", b, rows)
    opts = sink_options(broker.bootstrap, "out", **{"oncelog.testing.failTaskAttempt0": "1:0"})
    args = {"src": str(tmp_path / "in"), "ckpt": str(tmp_path / "ckpt"), "options": opts}
    proc = subprocess.run(
        [sys.executable, "-m", "tests.spark.test_sink", json.dumps(args)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **spark_env()},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "injected failure in batch 1 partition 0 attempt 0" in proc.stderr
    assert read_topic(broker.bootstrap, "out") == expected(*batches)
    uncommitted = read_topic(broker.bootstrap, "out", committed=False)
    assert sum(uncommitted.values()) == sum(expected(*batches).values()) + 1  # the aborted one


def test_batch_write_with_topic_partition_headers(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    from oncelog.spark.datasource import OncelogDataSource

    create_topic(broker.bootstrap, "a", 2)
    create_topic(broker.bootstrap, "b", 2)
    spark.dataSource.register(OncelogDataSource)
    rows = [
        ("a" if i % 2 else "b", i % 2, f"k{i}".encode(), f"v{i}", [("h", f"x{i}".encode())])
        for i in range(30)
    ]
    schema = (
        "topic string, partition int, key binary, value string, "
        "headers array<struct<key: string, value: binary>>"
    )
    df = spark.createDataFrame(rows, schema).repartition(3)
    df.write.format(FORMAT).mode("append").options(
        **{"kafka.bootstrap.servers": broker.bootstrap, "sinkId": "batch", "markerTopic": "a"}
    ).save()
    for topic in ("a", "b"):
        want = Counter((r[2], r[3].encode()) for r in rows if r[0] == topic)
        assert read_topic(broker.bootstrap, topic) == want


def test_row_without_topic_fails_the_task(
    spark: Any, broker: BrokerProcess, tmp_path: Path
) -> None:
    from oncelog.spark.datasource import OncelogDataSource

    create_topic(broker.bootstrap, "a", 1)
    spark.dataSource.register(OncelogDataSource)
    df = spark.createDataFrame([("a", "v1"), (None, "v2")], "topic string, value string")
    opts = {"kafka.bootstrap.servers": broker.bootstrap, "sinkId": "s", "markerTopic": "a"}
    with pytest.raises(Exception, match="null topic"):
        df.coalesce(1).write.format(FORMAT).mode("append").options(**opts).save()
    assert read_topic(broker.bootstrap, "a") == Counter()  # the task's transaction aborted


def test_zombie_producer_is_fenced(broker: BrokerProcess) -> None:
    """Two producers with one transactional.id: the older one cannot commit any more."""
    create_topic(broker.bootstrap, "out", 1)
    opts = SinkOptions.parse(sink_options(broker.bootstrap, "out"))
    zombie = transactional_producer(opts, "sink-q-0")
    zombie.begin_transaction()
    zombie.produce("out", b"zombie", b"k")
    zombie.flush(10)
    current = transactional_producer(opts, "sink-q-0")  # fences and aborts the zombie's txn
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(10)
    assert info.value.args[0].fatal() or info.value.args[0].txn_requires_abort()
    current.begin_transaction()
    current.produce("out", b"current", b"k")
    current.commit_transaction(10)
    assert read_topic(broker.bootstrap, "out") == Counter({(b"k", b"current"): 1})
    del zombie, current  # stop their clients before the broker goes


def test_driver_commit_seals_idempotently(
    broker: BrokerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seal sums the tasks' messages; a second commit of the batch (after a restart) is
    harmless. The kill hook SIGKILLs the given pid before sealing (testing only)."""
    from pyspark.sql.types import StringType, StructField, StructType

    from oncelog.spark.markers import Seal
    from oncelog.spark.sink import KafkaStreamWriter, SinkCommitMessage

    create_topic(broker.bootstrap, "out", 1)
    victim = subprocess.Popen(["sleep", "60"])
    opts = sink_options(
        broker.bootstrap, "out", **{"oncelog.testing.killPidInCommit": f"{victim.pid}:3"}
    )
    monkeypatch.setattr("oncelog.spark.sink.time.sleep", lambda _s: None)
    writer = KafkaStreamWriter(opts, StructType([StructField("value", StringType())]), False)
    messages: list[Any] = [
        SinkCommitMessage(p, 3, "q", f"out-q-{p}", 10, "d", p == 1, "exactly-once")
        for p in range(2)
    ]
    writer.commit([*messages, None], 3)
    assert victim.wait(10) == -9
    writer.commit(messages, 3)  # the pid is gone: the hook does nothing
    assert read_seal(SinkOptions.parse(opts), "q") == Seal(3, 2, 20, 1)


def _main() -> None:
    """Subprocess entry: one streaming query on a local[2,4] session (task retries on)."""
    from pyspark.sql import SparkSession

    from tests.spark.conftest import spark_conf

    args = json.loads(sys.argv[1])
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.master("local[2,4]").appName("oncelog-sink-retry")
    for key, value in spark_conf().items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        run_stream(spark, Path(args["src"]), Path(args["ckpt"]), args["options"])
    finally:
        spark.stop()


if __name__ == "__main__":
    _main()
