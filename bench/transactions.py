"""Transactional produce/consume cost of oncelog, next to librdkafka's mock cluster.

Per target and per repeat (the two targets take turns, the table shows medians):

1. produce N messages of S bytes round-robin over P partitions (acks=all, linger.ms=5) once
   with an idempotent producer (enable.idempotence=true) and once with a transactional
   producer (transactional.id) that commits every --commit-ms; each is timed from the first
   produce() to the last delivery report (idempotent) or to the end of the last
   commit_transaction() (transactional). The overhead is 1 - txn msg/s / idempotent msg/s.
2. one-message transactions (begin, produce 1 message, commit) for --one-seconds seconds.
3. a read_committed consumer reads the data the transactional producer wrote in (1), from
   the beginning to the end of every partition.

Every client runs in its own process. The mock cluster keeps at most 5 MiB per partition and
silently drops older batches, so with the default N it holds only the tail of the data
written in (1): its read_committed consume reads what it kept and reports that count. The
mock does not implement read_committed (LSO), fencing or transaction markers the way Kafka
does; it is a yardstick for the client's speed only. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_consume as pc

SCRIPT = Path(__file__).resolve()
WORKER_ROLES = ("_idem", "_txn", "_one", "_rc")
PHASES = ("idem", "txn", "one", "rc")
PHASE_TITLES = {
    "idem": "idempotent produce",
    "txn": "transactional produce",
    "one": "one-message transactions",
    "rc": "read_committed consume",
}


# -- workers (each runs in its own process) -------------------------------------------------


def _producer(spec: dict[str, Any], on_delivery: Any, transactional: bool) -> Any:
    from confluent_kafka import Producer

    conf: dict[str, Any] = {
        **pc._common_conf(spec),
        "acks": "all",
        "linger.ms": spec["linger_ms"],
        "enable.idempotence": True,
        "compression.type": "none",
        "on_delivery": on_delivery,
    }
    if transactional:
        conf["transactional.id"] = f"bench-{spec['role']}-{uuid.uuid4().hex[:8]}"
    return Producer(conf)


def _delivery_counter() -> tuple[dict[str, Any], Any]:
    """A delivery callback and the counts it keeps (delivered, errors, time of the last)."""
    state: dict[str, Any] = {"delivered": 0, "errors": 0, "first_error": None, "last": 0.0}

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or str(err)
        else:
            state["delivered"] += 1
        state["last"] = time.perf_counter()

    return state, on_delivery


def _check_partitions(producer: Any, topic: str, parts: int) -> str | None:
    meta = producer.list_topics(topic, timeout=15)
    got = len(meta.topics[topic].partitions) if topic in meta.topics else 0
    return None if got == parts else f"topic {topic} has {got} partitions, want {parts}"


def _warm_up(producer: Any, spec: dict[str, Any], transactional: bool) -> str | None:
    """Outside the timed window: connection, metadata, producer id (and, transactional, the
    coordinator and one committed transaction), with one message to a separate topic."""
    problem = _check_partitions(producer, spec["topic"], spec["partitions"])
    if problem:
        return problem
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
    producer.produce(spec["warmup_topic"], b"warm-up", partition=0)
    if transactional:
        producer.commit_transaction(30)
    return None if producer.flush(15) == 0 else "warm-up: flush timed out"


def worker_produce(spec: dict[str, Any], transactional: bool) -> dict[str, Any]:
    """Phase 1: N messages, idempotent, or transactional with a commit every commit_ms."""
    n, size, parts, topic = spec["n"], spec["size"], spec["partitions"], spec["topic"]
    deadline = time.monotonic() + spec["timeout"]
    state, on_delivery = _delivery_counter()
    producer = _producer(spec, on_delivery, transactional)
    problem = _warm_up(producer, spec, transactional)
    if problem or state["delivered"] != 1:
        return {"ok": False, "error": problem or f"warm-up failed: {state['first_error']}"}
    state["delivered"] = 0

    value = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    interval = spec["commit_ms"] / 1000.0
    commits = 0
    commit_seconds = 0.0
    t0 = time.perf_counter()
    next_commit = t0 + interval
    if transactional:
        producer.begin_transaction()
    i = 0
    while i < n:
        try:
            produce(topic, value, partition=i % parts)
        except BufferError:
            poll(0.001)
            if time.monotonic() > deadline:
                break
            continue
        i += 1
        if i & 255 == 0:
            poll(0)
            if transactional and time.perf_counter() >= next_commit and i < n:
                c0 = time.perf_counter()
                producer.commit_transaction(max(1.0, deadline - time.monotonic()))
                producer.begin_transaction()
                commits += 1
                now = time.perf_counter()
                commit_seconds += now - c0
                next_commit = now + interval
    if transactional:
        c0 = time.perf_counter()
        producer.commit_transaction(max(1.0, deadline - time.monotonic()))
        commits += 1
        end = time.perf_counter()
        commit_seconds += end - c0
        remaining = len(producer)
    else:
        remaining = producer.flush(max(0.0, deadline - time.monotonic()))
        end = state["last"]
    elapsed = end - t0
    ok = state["delivered"] == n and remaining == 0 and state["errors"] == 0
    return {
        "ok": ok,
        "error": None
        if ok
        else f"delivered {state['delivered']}/{n}, "
        f"{state['errors']} errors (first: {state['first_error']}), {remaining} in queue",
        "n": state["delivered"],
        "seconds": elapsed,
        "msgs_per_s": state["delivered"] / elapsed if elapsed > 0 else 0.0,
        "mb_per_s": state["delivered"] * size / 1e6 / elapsed if elapsed > 0 else 0.0,
        "commits": commits,
        "commit_seconds": commit_seconds,
    }


def worker_one(spec: dict[str, Any]) -> dict[str, Any]:
    """Phase 2: begin, produce one message, commit; repeated for `seconds` or `count`."""
    size, parts, topic = spec["size"], spec["partitions"], spec["topic"]
    seconds, count = spec["one_seconds"], spec["one_count"]
    state, on_delivery = _delivery_counter()
    producer = _producer(spec, on_delivery, transactional=True)
    problem = _warm_up(producer, spec, transactional=True)
    if problem:
        return {"ok": False, "error": problem}
    state["delivered"] = 0
    value = os.urandom(size)
    latencies: list[float] = []
    hard_stop = time.monotonic() + spec["timeout"]
    t0 = time.perf_counter()
    stop_at = t0 + seconds if seconds > 0 else math.inf
    now = t0
    i = 0
    while (count <= 0 or i < count) and now < stop_at and time.monotonic() < hard_stop:
        producer.begin_transaction()
        producer.produce(topic, value, partition=i % parts)
        producer.commit_transaction(max(1.0, hard_stop - time.monotonic()))
        i += 1
        last, now = now, time.perf_counter()
        latencies.append(now - last)
    elapsed = now - t0
    latencies.sort()
    ok = state["delivered"] == i and state["errors"] == 0 and i > 0
    return {
        "ok": ok,
        "error": None
        if ok
        else f"{i} commits, delivered {state['delivered']}, {state['errors']} errors "
        f"(first: {state['first_error']})",
        "n": i,
        "seconds": elapsed,
        "txn_per_s": i / elapsed if elapsed > 0 else 0.0,
        "p50_ms": 1e3 * latencies[len(latencies) // 2] if latencies else float("nan"),
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        if latencies
        else float("nan"),
    }


def worker_read_committed(spec: dict[str, Any]) -> dict[str, Any]:
    """Phase 3: read_committed from the beginning to the end (EOF) of every partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    size, parts, topic = spec["size"], spec["partitions"], spec["topic"]
    expected = spec.get("expected")  # None: the mock may have dropped the oldest data
    deadline = time.monotonic() + spec["timeout"]
    consumer = Consumer(
        {
            **pc._common_conf(spec),
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "fetch.queue.backoff.ms": spec["fetch_queue_backoff_ms"],
        }
    )
    try:
        lows, highs = [], []
        for p in range(parts):  # outside the timed window: connect, learn the watermarks
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            lows.append(low)
            highs.append(high)
        received = nbytes = errors = 0
        first_error = None
        at_eof: set[int] = set()
        t0 = time.perf_counter()
        t_end = t0
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(parts)])
        while len(at_eof) < parts and time.monotonic() < deadline:
            # consume() waits for the whole count or the timeout, and the number left is not
            # known up front (the mock drops data): a short timeout bounds the last call.
            for msg in consumer.consume(spec.get("batch", 10_000), 0.01):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        at_eof.add(msg.partition())
                        continue
                    errors += 1
                    first_error = first_error or str(err)
                    continue
                received += 1
                nbytes += len(msg.value())
            t_end = time.perf_counter()
        elapsed = t_end - t0
    finally:
        consumer.close()
    ok = (
        len(at_eof) == parts
        and errors == 0
        and received > 0
        and nbytes == received * size
        and (expected is None or received == expected)
    )
    return {
        "ok": ok,
        "error": None
        if ok
        else f"received {received} (want {expected}), {nbytes} bytes, {len(at_eof)}/{parts} "
        f"at EOF, {errors} errors (first: {first_error})",
        "n": received,
        "low_watermarks": sum(lows),
        "high_watermarks": sum(highs),
        "seconds": elapsed,
        "msgs_per_s": received / elapsed if elapsed > 0 else 0.0,
        "mb_per_s": nbytes / 1e6 / elapsed if elapsed > 0 else 0.0,
    }


def _worker_main(role: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    spec["role"] = role.lstrip("_")
    cpu0 = pc._cpu_seconds(os.getpid())
    try:
        if role == "_idem":
            result = worker_produce(spec, transactional=False)
        elif role == "_txn":
            result = worker_produce(spec, transactional=True)
        elif role == "_one":
            result = worker_one(spec)
        else:
            result = worker_read_committed(spec)
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["client_cpu_s"] = pc._cpu_seconds(os.getpid()) - cpu0
    print(json.dumps(result), flush=True)
    return 0


# -- orchestration ---------------------------------------------------------------------------


@dataclass
class Row:
    target: str
    runs: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {phase: [] for phase in PHASES}
    )

    def median(self, phase: str, key: str) -> float:
        values = [r[key] for r in self.runs[phase] if r.get("ok") and key in r]
        return statistics.median(values) if values else float("nan")

    def paired_overheads(self) -> list[float]:
        """1 - txn/idempotent msg/s for each repeat (the two ran back to back)."""
        out = []
        for idem, txn in zip(self.runs["idem"], self.runs["txn"], strict=False):
            if idem.get("ok") and txn.get("ok"):
                out.append(100.0 * (1.0 - txn["msgs_per_s"] / idem["msgs_per_s"]))
        return out

    @property
    def ok(self) -> bool:
        runs = [r for phase in PHASES for r in self.runs[phase]]
        return bool(runs) and all(r.get("ok") for r in runs)


def run_round(
    target: pc.MockTarget | pc.OncelogTarget,
    row: Row,
    args: argparse.Namespace,
    profile_dir: Path | None,
    round_no: int,
) -> None:
    tag = f"{target.name}-r{round_no}"
    base = f"txbench-{uuid.uuid4().hex[:6]}"
    topics = {"idem": f"{base}-idem", "txn": f"{base}-txn", "one": f"{base}-one"}
    topics["rc"] = topics["txn"]  # phase 3 reads what the transactional producer wrote
    for name in ("idem", "txn", "one"):
        target.create_topic(topics[name], args.partitions)
    target.create_topic(f"{base}-warmup", 1)
    fits_mock = args.n * (args.size + pc.RECORD_OVERHEAD) <= 5 * pc.MIB * args.partitions
    for phase in PHASES:
        spec = {
            "warmup_topic": f"{base}-warmup",
            "bootstrap": target.bootstrap,
            "topic": topics[phase],
            "n": args.n,
            "size": args.size,
            "partitions": args.partitions,
            "linger_ms": args.linger_ms,
            "commit_ms": args.commit_ms,
            "one_seconds": args.one_seconds,
            "one_count": args.one_count,
            "fetch_queue_backoff_ms": args.fetch_queue_backoff_ms,
            "expected": args.n if target.name != "mock" or fits_mock else None,
        }
        prof = None
        if profile_dir is not None and target.name in args.profile_targets:
            prof = pc.Profiler(target.pid, profile_dir / f"{tag}-{phase}.txt")
        cpu0 = pc._cpu_seconds(target.pid)
        result = pc._run_worker(f"_{phase}", spec, args.timeout, script=SCRIPT)
        result["server_cpu_s"] = pc._cpu_seconds(target.pid) - cpu0
        result["loadavg"] = os.getloadavg()[0]
        if prof is not None:
            prof.stop()
            result["profile"] = str(prof.out)
            result["profile_wall"] = prof.wall
        n = max(int(result.get("n") or 0), 1)
        result["server_us_per_msg"] = 1e6 * result["server_cpu_s"] / n
        if "client_cpu_s" in result:
            result["client_us_per_msg"] = 1e6 * result["client_cpu_s"] / n
        row.runs[phase].append(result)
        status = "ok" if result.get("ok") else f"FAILED: {result.get('error')}"
        if phase == "one":
            rate = (
                f"{result.get('txn_per_s', 0):>11,.0f} txn/s p50 {result.get('p50_ms', 0):.2f} ms"
            )
        else:
            rate = (
                f"{result.get('msgs_per_s', 0):>11,.0f} msg/s "
                f"{result.get('mb_per_s', 0):>7.1f} MB/s"
            )
        extra = f" {result.get('commits', 0)} commits" if phase == "txn" else ""
        print(
            f"  {tag:<12} {phase:<5} {rate}  n={result.get('n', 0):,} "
            f"{result.get('seconds', 0):6.2f}s  server {result['server_us_per_msg']:6.2f} "
            f"us/{'txn' if phase == 'one' else 'msg'}  load {result['loadavg']:.1f}{extra}  "
            f"{status}",
            flush=True,
        )
    with contextlib.suppress(pc.BenchError):
        for name in ("idem", "txn", "one"):
            target.delete_topic(topics[name])
        target.delete_topic(f"{base}-warmup")


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def _ratio(ours: float, theirs: float) -> str:
    return "-" if math.isnan(ours) or math.isnan(theirs) or theirs == 0 else f"{ours / theirs:.2f}"


def overhead(row: Row) -> float:
    idem, txn = row.median("idem", "msgs_per_s"), row.median("txn", "msgs_per_s")
    return 100.0 * (1.0 - txn / idem)


def render_tables(rows: list[Row], args: argparse.Namespace) -> str:
    by_name = {r.target: r for r in rows}
    mock = by_name.get("mock")
    out = [
        f"1. produce {args.n:,} x {args.size} B over {args.partitions} partitions "
        f"(acks=all, linger.ms={args.linger_ms}; transactional commits every "
        f"{args.commit_ms} ms)\n",
        "| target | idempotent msg/s | MB/s | transactional msg/s | MB/s | commits | "
        "overhead (of medians) | overhead per repeat (paired) |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        paired = r.paired_overheads()
        out.append(
            "| "
            + " | ".join(
                [
                    r.target + ("" if r.ok else " (FAILED)"),
                    _fmt(r.median("idem", "msgs_per_s")),
                    _fmt(r.median("idem", "mb_per_s"), 1),
                    _fmt(r.median("txn", "msgs_per_s")),
                    _fmt(r.median("txn", "mb_per_s"), 1),
                    _fmt(r.median("txn", "commits")),
                    f"{_fmt(overhead(r), 1)}%",
                    ", ".join(f"{v:+.1f}%" for v in paired) or "-",
                ]
            )
            + " |"
        )
    out += [
        f"\n2. one-message transactions for {args.one_seconds:g} s"
        + (f" (at most {args.one_count:,})" if args.one_count > 0 else "")
        + "; 3. read_committed consume of the transactional data from (1)\n",
        "| target | 1-msg txn/s | p50 ms | p99 ms | read_committed msg/s | MB/s | messages read |",
        "|" + "---|" * 7,
    ]
    for r in rows:
        out.append(
            "| "
            + " | ".join(
                [
                    r.target,
                    _fmt(r.median("one", "txn_per_s")),
                    _fmt(r.median("one", "p50_ms"), 2),
                    _fmt(r.median("one", "p99_ms"), 2),
                    _fmt(r.median("rc", "msgs_per_s")),
                    _fmt(r.median("rc", "mb_per_s"), 1),
                    _fmt(r.median("rc", "n")),
                ]
            )
            + " |"
        )
    if mock is not None:
        for r in rows:
            if r is mock:
                continue
            out.append(
                "\n"
                f"{r.target}/mock ratios: idempotent produce "
                f"{_ratio(r.median('idem', 'msgs_per_s'), mock.median('idem', 'msgs_per_s'))}, "
                f"transactional produce "
                f"{_ratio(r.median('txn', 'msgs_per_s'), mock.median('txn', 'msgs_per_s'))}, "
                f"1-msg txn/s "
                f"{_ratio(r.median('one', 'txn_per_s'), mock.median('one', 'txn_per_s'))}, "
                f"read_committed consume msg/s "
                f"{_ratio(r.median('rc', 'msgs_per_s'), mock.median('rc', 'msgs_per_s'))}"
            )
    out += [
        "\nCPU (server = broker process, or the mock helper process; per message, per "
        "transaction for phase 2)\n",
        "| target | server us/msg idempotent | transactional | us/txn 1-msg | us/msg "
        "read_committed | client us/msg idempotent | transactional | us/txn 1-msg | "
        "us/msg read_committed |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        cells = [r.target]
        for key in ("server_us_per_msg", "client_us_per_msg"):
            cells += [_fmt(r.median(phase, key), 2) for phase in PHASES]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="mock,oncelog", help="comma list of mock,oncelog")
    p.add_argument("--n", type=int, default=300_000, help="messages per produce run")
    p.add_argument("--size", type=int, default=1024, help="message size in bytes")
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--commit-ms", type=int, default=100, help="transactional commit interval")
    p.add_argument("--one-seconds", type=float, default=5.0, help="length of phase 2")
    p.add_argument("--one-count", type=int, default=0, help="phase 2 cap (0: no cap)")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--fetch-queue-backoff-ms", type=int, default=10)
    p.add_argument(
        "--oncelog-rev",
        help="run the broker from `git archive REV` instead of the installed work tree",
    )
    p.add_argument("--repeat", type=int, default=3, help="rounds per target; medians shown")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    p.add_argument("--profile", type=Path, help="write py-spy raw profiles of the broker here")
    p.add_argument("--profile-targets", default="oncelog", help="targets to profile")
    p.add_argument("--json", type=Path, help="write all results as JSON here")
    return p.parse_args(argv)


def _print_profiles(rows: list[Row]) -> None:
    for row in rows:
        for phase in PHASES:
            for i, result in enumerate(row.runs[phase]):
                if not result.get("profile") or not Path(result["profile"]).exists():
                    continue
                summary = pc.summarize_profile(Path(result["profile"]), result["profile_wall"])
                result["profile_summary"] = summary
                print(f"\n### {row.target} round {i} {PHASE_TITLES[phase]}")
                print(
                    f"{summary.get('samples', 0)} samples of {summary.get('thread')}, "
                    f"busy {summary.get('busy_pct', 0):.0f}% of the phase; % of busy samples:"
                )
                for title in ("self", "self_by_file", "inclusive"):
                    print(f"{title}:")
                    for name, share in summary.get(title, []):
                        print(f"  {share:5.1f}%  {name}")


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    atexit.register(pc._kill_started)
    signal.signal(signal.SIGTERM, pc._on_signal)
    workdir = Path(tempfile.mkdtemp(prefix="oncelog-txbench-"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    info = pc.machine_info(args.oncelog_rev)
    print("machine:", json.dumps(info), flush=True)
    rows = [Row(name) for name in targets]
    opened: dict[str, pc.MockTarget | pc.OncelogTarget] = {}
    try:
        if "mock" in targets:
            opened["mock"] = pc.MockTarget()
        if "oncelog" in targets:
            broker = pc.OncelogTarget(workdir, args.oncelog_rev)
            opened["oncelog"] = broker
            info["oncelog_c_record_walk"] = broker.speedups
        for name, t in opened.items():
            print(f"{name}: {t.bootstrap} (pid {t.pid})", flush=True)
        for round_no in range(args.repeat):  # interleaved, so load changes hit both targets
            for row in rows:
                run_round(opened[row.target], row, args, args.profile, round_no)
    finally:
        for t in opened.values():
            with contextlib.suppress(Exception):
                t.close()
        pc._kill_started()
        shutil.rmtree(workdir, ignore_errors=True)
    print("\nmachine:", json.dumps(info))
    print(f"median of {args.repeat} round(s); MB/s = payload bytes / 1e6 / s\n")
    print(render_tables(rows, args))
    _print_profiles(rows)
    if args.json:
        payload = {"machine": info, "args": vars(args), "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in WORKER_ROLES:
        sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
