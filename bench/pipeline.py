"""Throughput of the Spark averages pipeline: exactly-once sink vs the same pipeline at-least-once.

One oncelog broker (a real process, fresh data dir) and one SparkSession (local[2] by default,
RocksDB state store) for the whole run. The input topic gets N deterministic events
(`oncelog pipeline generate`'s formula) once; then each run processes all of it from the start
with Trigger.AvailableNow and maxOffsetsPerTrigger M, into a fresh output topic and checkpoint:

- `exactly-once`: the `oncelog` sink, one transaction per Spark partition and batch, with its
  marker offsets and the driver's seal;
- `at-least-once`: the same query with `semantics=at-least-once` (idempotent producer, no
  transaction, no marker, no seal).

A warm-up run of each (not counted) loads the JVM's and the Python workers' code. The two
semantics then take turns for --repeat runs; a run is timed from `start()` to the end of the
query, and records/s = N / that time. The overhead is 1 - eos records/s / alo records/s (median
runs). Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.broker_process import BrokerProcess  # noqa: E402

from oncelog.cli.main import main as oncelog_main  # noqa: E402
from oncelog.cli.pipeline import ensure_topic  # noqa: E402
from oncelog.spark.pipeline import PipelineConfig, spark_session, start  # noqa: E402

SEMANTICS = ("exactly-once", "at-least-once")


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def run_once(
    spark: Any,
    bootstrap: str,
    work: Path,
    args: argparse.Namespace,
    tag: str,
    semantics: str,
    create_output: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One timed run of the pipeline over all events; `create_output` makes the output topic
    (default: as `oncelog pipeline` does; a cluster benchmark replicates it)."""
    output = f"averages-{tag}"
    if create_output is None:
        ensure_topic(bootstrap, output, args.output_partitions)
    else:
        create_output(output)
    cfg = PipelineConfig(
        bootstrap=bootstrap,
        input_topic="events",
        output_topic=output,
        checkpoint=str(work / f"ck-{tag}"),
        semantics=semantics,
        available_now=True,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        sink_id=f"bench-{tag}",
    )
    began = time.perf_counter()
    query = start(spark, cfg)
    query.awaitTermination(args.timeout)
    elapsed = time.perf_counter() - began
    if query.isActive:
        query.stop()
        raise RuntimeError(f"run {tag} did not finish in {args.timeout}s")
    if query.exception() is not None:
        raise RuntimeError(f"run {tag} failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(p.numInputRows for p in progress)
    if rows != args.events:
        raise RuntimeError(f"run {tag} read {rows} rows, expected {args.events}")
    return {
        "semantics": semantics,
        "seconds": elapsed,
        "records_per_s": args.events / elapsed,
        "batches": len([p for p in progress if p.numInputRows]),
        "batch_ms_sum": sum(p.batchDuration for p in progress),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=3, help="input topic partitions")
    parser.add_argument("--output-partitions", type=int, default=2)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--json", help="write the runs here")
    parser.add_argument("--rev", help="commit to report (default: git rev-parse of the repo)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="oncelog-bench-pipeline-"))
    broker = BrokerProcess(
        work / "data",
        {"transaction.state.log.num.partitions": "4", "offsets.topic.num.partitions": "4"},
    ).start()
    spark = None
    try:
        gen = [
            "pipeline",
            "generate",
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            "events",
            "--count",
            str(args.events),
            "--keys",
            str(args.keys),
            "--partitions",
            str(args.partitions),
        ]
        if oncelog_main(gen) != 0:
            raise RuntimeError("generate failed")
        spark = spark_session(args.master)
        for semantics in SEMANTICS:
            warm = run_once(spark, broker.bootstrap, work, args, f"warm-{semantics}", semantics)
            print(f"warm-up {semantics}: {warm['records_per_s']:.0f} records/s", flush=True)
        runs: list[dict[str, Any]] = []
        for i in range(args.repeat):
            for semantics in SEMANTICS if i % 2 == 0 else reversed(SEMANTICS):
                result = run_once(
                    spark, broker.bootstrap, work, args, f"{semantics}-{i}", semantics
                )
                runs.append(result)
                print(
                    f"run {i} {semantics}: {result['records_per_s']:.0f} records/s "
                    f"({result['seconds']:.1f} s, {result['batches']} batches)",
                    flush=True,
                )
        median = {
            s: statistics.median(r["records_per_s"] for r in runs if r["semantics"] == s)
            for s in SEMANTICS
        }
        overhead = 1 - median["exactly-once"] / median["at-least-once"]
        rev = (
            args.rev
            or subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        )
        summary = {
            "rev": rev,
            "nproc": os.cpu_count(),
            "cpu": cpu_model(),
            "master": args.master,
            "events": args.events,
            "keys": args.keys,
            "max_offsets_per_trigger": args.max_offsets_per_trigger,
            "median_records_per_s": median,
            "overhead": overhead,
            "runs": runs,
        }
        print(f"\n| sink semantics | records/s (median of {args.repeat}) |\n|---|---:|")
        for s in SEMANTICS:
            print(f"| {s} | {median[s]:,.0f} |")
        print(f"\nexactly-once overhead: {overhead:.1%} (target ≤ 25%)")
        print(f"machine: nproc={os.cpu_count()}, {cpu_model()}, {args.master}, rev {rev}")
        if args.json:
            Path(args.json).write_text(json.dumps(summary, indent=2))
        return 0
    finally:
        if spark is not None:
            spark.stop()
        broker.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
