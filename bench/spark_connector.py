"""The Spark connector against Spark's own file formats and plain Python clients, in one run.

One oncelog broker (a real process, fresh data dir) and one SparkSession (local[2] by
default, `spark.sql.shuffle.partitions=2`). N records (100-byte values, K keys) on a P-partition
topic, written by a plain confluent-kafka producer; the same rows written once (untimed) to
Parquet by Spark. Then, --repeat times each (after one unmeasured warm-up of every case), each
figure with its baseline in the same run:

- read, full scan `sum(length(value))` and `groupBy(key)` of `sum(length(value))`: Parquet vs
  `format("oncelog")` with reader=fetch (the default) and reader=consumer (confluent-kafka's
  consumer, the path before the Fetch reader), and a Python data source of the same schema
  that makes its Arrow batches in memory (`connector_floor`: what Spark's Python Data Source
  API costs by itself, the floor under any Python source);
- a plain confluent-kafka consumer reading the topic in Python (read_committed);
- write of the same rows (`key`, `value` from the Parquet copy): Parquet vs
  `write.format("oncelog")` (batch, one transaction per task, exactly-once) vs a plain
  confluent-kafka producer in Python;
- the averages pipeline (`oncelog.spark.pipeline`: running count/sum/avg per key in the state
  store, Trigger.AvailableNow, maxOffsetsPerTrigger M) with the oncelog source and the
  exactly-once oncelog sink, against the same query over Parquet files (maxFilesPerTrigger 1,
  files of M events) into a Parquet file sink.

Reported per case: the median of the runs in records/s and its ratio to the baseline.
`--only`/`--skip` choose cases by substring (`--skip reader=consumer` for a tree whose source
has no `reader` option).
Usage: `.venv/bin/python bench/spark_connector.py [--records 1000000] [--repeat 3] [--json F]`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))

from bench.pipeline import cpu_model  # noqa: E402
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from tests.broker_process import BrokerProcess  # noqa: E402

from oncelog.cli.main import main as oncelog_main  # noqa: E402
from oncelog.cli.pipeline import ensure_topic  # noqa: E402
from oncelog.spark.pipeline import (  # noqa: E402
    PipelineConfig,
    aggregate,
    spark_session,
    start,
    to_records,
)


def produce_plain(bootstrap: str, topic: str, n: int, keys: int, size: int) -> float:
    """A plain confluent-kafka producer in Python: n records, flushed; seconds."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    pad = b"x" * size
    key_names = [f"key-{k:04d}".encode() for k in range(keys)]
    began = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(n):
        value = (b"%010d" % i + pad)[:size]
        while True:
            try:
                produce(topic, value, key_names[i % keys])
                break
            except BufferError:
                poll(0.05)
    if producer.flush(120):
        raise RuntimeError("records left unflushed")
    return time.perf_counter() - began


def consume_plain(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    """A plain confluent-kafka consumer in Python, read_committed, touching every value."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    began = time.perf_counter()
    seen = total = 0
    while seen < n:
        for m in consumer.consume(num_messages=10_000, timeout=1.0):
            if m.error() is None:
                seen += 1
                total += len(m.value() or b"")
    elapsed = time.perf_counter() - began
    consumer.close()
    return elapsed


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    began = time.perf_counter()
    out = action()
    return time.perf_counter() - began, out


def events_of(raw: Any) -> Any:
    """`pipeline.read_events`' projection, for a raw frame of the source's columns."""
    from pyspark.sql import functions as F

    events = raw.select(
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key"),
        F.expr("try_cast(cast(value AS STRING) AS DOUBLE)").alias("value"),
        F.col("timestamp").alias("event_time"),
    )
    return events.where(F.col("value").isNotNull())


def floor_source(records: int, partitions: int, keys: int, size: int) -> type:
    """A Python data source with the oncelog source's schema that makes its Arrow batches in
    memory (no I/O): what any Python data source costs in Spark, the floor under ours."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from oncelog.spark.kafka_read import source_schema

    class FloorReader(DataSourceReader):
        def __init__(self, schema: Any) -> None:
            self.schema = schema

        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(partitions)]

        def read(self, partition: InputPartition) -> Any:
            import pyarrow as pa
            from pyspark.sql.pandas.types import to_arrow_schema

            schema = to_arrow_schema(self.schema, timezone="UTC")
            n = 65536
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array([b"key-%04d" % (i % keys) for i in range(n)], pa.binary()),
                    pa.array([b"v" * size] * n, pa.binary()),
                    pa.repeat(pa.scalar("records"), n),
                    pa.repeat(pa.scalar(partition.value, pa.int32()), n),  # type: ignore[attr-defined]
                    pa.array(range(n), pa.int64()),
                    pa.array([0] * n, schema.field("timestamp").type),
                    pa.repeat(pa.scalar(0, pa.int32()), n),
                ],
                schema=schema,
            )
            left = records // partitions
            while left > 0:
                yield batch.slice(0, min(n, left))
                left -= n

    class FloorSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "connector_floor"

        def schema(self) -> Any:
            return source_schema(False)

        def reader(self, schema: Any) -> DataSourceReader:
            return FloorReader(schema)

    return FloorSource


class Bench:
    def __init__(self, args: argparse.Namespace, work: Path, bootstrap: str, spark: Any):
        self.args = args
        self.work = work
        self.bootstrap = bootstrap
        self.spark = spark
        self.topic = "records"
        self.parquet = str(work / "records.parquet")
        self.events_parquet = work / "events-parquet"

    def oncelog(self, **options: str) -> Any:
        reader = (
            self.spark.read.format("oncelog")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", self.topic)
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    def setup(self) -> None:
        a = self.args
        ensure_topic(self.bootstrap, self.topic, a.partitions)
        produce_plain(self.bootstrap, self.topic, a.records, a.keys, a.value_bytes)
        self.oncelog().select("key", "value").write.parquet(self.parquet)
        gen = [
            "pipeline", "generate", "--bootstrap-server", self.bootstrap, "--topic", "events",
            "--count", str(a.events), "--keys", str(a.event_keys), "--partitions", "3",
        ]  # fmt: skip
        if oncelog_main(gen) != 0:
            raise RuntimeError("generate failed")
        files = max(1, a.events // a.max_offsets_per_trigger)
        (
            self.spark.read.format("oncelog")
            .option("kafka.bootstrap.servers", self.bootstrap)
            .option("subscribe", "events")
            .load()
            .select("key", "value", "timestamp")
            .repartition(files)
            .write.parquet(str(self.events_parquet))
        )

    # -- cases: each returns seconds for its records -------------------------------------------

    def scan(self, df: Any) -> float:
        from pyspark.sql import functions as F

        seconds, rows = timed(lambda: df.select(F.sum(F.length("value"))).collect())
        if rows[0][0] != self.args.records * self.args.value_bytes:
            raise RuntimeError(f"scan summed {rows[0][0]}")
        return seconds

    def group(self, df: Any) -> float:
        from pyspark.sql import functions as F

        seconds, rows = timed(
            lambda: df.groupBy("key").agg(F.sum(F.length("value")).alias("n")).collect()
        )
        if len(rows) != self.args.keys:
            raise RuntimeError(f"groupBy gave {len(rows)} keys")
        return seconds

    def cases(self) -> dict[str, Callable[[], float]]:
        a = self.args
        spark = self.spark

        def parquet_write() -> float:
            out = str(self.work / f"out-{uuid.uuid4().hex}.parquet")
            df = spark.read.parquet(self.parquet).select("key", "value")
            seconds, _ = timed(lambda: df.write.parquet(out))
            shutil.rmtree(out, ignore_errors=True)
            return seconds

        def oncelog_write() -> float:
            topic = f"sink-{uuid.uuid4().hex[:8]}"
            ensure_topic(self.bootstrap, topic, a.partitions)
            df = spark.read.parquet(self.parquet).select("key", "value")
            seconds, _ = timed(
                lambda: (
                    df.write.format("oncelog")
                    .option("kafka.bootstrap.servers", self.bootstrap)
                    .option("topic", topic)
                    .mode("append")
                    .save()
                )
            )
            written = (
                spark.read.format("oncelog")
                .option("kafka.bootstrap.servers", self.bootstrap)
                .option("subscribe", topic)
                .load()
                .count()
            )
            if written != a.records:
                raise RuntimeError(f"the sink wrote {written} records, not {a.records}")
            return seconds

        def producer() -> float:
            topic = f"plain-{uuid.uuid4().hex[:8]}"
            ensure_topic(self.bootstrap, topic, a.partitions)
            return produce_plain(self.bootstrap, topic, a.records, a.keys, a.value_bytes)

        return {
            "read scan: parquet": lambda: self.scan(spark.read.parquet(self.parquet)),
            "read scan: oncelog": lambda: self.scan(self.oncelog()),
            "read scan: Python data source floor": lambda: self.scan(
                spark.read.format("connector_floor").load()
            ),
            "read scan: oncelog reader=consumer": lambda: self.scan(
                self.oncelog(reader="consumer")
            ),
            "read groupBy: parquet": lambda: self.group(spark.read.parquet(self.parquet)),
            "read groupBy: oncelog": lambda: self.group(self.oncelog()),
            "read groupBy: Python data source floor": lambda: self.group(
                spark.read.format("connector_floor").load()
            ),
            "read groupBy: oncelog reader=consumer": lambda: self.group(
                self.oncelog(reader="consumer")
            ),
            "read: confluent-kafka consumer": lambda: consume_plain(
                self.bootstrap, self.topic, a.partitions, a.records
            ),
            "write: parquet": parquet_write,
            "write: oncelog (exactly-once)": oncelog_write,
            "write: confluent-kafka producer": producer,
        }

    def pipeline_oncelog(self) -> float:
        tag = uuid.uuid4().hex[:8]
        output = f"averages-{tag}"
        ensure_topic(self.bootstrap, output, 2)
        cfg = PipelineConfig(
            bootstrap=self.bootstrap,
            input_topic="events",
            output_topic=output,
            checkpoint=str(self.work / f"ck-{tag}"),
            semantics="exactly-once",
            available_now=True,
            max_offsets_per_trigger=self.args.max_offsets_per_trigger,
            sink_id=f"bench-{tag}",
        )
        seconds, _query = timed(lambda: self._await(start(self.spark, cfg)))
        return seconds

    def pipeline_files(self) -> float:
        tag = uuid.uuid4().hex[:8]
        raw = (
            self.spark.readStream.schema("key binary, value binary, timestamp timestamp")
            .option("maxFilesPerTrigger", 1)
            .parquet(str(self.events_parquet))
        )

        def query() -> Any:
            return (
                to_records(aggregate(events_of(raw), None, "0 seconds"))
                .writeStream.format("parquet")
                .outputMode("append")
                .option("checkpointLocation", str(self.work / f"ckf-{tag}"))
                .option("path", str(self.work / f"outf-{tag}"))
                .trigger(availableNow=True)
                .start()
            )

        seconds, _ = timed(lambda: self._await(query()))
        return seconds

    def _await(self, query: Any) -> Any:
        query.awaitTermination(self.args.timeout)
        if query.isActive:
            query.stop()
            raise RuntimeError("a pipeline run did not finish")
        if query.exception() is not None:
            raise RuntimeError(f"a pipeline run failed: {query.exception()}")
        rows = sum(p.numInputRows for p in query.recentProgress)
        if rows != self.args.events:
            raise RuntimeError(f"a pipeline run read {rows} rows, not {self.args.events}")
        return query


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=1000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--event-keys", type=int, default=100)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--only", help="comma-separated substrings of the cases to run")
    parser.add_argument("--skip", help="comma-separated substrings of cases to leave out")
    parser.add_argument("--json", help="write the runs here")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-spark-connector-"))
    broker = BrokerProcess(
        work / "data",
        {"transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4"},
    ).start()
    spark = None
    try:
        spark = spark_session(args.master)
        spark.dataSource.register(
            floor_source(args.records, args.partitions, args.keys, args.value_bytes)
        )
        bench = Bench(args, work, broker.bootstrap, spark)
        bench.setup()
        cases = bench.cases()
        pipeline = {
            "pipeline: parquet files": bench.pipeline_files,
            "pipeline: oncelog source + sink (exactly-once)": bench.pipeline_oncelog,
        }
        wanted = [s.strip() for s in (args.only or "").split(",") if s.strip()]
        chosen = {
            name: fn
            for name, fn in {**cases, **pipeline}.items()
            if (not wanted or any(w in name for w in wanted))
            and not any(w.strip() and w.strip() in name for w in (args.skip or "").split(","))
        }
        for name, fn in chosen.items():
            fn()  # warm-up
            print(f"warm-up {name}", flush=True)
        runs: dict[str, list[float]] = {name: [] for name in chosen}
        for i in range(args.repeat):
            for name, fn in chosen.items():
                seconds = fn()
                runs[name].append(seconds)
                print(f"run {i} {name}: {seconds:.2f} s", flush=True)
        summary = report(args, runs)
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.kill()
        shutil.rmtree(work, ignore_errors=True)


#: case -> its baseline (the figure the target compares it with)
BASELINES = {
    "read scan: oncelog": "read scan: parquet",
    "read scan: oncelog reader=consumer": "read scan: parquet",
    "read scan: Python data source floor": "read scan: parquet",
    "read groupBy: Python data source floor": "read groupBy: parquet",
    "read groupBy: oncelog": "read groupBy: parquet",
    "read groupBy: oncelog reader=consumer": "read groupBy: parquet",
    "read: confluent-kafka consumer": "read scan: parquet",
    "write: oncelog (exactly-once)": "write: parquet",
    "write: confluent-kafka producer": "write: parquet",
    "pipeline: oncelog source + sink (exactly-once)": "pipeline: parquet files",
}


def report(args: argparse.Namespace, runs: dict[str, list[float]]) -> dict[str, Any]:
    rev = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    rate: dict[str, float] = {}
    for name, seconds in runs.items():
        n = args.events if name.startswith("pipeline") else args.records
        rate[name] = n / statistics.median(seconds)
    print(f"\n| case | records/s (median of {args.repeat}) | vs baseline | runs (s) |")
    print("|---|---:|---:|---|")
    for name, r in rate.items():
        base = BASELINES.get(name)
        ratio = f"{r / rate[base]:.2f}x {base.split(': ')[1]}" if base in rate else "baseline"
        spread = " ".join(f"{s:.2f}" for s in runs[name])
        print(f"| {name} | {r:,.0f} | {ratio} | {spread} |")
    print(
        f"\nmachine: nproc={os.cpu_count()}, {cpu_model()}, {args.master}, rev {rev}; "
        f"{args.records:,} records of {args.value_bytes} B, {args.keys} keys, "
        f"{args.partitions} partitions; pipeline {args.events:,} events, "
        f"maxOffsetsPerTrigger {args.max_offsets_per_trigger:,}"
    )
    return {"rev": rev, "args": vars(args), "runs": runs, "records_per_s": rate}


if __name__ == "__main__":
    raise SystemExit(main())
