"""`oncelog pipeline averages` once PySpark is known to be installed: arguments → query → lines.

`oncelog.cli.pipeline` parses the command line and imports this module only when the `[spark]`
extra is there, so the base install runs every other command; the import-linter contract
"Spark, Arrow and pandas only in oncelog.spark" allows that one lazy import and no other.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
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


class Stop:
    """SIGTERM/SIGINT ask the pipeline to stop: the handler only records the signal, and the
    main loop stops the query between its Py4J calls. (PySpark's own SIGINT handler cancels
    every job through Py4J from inside the handler, in the middle of the main thread's Py4J
    call, and raises KeyboardInterrupt: the `reentrant call` and Py4JNetworkError tracebacks.
    `run_averages` therefore creates the SparkContext off the main thread, where PySpark
    installs no handler.)"""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.name = ""
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        self.name = self.name or signal.Signals(signum).name
        self.event.set()

    def is_set(self) -> bool:
        return self.event.is_set()


def _off_main_thread(make: Callable[[], Any]) -> Any:
    """`make()` run in a thread (see Stop); its exception, if any, raised here."""
    result: list[Any] = []
    error: list[BaseException] = []

    def target() -> None:
        try:
            result.append(make())
        except BaseException as exc:
            error.append(exc)

    thread = threading.Thread(target=target, name="spark-session", daemon=True)
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return result[0]


def run_averages(args: argparse.Namespace) -> int:
    """Run until SIGTERM/SIGINT, or to the end with --available-now; 1 if the query failed.

    A signal stops the query cleanly (the batch in progress ends or is abandoned, as Spark's
    `stop()` does; the checkpoint keeps its place) and prints one line, once Spark has
    stopped (so it is the command's last line)."""
    cfg = config_of(args)
    stop = Stop()
    conf = pairs(args.conf)
    spark = _off_main_thread(lambda: spark_session(args.master, conf))
    # The JVM's active session is per thread: the query's data sources are looked up in the
    # main thread's, as when the session is made there.
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    try:
        status, last = _run(spark, cfg, stop)
    finally:
        spark.stop()
    if status == 0:
        _say(last)
    else:
        print(last, file=sys.stderr, flush=True)
    return status


def _run(spark: Any, cfg: PipelineConfig, stop: Stop) -> tuple[int, str]:
    """The query until its end or a signal: the exit status and the line to end with."""
    if stop.is_set():
        return 0, f"pipeline stopped by {stop.name} before it started"
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
    stopped_by = stop.name if stop.is_set() and query.isActive else ""
    if stopped_by:
        # Stopping aborts the batch in flight, which is harmless (the sink's replay skips what
        # it committed) and expected here: not worth Spark's ERROR lines or the sink's warning.
        spark.sparkContext.setLogLevel("OFF")
        logging.getLogger("oncelog.spark").setLevel(logging.ERROR)
        query.stop()
    if cfg.sink == "kafka":
        progress(query)
    error = None if stopped_by else query.exception()
    if error is not None:
        return 1, f"query failed: {error}"
    return 0, f"pipeline stopped by {stopped_by}" if stopped_by else "pipeline stopped"
