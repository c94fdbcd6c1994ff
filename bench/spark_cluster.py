"""The averages pipeline on a Spark standalone cluster against three brokers: exactly-once vs
at-least-once.

Spark: a Master and two Workers (1 core, 1 GiB each; executors 512 MiB) started with the
PySpark wheel's `spark-class` (tests/spark/spark_standalone.py), the driver (one SparkSession,
RocksDB state store) in this process; every Spark service on 127.0.0.1. Kafka: etcd plus three
oncelog brokers (tests/cluster_process.py) with Kafka's default replica timings unless
`--override` says otherwise; internal topics RF=3, the input and every output topic RF=3 with
min.insync.replicas=2.

The input topic gets N deterministic events (`oncelog pipeline generate`'s formula) once; then
each run processes all of it from the start with Trigger.AvailableNow and maxOffsetsPerTrigger
M, into a fresh output topic and checkpoint:

- `exactly-once`: the `oncelog` sink, one transaction per Spark partition and batch, with its
  marker offsets and the driver's seal;
- `at-least-once`: the same query and sink with `semantics=at-least-once` (idempotent producer,
  no transaction, no marker, no seal). Spark's own `format("kafka")` sink would be the natural
  contrast, but its connector jar (spark-sql-kafka-0-10) is not part of the PySpark wheel and
  this machine has no copy of it offline; our at-least-once mode differs from the exactly-once
  one only in the transactional protocol, which is what the comparison is about.

A warm-up run of each (not counted) starts the executors' Python workers. The two semantics
then take turns for --repeat runs; a run is timed from `start()` to the end of the query and
records/s = N / that time; every run must have read exactly N rows.

Usage: `.venv/bin/python bench/spark_cluster.py [--events 60000] [--max-offsets-per-trigger
20000] [--repeat 3] [--override KEY=VALUE] [--json out.json]`; figures in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.pipeline import cpu_model  # noqa: E402
from bench.pipeline import run_once as pipeline_run_once  # noqa: E402
from tests.cluster_process import Cluster  # noqa: E402
from tests.spark.spark_standalone import SparkStandalone  # noqa: E402

from oncelog.cli.main import main as oncelog_main  # noqa: E402
from oncelog.spark.pipeline import spark_session  # noqa: E402

SEMANTICS = ("exactly-once", "at-least-once")
#: Kafka's defaults (the test harness shortens them to see failures in seconds).
KAFKA_DEFAULTS = {
    "broker.session.timeout.ms": "9000",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.backoff.ms": "1000",
    "log.flush.offset.checkpoint.interval.ms": "60000",
}
INTERNAL = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.num.partitions": "4",
    "transaction.state.log.min.isr": "2",
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}


def run_once(
    spark: Any, cluster: Cluster, work: Path, args: argparse.Namespace, tag: str, semantics: str
) -> dict[str, Any]:
    """`bench/pipeline.py`'s timed run, its output topic replicated on the cluster."""
    return pipeline_run_once(
        spark,
        cluster.bootstrap,
        work,
        args,
        tag,
        semantics,
        lambda name: cluster.create_topic(name, args.output_partitions, 3, TOPIC_CONFIG),
    )


def overrides_of(items: list[str]) -> dict[str, str]:
    out = dict(KAFKA_DEFAULTS)
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--override wants KEY=VALUE, got {item!r}")
        out[key] = value
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3, help="input topic partitions")
    parser.add_argument("--output-partitions", type=int, default=2)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--override", action="append", default=[], help="broker KEY=VALUE")
    parser.add_argument("--timeout", type=float, default=900, help="limit of one run, s")
    parser.add_argument("--json", help="write the runs here")
    parser.add_argument("--rev", help="commit to report (default: git rev-parse of the repo)")
    return parser.parse_args()


def report(args: argparse.Namespace, runs: list[dict[str, Any]], extra: dict[str, Any]) -> None:
    """Medians per semantics, the overhead, the machine; the JSON file if asked for."""
    median = {
        s: statistics.median(r["records_per_s"] for r in runs if r["semantics"] == s)
        for s in SEMANTICS
    }
    seconds = {
        s: statistics.median(r["seconds"] for r in runs if r["semantics"] == s) for s in SEMANTICS
    }
    overhead = 1 - median["exactly-once"] / median["at-least-once"]
    rev = args.rev or subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    summary = {
        "rev": rev,
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        **extra,
        "events": args.events,
        "keys": args.keys,
        "max_offsets_per_trigger": args.max_offsets_per_trigger,
        "median_records_per_s": median,
        "median_seconds": seconds,
        "overhead": overhead,
        "runs": runs,
    }
    print(f"\n| sink semantics | s (median) | records/s (median of {args.repeat}) |")
    print("|---|---:|---:|")
    for s in SEMANTICS:
        print(f"| {s} | {seconds[s]:.1f} | {median[s]:,.0f} |")
    print(f"\nexactly-once overhead: {overhead:.1%}")
    print(f"machine: nproc={os.cpu_count()}, {cpu_model()}, rev {rev}")
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))


def _stop(signum: int, _frame: Any) -> None:
    """SIGTERM ends the run through `main`'s clean-up (brokers, etcd, Spark by their pids)."""
    raise SystemExit(128 + signum)


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, _stop)
    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-spark-cluster-"))
    broker_settings = overrides_of(args.override)
    # Kafka's timings replace every one of the harness's FAST ones.
    cluster = Cluster(work / "oncelog", overrides={**broker_settings, **INTERNAL})
    standalone = SparkStandalone(work / "spark", workers=2, cores=1, memory="1g")
    spark = None
    try:
        (work / "oncelog").mkdir()
        cluster.start()
        cluster.create_topic("events", args.partitions, 3, TOPIC_CONFIG)
        gen = ["pipeline", "generate", "--bootstrap-server", cluster.bootstrap,
               "--topic", "events", "--count", str(args.events), "--keys", str(args.keys),
               "--partitions", str(args.partitions)]  # fmt: skip
        if oncelog_main(gen) != 0:
            raise RuntimeError("generate failed")
        standalone.start()
        os.environ.update(SparkStandalone.driver_env(work / "driver-local"))
        spark = spark_session(standalone.url, standalone.driver_conf())
        for semantics in SEMANTICS:
            warm = run_once(spark, cluster, work, args, f"warm-{semantics}", semantics)
            print(f"warm-up {semantics}: {warm['records_per_s']:.0f} records/s", flush=True)
        runs: list[dict[str, Any]] = []
        for i in range(args.repeat):
            for semantics in SEMANTICS if i % 2 == 0 else reversed(SEMANTICS):
                result = run_once(spark, cluster, work, args, f"{semantics}-{i}", semantics)
                runs.append(result)
                print(
                    f"run {i} {semantics}: {result['records_per_s']:.0f} records/s "
                    f"({result['seconds']:.1f} s, {result['batches']} batches)",
                    flush=True,
                )
        report(
            args,
            runs,
            {
                "master": standalone.url,
                "workers": "2 x (1 core, 1g), executors 512m",
                "brokers": "3 + etcd, RF=3, min.insync.replicas=2",
                "broker_settings": broker_settings,
            },
        )
        return 0
    finally:
        if spark is not None:
            spark.stop()
        standalone.close()
        cluster.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
