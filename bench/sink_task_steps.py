"""The fixed cost of one exactly-once Spark sink task on an RF=3 cluster, step by step.

Each task of the `oncelog` sink (src/oncelog/spark/sink.py) builds a transactional producer
and a group client for its marker, then: `init_transactions` (fences older attempts), reads
its marker (OffsetFetch, require_stable), produces its rows in a transaction, sends the new
marker with `send_offsets_to_transaction` and commits. This script runs that sequence
``--tasks`` times for one transactional id against three brokers + etcd (the target of
`bench/cluster_replication.py`, Kafka's replica defaults), without Spark, and prints the
median and max of each step (the first two tasks are not counted: new connections).

``--reconnect-backoff-ms`` sets the clients' `reconnect.backoff.ms` (default: the sink's own
default, `sink_options.CLIENT_DEFAULTS`; 100 is librdkafka's). ``--oncelog-rev`` runs the
brokers from `git archive REV`. Every process started is killed by its pid. Usage:
bench/README.md; figures: RESULTS.md section 9.2.
"""

from __future__ import annotations

import argparse
import atexit
import itertools
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _p in (str(REPO / "src"), str(REPO), str(REPO / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import cluster_replication as cr  # noqa: E402  (bench/ helpers: targets, machine)
from oncelog.spark.sink_options import CLIENT_DEFAULTS  # noqa: E402

TOPIC = "sink-steps"
TXN_ID = "sink-steps-query-0"
SKIPPED = 2


def run(bootstrap: str, args: argparse.Namespace) -> dict[str, list[float]]:
    from confluent_kafka import Consumer, Producer, TopicPartition

    conf = {
        "bootstrap.servers": bootstrap,
        "log_level": 0,
        "reconnect.backoff.ms": str(args.reconnect_backoff_ms),
    }
    steps: dict[str, list[float]] = {}
    value = b"v" * args.size
    for batch in range(SKIPPED + args.tasks):
        marks = [("start", time.monotonic())]
        producer = Producer({**conf, "transactional.id": TXN_ID, "partitioner": "murmur2_random"})
        producer.init_transactions(30)
        marks.append(("init_transactions", time.monotonic()))
        group = Consumer(
            {
                **conf,
                "group.id": TXN_ID,
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        [stored] = group.committed([TopicPartition(TOPIC, 0)], 30)
        if stored.error is not None or (batch and stored.offset != batch):
            raise RuntimeError(f"marker of task {batch}: {stored}")
        marks.append(("read marker", time.monotonic()))
        producer.begin_transaction()
        for i in range(args.rows):
            producer.produce(TOPIC, value, key=str(i).encode())
            producer.poll(0)
        marks.append(("produce rows", time.monotonic()))
        marker = [TopicPartition(TOPIC, 0, batch + 1, f"batch {batch}")]
        producer.send_offsets_to_transaction(marker, group.consumer_group_metadata(), 30)
        marks.append(("send_offsets_to_transaction", time.monotonic()))
        producer.commit_transaction(30)
        marks.append(("commit_transaction", time.monotonic()))
        group.close()
        del producer
        marks.append(("close clients", time.monotonic()))
        if batch < SKIPPED:
            continue
        for (_, before), (name, after) in itertools.pairwise(marks):
            steps.setdefault(name, []).append((after - before) * 1000)
        steps.setdefault("task", []).append((marks[-1][1] - marks[0][1]) * 1000)
    return steps


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", type=int, default=20)
    ap.add_argument("--rows", type=int, default=1000, help="rows per task")
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument(
        "--reconnect-backoff-ms",
        type=int,
        default=int(CLIENT_DEFAULTS["reconnect.backoff.ms"]),
    )
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--oncelog-rev", help="brokers from `git archive REV`")
    ap.add_argument("--json", help="write the figures and the machine info here")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    atexit.register(cr._kill_started)
    overrides, base, info = cr.bench_start(args, "oncelog-bench-sink-steps-")
    target = cr.Target("cluster", base / "cluster", overrides).start()
    try:
        target.create_topic(TOPIC, 2, 3, 2)
        steps = run(target.bootstrap, args)
    finally:
        target.close()
    print(
        f"{args.tasks} tasks of {args.rows} x {args.size} B, "
        f"reconnect.backoff.ms={args.reconnect_backoff_ms}"
    )
    figures: dict[str, Any] = {}
    for name, values in steps.items():
        figures[name] = {"median": statistics.median(values), "max": max(values)}
        slowest = values.index(max(values)) + SKIPPED
        print(
            f"{name:30s} median {figures[name]['median']:7.1f} ms   max {max(values):7.1f} ms "
            f"(task {slowest})"
        )
    if args.json:
        out = {"machine": info, "args": vars(args), "steps": figures}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
