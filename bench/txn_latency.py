"""How long the steps of a transaction take on an RF=3 cluster (issue 15).

A transactional confluent-kafka producer (this process) against three brokers + etcd
(`bench/cluster_replication.py`'s target, Kafka's replica defaults), topic of
``--partitions`` partitions with RF=3 and min.insync.replicas=2. After
``init_transactions`` it runs ``--transactions`` transactions one after the other, each
``--records`` records of ``--size`` bytes to one partition (round-robin), timing:

* ``first ack``: from ``begin_transaction`` + the produces to the first delivery report
  (includes the AddPartitionsToTxn round the client makes before its first Produce, which
  waits until the previous transaction's markers are written);
* ``commit``: ``commit_transaction`` (EndTxn, answered once the decision is replicated; the
  markers follow);
* ``txn``: the whole transaction, begin to commit returned.

``--mock`` runs the same loop on librdkafka's mock cluster (3 brokers, no replication) after
each round, for comparison; ``--warmup`` transactions run first, uncounted. Each
coordinator answer waits until its ``__transaction_state`` record is replicated, so these
figures show how fast a record of that internal topic reaches the followers. Run it with
``--oncelog-rev`` against two commits to compare. Every process started is killed by its
pid; ``--timeout`` bounds the run. Usage: bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import json
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
for _p in (str(REPO), str(REPO / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import cluster_replication as cr  # noqa: E402  (bench/ helpers: targets, snapshot, machine)

QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_round(target: cr.Target | None, rnd: int, args: argparse.Namespace) -> dict[str, Any]:
    """One round against `target`, or librdkafka's mock cluster (3 brokers) when None."""
    from confluent_kafka import Producer

    topic = f"txn-latency-{rnd}"
    where: dict[str, Any] = {"test.mock.num.brokers": 3}
    if target is not None:
        target.create_topic(topic, args.partitions, 3, 2)
        where = {"bootstrap.servers": target.bootstrap}
    producer = Producer(
        {**where, "transactional.id": f"txn-latency-{rnd}", "linger.ms": 0, "log_level": 0}
    )
    started = time.monotonic()
    producer.init_transactions(30)
    init_ms = (time.monotonic() - started) * 1000
    value = b"x" * args.size
    first: list[float] = []
    commits: list[float] = []
    whole: list[float] = []
    for i in range(args.warmup + args.transactions):
        acked: list[float] = []

        def delivered(err: Any, _msg: Any, acked: list[float] = acked) -> None:
            if err is not None:
                raise RuntimeError(f"delivery failed: {err}")
            acked.append(time.monotonic())

        begin = time.monotonic()
        producer.begin_transaction()
        for _ in range(args.records):
            producer.produce(topic, value, partition=i % args.partitions, on_delivery=delivered)
        while not acked:
            producer.poll(0.001)
        first_ack = (acked[0] - begin) * 1000
        before_commit = time.monotonic()
        producer.commit_transaction(30)
        done = time.monotonic()
        if i < args.warmup:
            continue
        first.append(first_ack)
        commits.append((done - before_commit) * 1000)
        whole.append((done - begin) * 1000)
    return {
        "target": "oncelog" if target is not None else "mock",
        "round": rnd,
        "init_ms": round(init_ms, 1),
        "first_ack_ms": {q: round(pct(first, p), 2) for q, p in QUANTILES},
        "commit_ms": {q: round(pct(commits, p), 2) for q, p in QUANTILES},
        "txn_ms": {q: round(pct(whole, p), 2) for q, p in QUANTILES},
        "txn_per_s": round(len(whole) / (sum(whole) / 1000), 1),
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--transactions", type=int, default=100)
    ap.add_argument(
        "--warmup",
        type=int,
        default=0,
        help="transactions run first and not counted (the first on each partition meet "
        "new connections)",
    )
    ap.add_argument("--records", type=int, default=1, help="records per transaction")
    ap.add_argument("--size", type=int, default=100, help="value bytes")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=1, help="fresh cluster per round")
    ap.add_argument(
        "--mock", action="store_true", help="also run each round on librdkafka's mock cluster"
    )
    ap.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--oncelog-rev", help="brokers from `git archive REV`")
    ap.add_argument("--timeout", type=float, default=600, help="limit of the whole run, s")
    ap.add_argument("--json", help="write the rounds and the machine info here")
    return ap.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    atexit.register(cr._kill_started)

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"--timeout {args.timeout} s passed")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(args.timeout))
    overrides, base, info = cr.bench_start(args, "oncelog-bench-txn-latency-")
    print(
        f"{args.transactions} transactions of {args.records} x {args.size} B, "
        f"{args.partitions} partitions, RF=3, min.insync.replicas=2",
        flush=True,
    )
    rounds = []
    for rnd in range(1, args.rounds + 1):
        target = cr.Target("cluster", base / f"round-{rnd}", overrides).start()
        try:
            result = run_round(target, rnd, args)
        finally:
            target.close()
        print(json.dumps(result), flush=True)
        rounds.append(result)
        if args.mock:
            result = run_round(None, rnd, args)
            print(json.dumps(result), flush=True)
            rounds.append(result)
    for name in ("oncelog", "mock"):
        ours = [r for r in rounds if r["target"] == name]
        if not ours:
            continue
        for key in ("first_ack_ms", "commit_ms", "txn_ms"):
            figures = " ".join(
                f"{q} {statistics.median(r[key][q] for r in ours):.2f}" for q, _ in QUANTILES
            )
            print(f"{name} {key}: {figures} (median over rounds)")
        print(f"{name} txn_per_s: {statistics.median(r['txn_per_s'] for r in ours):.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": info, "rounds": rounds}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
