"""`oncelog pipeline averages` once PySpark is known to be installed: arguments → query → lines.

`oncelog.cli.pipeline` parses the command line and imports this module only when the `[spark]`
extra is there, so the base install runs every other command; the import-linter contract
"Spark, Arrow and pandas only in oncelog.spark" allows that one lazy import and no other.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

from pyspark.errors import StreamingQueryException

from oncelog.spark.pipeline import PipelineConfig, spark_session, start


def pairs(items: list[str]) -> dict[str, str]:
    """KEY=VALUE arguments as a dict; a malformed one ends the command with one line."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def config_of(args: argparse.Namespace) -> PipelineConfig:
    """The query's settings from `oncelog pipeline averages` arguments."""
    sink_options = pairs(args.option)
    if args.testing_kill_in_commit is not None:
        sink_options["oncelog.testing.killPidInCommit"] = (
            f"{os.getpid()}:{args.testing_kill_in_commit}"
        )
    if args.testing_fail_task:
        sink_options["oncelog.testing.failTaskAttempt0"] = args.testing_fail_task
    return PipelineConfig(
        bootstrap=args.bootstrap_server,
        input_topic=args.input,
        output_topic=args.output,
        checkpoint=args.checkpoint,
        sink=args.sink,
        db=args.db,
        window=args.window,
        watermark=args.watermark,
        semantics=args.semantics,
        trigger_interval=args.trigger_interval,
        available_now=args.available_now,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        starting_offsets=args.starting_offsets,
        sink_id=args.sink_id,
        sink_options=sink_options,
        db_kill_hook=args.testing_kill_in_db,
    )


def _say(line: str) -> None:
    print(line, flush=True)


class ProgressPrinter:
    """Prints one line per finished micro-batch from the query's recent progress.

    Polled from the main loop rather than a StreamingQueryListener: listener events arrive
    asynchronously and may come after the query has ended, so the last lines could be lost.
    """

    def __init__(self) -> None:
        self.last = -1

    def __call__(self, query: Any) -> None:
        for p in query.recentProgress:
            if p.batchId > self.last:
                self.last = p.batchId
                _say(f"batch {p.batchId} rows {p.numInputRows} ms {p.batchDuration}")


def run_averages(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT, or to the end with --available-now; 1 if the query failed."""
    cfg = config_of(args)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    conf = pairs(args.conf)
    spark = spark_session(args.master, conf)
    try:
        progress = ProgressPrinter()

        def on_db_batch(batch_id: int, written: int | None) -> None:
            if written is None:
                _say(f"batch {batch_id} skipped (already in the database)")
            else:
                _say(f"batch {batch_id} rows {written} written")

        query = start(spark, cfg, on_db_batch)
        _say(
            f"pipeline running: {cfg.input_topic} -> "
            f"{cfg.output_topic if cfg.sink == 'kafka' else cfg.db} ({cfg.semantics})"
        )
        while query.isActive and not stop.is_set():
            try:
                query.awaitTermination(0.5)
            except StreamingQueryException:
                break  # the query failed: reported below, in one line, from query.exception()
            if cfg.sink == "kafka":  # the database sink prints its own lines
                progress(query)
        if stop.is_set() and query.isActive:
            _say("stopping")
            query.stop()
        if cfg.sink == "kafka":
            progress(query)
        error = query.exception()
        if error is not None:
            print(f"query failed: {error}", file=sys.stderr, flush=True)
            return 1
        _say("pipeline stopped")
        return 0
    finally:
        spark.stop()
