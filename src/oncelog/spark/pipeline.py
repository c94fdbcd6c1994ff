"""The averages pipeline on Spark: events → per-key count, sum, average → Kafka or a database.

Seed 004's consume-transform-produce loop as a Structured Streaming query: the `oncelog` source
reads the input topic (read_committed), Spark's stateful processing keeps per-key count and sum
in the RocksDB state store (so restarts and failures recover the state from the checkpoint, not
from the output), and each micro-batch emits the keys it changed, as update mode would (see
`aggregate` for why it is append mode with a state function). Output goes to
the `oncelog` exactly-once Kafka sink, or into a database through `db_sink` (foreachBatch, batch
id stored in the same transaction). Both sinks rely on Spark replaying a batch with the same id
and the same rows after a crash, which holds because the source's offsets per batch are recorded
in the checkpoint and the aggregation is deterministic.

Events: key = Kafka key (UTF-8; "" when null), value = a UTF-8 decimal number (records whose
value does not parse are skipped), event time = the record timestamp. The windowed variant groups
by (tumbling event-time window, key) with a watermark.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Iterator
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
        "spark.ui.showConsoleProgress": "false",
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


OUTPUT_SCHEMA = "key string, count long, sum double, avg double"
WINDOWED_OUTPUT_SCHEMA = (
    "key string, window_start_ms long, window_end_ms long, count long, sum double, avg double"
)
STATE_SCHEMA = "count long, sum double"


def running_average(key: tuple[Any, ...], frames: Iterator[Any], state: Any) -> Iterator[Any]:
    """State function: add this batch's events of one group to its (count, sum), emit the result.

    The group is (key,) or (key, window start ms, window end ms). A window's state is dropped
    once the watermark passes its end (event-time timeout): later events would be late anyway.
    """
    import pandas as pd  # type: ignore[import-untyped, unused-ignore]

    if state.hasTimedOut:
        state.remove()
        return
    count, total = state.get if state.exists else (0, 0.0)
    values: list[float] = []
    for frame in frames:
        values.extend(frame["value"].tolist())
    # fsum is exact, so the batch's sum does not depend on the order the shuffle delivered the
    # rows in: a replayed batch gives the same bytes, which the sink's digest checks.
    count += len(values)
    total += math.fsum(values)
    state.update((count, total))
    row: dict[str, list[Any]] = {"key": [key[0]]}
    if len(key) == 3:
        row["window_start_ms"] = [int(key[1])]
        row["window_end_ms"] = [int(key[2])]
        state.setTimeoutTimestamp(int(key[2]))
    row.update(count=[count], sum=[total], avg=[total / count])
    yield pd.DataFrame(row)


def aggregate(events: Any, window: str | None, watermark: str) -> Any:
    """Per key (and window): running count, sum, avg, in Spark's state store.

    Why `applyInPandasWithState` in append mode and not `groupBy().agg()` in update mode: a
    Python data source sink supports only append and complete (pyspark 4.3's write builder
    has no SupportsStreamingUpdateAsAppend), and complete mode would re-emit every key each
    batch. The state function emits exactly what update mode would: one row per group
    changed in the batch, with its new totals, and keeps (count, sum) in the state store.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    if window is None:
        return events.groupBy("key").applyInPandasWithState(
            running_average,
            OUTPUT_SCHEMA,
            STATE_SCHEMA,
            "append",
            GroupStateTimeout.NoTimeout,
        )
    windowed = (
        events.withWatermark("event_time", watermark)
        .withColumn("w", F.window("event_time", window))
        .select(
            "key",
            "value",
            "event_time",
            F.unix_millis(F.col("w.start")).alias("window_start_ms"),
            F.unix_millis(F.col("w.end")).alias("window_end_ms"),
        )
    )
    return windowed.groupBy("key", "window_start_ms", "window_end_ms").applyInPandasWithState(
        running_average,
        WINDOWED_OUTPUT_SCHEMA,
        STATE_SCHEMA,
        "append",
        GroupStateTimeout.EventTimeTimeout,
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
            .outputMode("append")
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
        results.writeStream.outputMode("append")
        .option("checkpointLocation", cfg.checkpoint)
        .foreachBatch(sink)
    )
    query = _trigger(writer, cfg).queryName(cfg.sink_id).start()
    sink.bind(str(query.id))
    return query
