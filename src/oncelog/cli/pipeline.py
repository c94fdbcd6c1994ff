"""`oncelog pipeline averages` (the Spark pipeline) and `oncelog pipeline generate` (its input).

`generate` writes deterministic events so the expected result is computable from the arguments
alone: event i has key `k{i % keys}`, value `(i * 37) % 101`, timestamp `start + i * step` and
the header `oncelog.index` = i. With `--transactional` the events go in transactions of
`--txn-size`, and every `--abort-every`-th transaction is aborted, which leaves aborted data and
control records in the input topic. With `--skip-existing` it first reads the topic
(read_committed) and writes only the indices of its range that are not there yet, so a run
repeated after a kill completes its input instead of writing it twice.

`averages` prints one line per finished batch (`batch N rows R …`) on stdout, and stops cleanly
on SIGTERM/SIGINT (one line, `pipeline stopped by SIGINT`) or, with `--available-now`, once
everything available has been processed.

`check-topics` reads the input and output topics and refuses (one line, exit 1) records other
than `generate`'s events and `averages`' results, so `scripts/run-pipeline` never prints results
mixed with another example's records.

This module imports no Spark: the base install (without the `[spark]` extra) runs every other
command and `generate`, which needs only confluent-kafka. `averages` checks that PySpark, pyarrow
and pandas import, then runs `oncelog.spark.command` (import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from oncelog.cli.console import BootstrapServers, describe_error, fail

#: `oncelog.spark.pipeline.SEMANTICS`, repeated here so building the parser needs no Spark.
SEMANTICS = ("exactly-once", "at-least-once")
#: What `averages` needs beyond the base install (the `[spark]` extra).
SPARK_MODULES = ("pyspark", "pyarrow", "pandas")
#: Header carrying an event's index, which makes `generate --skip-existing` idempotent.
INDEX_HEADER = "oncelog.index"
SPARK_HINT = (
    "oncelog pipeline averages needs PySpark ({missing} is not installed): "
    "pip install 'oncelog[spark]', and Java 17+ to run Spark"
)
JAVA_HINT = (
    "oncelog pipeline averages needs Java 17+ to run Spark: {problem} "
    "(install a JDK, e.g. Debian's openjdk-17-jre-headless, or set JAVA_HOME)"
)
MIN_JAVA = 17


def add_parsers(sub: Any) -> None:
    pipeline = sub.add_parser("pipeline", help="the Spark averages pipeline and its test input")
    pipeline_sub = pipeline.add_subparsers(dest="action", required=True)

    avg = pipeline_sub.add_parser(
        "averages", help="per-key count/sum/avg, exactly once (needs oncelog[spark], Java 17+)"
    )
    avg.add_argument("--bootstrap-server", default="127.0.0.1:9092", action=BootstrapServers)
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

    chk = pipeline_sub.add_parser(
        "check-topics",
        help="check that the topics hold only the pipeline's own records",
        description="Reads --input (every record must be one `generate` wrote: its "
        "oncelog.index header, key k<N>, its value) and --output (every record a result of "
        "`averages`: JSON with the record's key, count, sum and avg), read_committed, and "
        "exits 1 with one line naming the first foreign record. A missing topic is fine.",
    )
    chk.add_argument("--bootstrap-server", default="127.0.0.1:9092", action=BootstrapServers)
    chk.add_argument("--input", help="the events topic")
    chk.add_argument("--output", help="the results topic (Kafka sink)")
    chk.set_defaults(func=run_check_topics)

    gen = pipeline_sub.add_parser("generate", help="produce deterministic test events")
    gen.add_argument("--bootstrap-server", default="127.0.0.1:9092", action=BootstrapServers)
    gen.add_argument("--topic", default="events")
    gen.add_argument("--count", type=int, required=True)
    gen.add_argument("--keys", type=int, default=5)
    gen.add_argument("--first", type=int, default=0, help="index of the first event")
    gen.add_argument(
        "--skip-existing",
        action="store_true",
        help="write only the indices of the range not yet in the topic (read_committed)",
    )
    gen.add_argument("--partitions", type=int, default=3, help="if the topic is created")
    gen.add_argument("--start-ms", type=int, help="timestamp of event 0 (default: now)")
    gen.add_argument("--step-ms", type=int, default=10, help="timestamp step between events")
    gen.add_argument("--transactional", action="store_true")
    gen.add_argument("--txn-size", type=int, default=10)
    gen.add_argument("--abort-every", type=int, default=0, help="abort every M-th transaction")
    gen.add_argument("--transactional-id", default="oncelog-pipeline-generate")
    gen.set_defaults(func=run_generate)


def missing_spark_module() -> str | None:
    """The first module of the `[spark]` extra that does not import, or None."""
    for name in SPARK_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def java_problem() -> str | None:
    """Why Spark's JVM would not start here (no java, or older than 17), or None.

    Spark finds java as `$JAVA_HOME/bin/java`, else on PATH; without this check a missing JVM
    ends in a page of py4j errors.
    """
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not Path(java).exists():
        return f"no java at {java}" if java else "no java on PATH and JAVA_HOME is not set"
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError as exc:
        return f"{java} does not run ({exc.strerror})"
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if match is None:
        return None  # an unusual version line: let Spark try
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    return None if major >= MIN_JAVA else f"{java} is Java {major}"


def run_averages(args: argparse.Namespace) -> int:
    """Run the Spark job; without the `[spark]` extra, one line saying what to install (2)."""
    missing = missing_spark_module()
    if missing is not None:
        print(SPARK_HINT.format(missing=missing), file=sys.stderr)
        return 2
    problem = java_problem()
    if problem is not None:
        print(JAVA_HINT.format(problem=problem), file=sys.stderr)
        return 2
    if args.sink == "kafka":
        ensure_topic(args.bootstrap_server, args.output, args.output_partitions)
    from oncelog.spark import command  # the one import of Spark code from the CLI, lazy

    return command.run_averages(args)


def ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create `topic` unless it exists (so the one-command demo needs no manual step).

    Asks CreateTopics directly: a metadata lookup of a missing topic may auto-create it with
    the broker's default partition count.
    """
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        try:
            future.result(30)
        except Exception as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc) and "already exists" not in str(exc):
                raise


def event_of(i: int, keys: int) -> tuple[str, str]:
    """The deterministic event i: (key, value)."""
    return f"k{i % keys}", str((i * 37) % 101)


def committed_records(bootstrap: str, topic: str, group: str) -> Iterator[Any]:
    """Every record of `topic`, read_committed, each partition from its start to its end
    (the LSO); nothing if there is no such topic (none is auto-created). Exits with one line
    if the topic cannot be read to its end in 300 s."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "log_level": 0,  # errors reach us as exceptions, not librdkafka's raw lines
            "group.id": group,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    try:
        topics = consumer.list_topics(timeout=30).topics  # all topics: none is auto-created
        if topic not in topics:
            return
        partitions = sorted(topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        pending = set(partitions)
        deadline = time.monotonic() + 300
        while pending:
            if time.monotonic() > deadline:
                raise SystemExit(f"Error: could not read topic {topic} to its end in 300 s")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(msg.partition())
                    continue
                raise SystemExit(f"Error: reading {topic}: {describe_error(error)}")
            yield msg
    finally:
        consumer.close()


def headers_of(msg: Any) -> dict[str, bytes]:
    """A consumed record's headers by name (a consumer gets a list of (name, bytes) pairs)."""
    raw = msg.headers() or []
    return {
        name: value if isinstance(value, bytes) else (value or "").encode()
        for name, value in (raw.items() if isinstance(raw, dict) else raw)
    }


def existing_indices(bootstrap: str, topic: str, first: int, end: int) -> set[int]:
    """The event indices in [first, end) that `topic` already holds, read_committed.

    Records without an `oncelog.index` header (written before the header existed) count as
    nothing.
    """
    found: set[int] = set()
    for msg in committed_records(bootstrap, topic, "oncelog-pipeline-generate"):
        value = headers_of(msg).get(INDEX_HEADER)
        if value:
            index = int(value)
            if first <= index < end:
                found.add(index)
    return found


def run_generate(args: argparse.Namespace) -> int:
    from confluent_kafka import Producer

    ensure_topic(args.bootstrap_server, args.topic, args.partitions)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "linger.ms": 5,
        "log_level": 0,  # failures reach us as delivery reports and exceptions
    }
    if args.transactional:
        config["transactional.id"] = args.transactional_id
    else:
        config["enable.idempotence"] = True
    producer = Producer(config)
    if args.transactional:
        # Before reading the topic: this fences a killed instance and aborts its transaction,
        # which would otherwise hold the read_committed end (the LSO) back.
        producer.init_transactions(30)
    end = args.first + args.count
    there: set[int] = set()
    if args.skip_existing:
        there = existing_indices(args.bootstrap_server, args.topic, args.first, end)
    todo = [i for i in range(args.first, end) if i not in there]
    committed = aborted = 0
    chunk = args.txn_size if args.transactional else 10_000
    for txn_no, at in enumerate(range(0, len(todo), chunk), start=1):
        batch = todo[at : at + chunk]
        if args.transactional:
            producer.begin_transaction()
        for j in batch:
            key, value = event_of(j, args.keys)
            producer.produce(
                args.topic,
                key=key,
                value=value,
                timestamp=start_ms + j * args.step_ms,
                headers=[(INDEX_HEADER, str(j).encode())],
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
    skipped = f", {len(there)} already there" if args.skip_existing else ""
    print(
        f"generated {committed} committed events, {aborted} aborted{skipped}, "
        f"indices {args.first}..{end - 1}",
        flush=True,
    )
    return 0


#: What `averages` writes for every key it changed (and the window, with --window).
RESULT_FIELDS = ("key", "count", "sum", "avg")


def foreign_event(key: bytes | None, value: bytes | None, headers: dict[str, bytes]) -> str | None:
    """Why a record of the input topic is not one `generate` wrote, or None."""
    index = headers.get(INDEX_HEADER)
    if index is None or not index.isdigit():
        return f"no {INDEX_HEADER} header"
    expected = event_of(int(index), 1)[1].encode()
    if key is None or re.fullmatch(rb"k\d+", key) is None or value != expected:
        return f"key {key!r} value {value!r} is not event {int(index)} of `generate`"
    return None


def foreign_result(key: bytes | None, value: bytes | None) -> str | None:
    """Why a record of the output topic is not a result of `averages`, or None."""
    try:
        result = json.loads(value or b"")
    except ValueError:
        result = None
    if not isinstance(result, dict) or any(name not in result for name in RESULT_FIELDS):
        return f"value {value!r} is not JSON with {', '.join(RESULT_FIELDS)}"
    if key is None or result["key"] != key.decode(errors="replace"):
        return f"key {key!r} is not the result's key {result['key']!r}"
    return None


#: Why a record (key, value, headers) is not what a topic should hold, or None.
Refusal = Callable[[bytes | None, bytes | None, dict[str, bytes]], str | None]


def first_foreign(bootstrap: str, topic: str, why: Refusal) -> str | None:
    """The first record of `topic` (read_committed, every partition to its end) that `why`
    refuses, as `partition P offset O: reason`; None if there is none or no such topic."""
    for msg in committed_records(bootstrap, topic, "oncelog-pipeline-check"):
        reason = why(msg.key(), msg.value(), headers_of(msg))
        if reason is not None:
            return f"partition {msg.partition()} offset {msg.offset()}: {reason}"
    return None


def run_check_topics(args: argparse.Namespace) -> int:
    """0 if --input and --output hold only the pipeline's records, else 1 with one line."""
    from confluent_kafka import KafkaException

    checks = [
        ("input", args.input, "events `oncelog pipeline generate` wrote", foreign_event),
        ("output", args.output, "results of `oncelog pipeline averages`",
         lambda key, value, _headers: foreign_result(key, value)),
    ]  # fmt: skip
    try:
        for option, topic, what, why in checks:
            if not topic:
                continue
            found = first_foreign(args.bootstrap_server, topic, why)
            if found is not None:
                return fail(
                    f"topic {topic} holds records other than {what} ({found}); pass "
                    f"--{option} with a topic of the pipeline's own",
                )
    except KafkaException as exc:
        return fail(describe_error(exc))
    return 0
