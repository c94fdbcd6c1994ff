"""`oncelog pipeline averages` (the Spark pipeline) and `oncelog pipeline generate` (its input).

`generate` writes deterministic events so the expected result is computable from the arguments
alone: event i has key `k{i % keys}`, value `(i * 37) % 101` and timestamp `start + i * step`.
With `--transactional` the events go in transactions of `--txn-size`, and every `--abort-every`-th
transaction is aborted, which leaves aborted data and control records in the input topic.

`averages` prints one line per finished batch (`batch N rows R …`) on stdout, and stops cleanly
on SIGTERM/SIGINT or, with `--available-now`, once everything available has been processed.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from typing import Any

from oncelog.spark.pipeline import SEMANTICS, PipelineConfig, ensure_topic, spark_session, start


def add_parsers(sub: Any) -> None:
    pipeline = sub.add_parser("pipeline", help="the Spark averages pipeline and its test input")
    pipeline_sub = pipeline.add_subparsers(dest="action", required=True)

    avg = pipeline_sub.add_parser("averages", help="per-key count/sum/avg, exactly once (Spark)")
    avg.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    avg.add_argument("--input", default="events", help="input topic")
    avg.add_argument("--output", default="averages", help="output topic (Kafka sink)")
    avg.add_argument("--checkpoint", required=True, help="Spark checkpoint directory")
    avg.add_argument("--window", help='tumbling event-time window, e.g. "10 seconds"')
    avg.add_argument("--watermark", default="1 minute", help="watermark delay (with --window)")
    avg.add_argument("--sink", choices=("kafka", "sqlite", "postgresql"), default="kafka")
    avg.add_argument("--db", help="SQLite file, or postgresql:// URL for --sink postgresql")
    avg.add_argument("--semantics", choices=SEMANTICS, default="exactly-once")
    avg.add_argument("--trigger-interval", default="1 second")
    avg.add_argument("--available-now", action="store_true", help="process what is there, exit")
    avg.add_argument("--max-offsets-per-trigger", type=int)
    avg.add_argument("--starting-offsets", default="earliest")
    avg.add_argument("--sink-id", default="oncelog-averages")
    avg.add_argument("--output-partitions", type=int, default=2, help="if the topic is created")
    avg.add_argument("--master", default="local[2]")
    avg.add_argument("--conf", action="append", default=[], help="extra Spark conf KEY=VALUE")
    avg.add_argument("--option", action="append", default=[], help="extra sink option K=V")
    avg.add_argument(
        "--testing-kill-in-commit",
        type=int,
        metavar="BATCH",
        help="tests: the sink's driver commit of BATCH SIGKILLs this driver",
    )
    avg.add_argument(
        "--testing-fail-task",
        metavar="BATCH:PARTITION",
        help="tests: attempt 0 of that sink task raises",
    )
    avg.add_argument(
        "--testing-kill-in-db",
        metavar="BATCH:before-commit|after-commit",
        help="tests: SIGKILL the driver inside / right after the DB transaction",
    )
    avg.set_defaults(func=run_averages)

    gen = pipeline_sub.add_parser("generate", help="produce deterministic test events")
    gen.add_argument("--bootstrap-server", default="127.0.0.1:9092")
    gen.add_argument("--topic", default="events")
    gen.add_argument("--count", type=int, required=True)
    gen.add_argument("--keys", type=int, default=5)
    gen.add_argument("--first", type=int, default=0, help="index of the first event")
    gen.add_argument("--partitions", type=int, default=3, help="if the topic is created")
    gen.add_argument("--start-ms", type=int, help="timestamp of event 0 (default: now)")
    gen.add_argument("--step-ms", type=int, default=10, help="timestamp step between events")
    gen.add_argument("--transactional", action="store_true")
    gen.add_argument("--txn-size", type=int, default=10)
    gen.add_argument("--abort-every", type=int, default=0, help="abort every M-th transaction")
    gen.add_argument("--transactional-id", default="oncelog-pipeline-generate")
    gen.set_defaults(func=run_generate)


def _pairs(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"expected KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def config_of(args: argparse.Namespace) -> PipelineConfig:
    sink_options = _pairs(args.option)
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
    if cfg.sink == "kafka":
        ensure_topic(cfg.bootstrap, cfg.output_topic, args.output_partitions)
    conf = _pairs(args.conf)
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
            query.awaitTermination(0.5)
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


def event_of(i: int, keys: int) -> tuple[str, str]:
    """The deterministic event i: (key, value)."""
    return f"k{i % keys}", str((i * 37) % 101)


def run_generate(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    ensure_topic(args.bootstrap_server, args.topic, args.partitions)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    config: dict[str, Any] = {"bootstrap.servers": args.bootstrap_server, "linger.ms": 5}
    if args.transactional:
        config["transactional.id"] = args.transactional_id
    else:
        config["enable.idempotence"] = True
    producer = Producer(config)
    if args.transactional:
        producer.init_transactions(30)
    committed = aborted = 0
    i = args.first
    txn_no = 0
    end = args.first + args.count
    while i < end:
        batch = range(i, min(end, i + (args.txn_size if args.transactional else 10_000)))
        txn_no += 1
        if args.transactional:
            producer.begin_transaction()
        for j in batch:
            key, value = event_of(j, args.keys)
            producer.produce(
                args.topic, key=key, value=value, timestamp=start_ms + j * args.step_ms
            )
            producer.poll(0)
        if not args.transactional:
            if producer.flush(60) != 0:
                print("generate: undelivered events", file=sys.stderr)
                return 1
            committed += len(batch)
        elif args.abort_every and txn_no % args.abort_every == 0:
            producer.flush(60)  # the aborted data really reaches the log
            producer.abort_transaction(60)
            aborted += len(batch)
        else:
            producer.commit_transaction(60)
            committed += len(batch)
        i = batch.stop
    print(
        f"generated {committed} committed events, {aborted} aborted, "
        f"indices {args.first}..{end - 1}",
        flush=True,
    )
    return 0
