"""The averages pipeline on Spark: events → per-key count, sum, average → Kafka or a database.

Seed 004's consume-transform-produce loop as a Structured Streaming query: the `oncelog` source
reads the input topic (read_committed), Spark's stateful aggregation keeps per-key count and sum
in the RocksDB state store (so restarts and failures recover the state from the checkpoint, not
from the output), and in update mode each micro-batch emits the keys it changed. Output goes to
the `oncelog` exactly-once Kafka sink, or into a database through `db_sink` (foreachBatch, batch
id stored in the same transaction). Both sinks rely on Spark replaying a batch with the same id
and the same rows after a crash, which holds because the source's offsets per batch are recorded
in the checkpoint and the aggregation is deterministic.

Events: key = Kafka key (UTF-8; "" when null), value = a UTF-8 decimal number (records whose
value does not parse are skipped), event time = the record timestamp. The windowed variant groups
by (tumbling event-time window, key) with a watermark.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
SEMANTICS = ("exactly-once", "at-least-once")
SINKS = ("kafka", "sqlite", "postgresql")


@dataclass(frozen=True)
class PipelineConfig:
    """Everything one averages query needs; the CLI and the benchmark fill it in."""

    bootstrap: str
    input_topic: str
    checkpoint: str
    output_topic: str = "averages"
    sink: str = "kafka"
    db: str | None = None
    window: str | None = None
    watermark: str = "1 minute"
    semantics: str = "exactly-once"
    trigger_interval: str | None = "1 second"
    available_now: bool = False
    max_offsets_per_trigger: int | None = None
    starting_offsets: str = "earliest"
    sink_id: str = "oncelog-averages"
    #: Extra options for the source (e.g. kafka.* client settings).
    source_options: dict[str, str] = field(default_factory=dict)
    #: Extra options for the Kafka sink (testing hooks live here).
    sink_options: dict[str, str] = field(default_factory=dict)
    #: "BATCH:before-commit|after-commit": SIGKILL the driver inside the DB sink (tests).
    db_kill_hook: str | None = None

    def __post_init__(self) -> None:
        if self.semantics not in SEMANTICS:
            raise ValueError(f"semantics must be one of {SEMANTICS}")
        if self.sink not in SINKS:
            raise ValueError(f"sink must be one of {SINKS}")
        if self.sink != "kafka" and not self.db:
            raise ValueError(f"the {self.sink} sink needs a database (db)")


def spark_session(master: str = "local[2]", conf: dict[str, str] | None = None) -> Any:
    """A session with the RocksDB state store; registers the `oncelog` data source."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
        # One query per process; a restart must not wait for its own stale lock.
        "spark.sql.streaming.stopActiveRunOnRestart": "true",
    }
    settings.update(conf or {})
    builder = SparkSession.builder.master(master).appName("oncelog-pipeline")
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def register(spark: Any) -> None:
    import oncelog.spark

    oncelog.spark.register(spark)


def read_events(spark: Any, cfg: PipelineConfig) -> Any:
    """The input topic as (key string, value double, event_time timestamp)."""
    from pyspark.sql import functions as F

    reader = (
        spark.readStream.format("oncelog")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", cfg.input_topic)
        .option("startingOffsets", cfg.starting_offsets)
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for key, value in cfg.source_options.items():
        reader = reader.option(key, value)
    raw = reader.load()
    events = raw.select(
        F.coalesce(F.col("key").cast("string"), F.lit("")).alias("key"),
        # try_cast: with ANSI on (Spark 4's default) a plain cast of "abc" fails the query.
        F.expr("try_cast(cast(value AS STRING) AS DOUBLE)").alias("value"),
        F.col("timestamp").alias("event_time"),
    )
    return events.where(F.col("value").isNotNull())


def aggregate(events: Any, window: str | None, watermark: str) -> Any:
    """Per key (and window): count, sum, avg — window bounds as epoch milliseconds."""
    from pyspark.sql import functions as F

    measures = [
        F.count(F.lit(1)).alias("count"),
        F.sum("value").alias("sum"),
        F.avg("value").alias("avg"),
    ]
    if window is None:
        return events.groupBy("key").agg(*measures)
    grouped = (
        events.withWatermark("event_time", watermark)
        .groupBy(F.window("event_time", window).alias("window"), F.col("key"))
        .agg(*measures)
    )
    return grouped.select(
        "key",
        "count",
        "sum",
        "avg",
        F.unix_millis(F.col("window.start")).alias("window_start_ms"),
        F.unix_millis(F.col("window.end")).alias("window_end_ms"),
    )


def to_records(results: Any) -> Any:
    """Kafka rows: key = the event key, value = the result as JSON."""
    from pyspark.sql import functions as F

    return results.select(
        F.col("key"), F.to_json(F.struct(*[F.col(c) for c in results.columns])).alias("value")
    )


def _trigger(writer: Any, cfg: PipelineConfig) -> Any:
    if cfg.available_now:
        return writer.trigger(availableNow=True)
    if cfg.trigger_interval:
        return writer.trigger(processingTime=cfg.trigger_interval)
    return writer


def start(
    spark: Any,
    cfg: PipelineConfig,
    on_db_batch: Callable[[int, int | None], None] | None = None,
) -> Any:
    """Start the query and return the StreamingQuery (already bound to a DB sink if any)."""
    results = aggregate(read_events(spark, cfg), cfg.window, cfg.watermark)
    if cfg.sink == "kafka":
        writer = (
            to_records(results)
            .writeStream.format("oncelog")
            .outputMode("update")
            .option("checkpointLocation", cfg.checkpoint)
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            .option("topic", cfg.output_topic)
            .option("sinkId", cfg.sink_id)
            .option("semantics", cfg.semantics)
        )
        for key, value in cfg.sink_options.items():
            writer = writer.option(key, value)
        return _trigger(writer, cfg).queryName(cfg.sink_id).start()

    from oncelog.spark.db_sink import DatabaseSink

    assert cfg.db is not None
    sink = DatabaseSink(cfg.db, on_batch=on_db_batch, kill_hook=cfg.db_kill_hook)
    writer = (
        results.writeStream.outputMode("update")
        .option("checkpointLocation", cfg.checkpoint)
        .foreachBatch(sink)
    )
    query = _trigger(writer, cfg).queryName(cfg.sink_id).start()
    sink.bind(str(query.id))
    return query


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` unless it exists (so the one-command demo needs no manual step)."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=10).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(30)
        except Exception as exc:  # a concurrent creator won the race
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
