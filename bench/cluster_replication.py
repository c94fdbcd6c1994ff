"""Cost of replication: one idempotent producer against a three-broker cluster on etcd.

Cases (every one: ONE confluent-kafka producer process, 100-byte values, linger.ms=5,
explicit round-robin over the partitions, timed from the first produce() to the last
delivery report):

* ``cluster-rf3-all``: three brokers + etcd, topic RF=3 with min.insync.replicas=2,
  acks=all, enable.idempotence=true;
* ``cluster-rf1-all``: the same cluster, topic RF=1, acks=all, enable.idempotence=true (the
  same producer as above; with one replica acks=all waits for the leader only);
* ``cluster-rf1-ack1``: the same cluster, topic RF=1, acks=1, enable.idempotence=false
  (Kafka's own contrast; librdkafka refuses acks=1 with idempotence);
* ``single-rf1-ack1`` / ``single-rf1-all``: one broker started without etcd, RF=1.

Per case: msg/s, broker CPU seconds per message (utime+stime from /proc/PID/stat of every
broker process, summed; etcd's apart), client CPU, and the produce latency of a sample of
messages (delivery-callback time minus send time) at full throughput; then a paced phase
(``--paced-rate`` msg/s for ``--paced-seconds``) for the latency without a full queue. At
the end of each case a consumer reads the topic from offset 0: consumed == acked, all
distinct. Broker log lines at WARNING or above written during the case are counted and the
first ones printed.

Everything runs on 127.0.0.1; every process this script starts is killed by its pid on the
way out; ``--timeout`` bounds the whole run. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

#: Kafka's defaults (the test harness shortens these to see failures in seconds).
BROKER_DEFAULTS = {
    "broker.session.timeout.ms": "9000",
    "replica.lag.time.max.ms": "30000",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.backoff.ms": "1000",
    "log.flush.offset.checkpoint.interval.ms": "60000",
}

CASES: dict[str, dict[str, Any]] = {
    "cluster-rf3-all": {"where": "cluster", "rf": 3, "acks": "all", "idem": True, "min_isr": 2},
    "cluster-rf1-all": {"where": "cluster", "rf": 1, "acks": "all", "idem": True, "min_isr": 1},
    "cluster-rf1-ack1": {"where": "cluster", "rf": 1, "acks": "1", "idem": False, "min_isr": 1},
    "single-rf1-all": {"where": "single", "rf": 1, "acks": "all", "idem": True, "min_isr": 1},
    "single-rf1-ack1": {"where": "single", "rf": 1, "acks": "1", "idem": False, "min_isr": 1},
}

KAFKA_2014 = {"rf3_acks_all": 421_823, "rf1_acks1": 821_557}


# -- the producer process ----------------------------------------------------------------------


def producer_main(spec: dict[str, Any]) -> None:
    """Runs in its own process. Talks to the parent one JSON line at a time on stdout; waits
    for a line on stdin before each phase so the parent can read CPU counters around it."""
    from confluent_kafka import Producer

    size, parts, topic = spec["size"], spec["partitions"], spec["topic"]
    state: dict[str, Any] = {"acked": 0, "errors": 0, "first_error": None, "last": 0.0}
    lat: list[float] = []  # callback time - send time, s
    rdlat: list[float] = []  # librdkafka's own msg.latency(), s

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or str(err)
        else:
            state["acked"] += 1
        state["last"] = time.perf_counter()

    def timed(t0: float) -> Any:
        def cb(err: Any, msg: Any) -> None:
            now = time.perf_counter()
            on_delivery(err, msg)
            if err is None:
                lat.append(now - t0)
                rd = msg.latency()
                if rd is not None and rd >= 0:
                    rdlat.append(rd)

        return cb

    producer = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "client.id": "bench-cluster-replication",
            "acks": spec["acks"],
            "enable.idempotence": spec["idem"],
            "linger.ms": spec["linger_ms"],
            "compression.type": "none",
            "message.timeout.ms": int(spec["timeout"] * 1000),
            "on_delivery": on_delivery,
        }
    )
    tail = os.urandom(size - 9)

    def value(tag: bytes, i: int) -> bytes:
        return tag + i.to_bytes(8, "big") + tail

    def say(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    # Warm-up outside the timed window: metadata, connections to every leader and (with
    # idempotence) the producer id, through one message per partition.
    meta = producer.list_topics(topic, timeout=15)
    got = len(meta.topics[topic].partitions) if topic in meta.topics else 0
    if got != parts:
        say({"error": f"topic {topic} has {got} partitions, want {parts}"})
        return
    for p in range(parts):
        producer.produce(topic, value(b"w", p), partition=p)
    if producer.flush(30) != 0 or state["acked"] != parts:
        say({"error": f"warm-up failed: {state['first_error']}"})
        return
    say({"ready": True, "warmup": parts})

    sys.stdin.readline()
    thr = _timed_phase(producer, spec, state, timed, value, lat, rdlat)
    say(thr)
    sys.stdin.readline()
    paced = _paced_phase(producer, spec, state, timed, value, lat, rdlat)
    say({**paced, "total_acked": parts + thr["acked"] + paced["acked"]})


def _timed_phase(producer: Any, spec: dict[str, Any], state: dict[str, Any], timed: Any,
                 value: Any, lat: list[float], rdlat: list[float]) -> dict[str, Any]:  # fmt: skip
    """N messages as fast as they go; every `sample_every`-th one timed."""
    n, parts, topic, every = spec["n"], spec["partitions"], spec["topic"], spec["sample_every"]
    state.update(acked=0, errors=0)
    lat.clear()
    rdlat.clear()
    produce, poll = producer.produce, producer.poll
    deadline = time.monotonic() + spec["timeout"]
    ru0 = os.times()
    t0 = time.perf_counter()
    i = 0
    while i < n:
        try:
            if i % every == 0:
                produce(topic, value(b"t", i), partition=i % parts,
                        on_delivery=timed(time.perf_counter()))  # fmt: skip
            else:
                produce(topic, value(b"t", i), partition=i % parts)
        except BufferError:
            poll(0.001)
            if time.monotonic() > deadline:
                break
            continue
        i += 1
        if i & 255 == 0:
            poll(0)
    left = producer.flush(max(0.0, deadline - time.monotonic()))
    elapsed = state["last"] - t0
    ru = os.times()
    return {
        "phase": "throughput",
        "sent": i,
        "acked": state["acked"],
        "errors": state["errors"],
        "first_error": state["first_error"],
        "in_queue": left,
        "seconds": elapsed,
        "lat": list(lat),
        "rdlat": list(rdlat),
        "client_cpu": ru.user + ru.system - ru0.user - ru0.system,
    }


def _paced_phase(producer: Any, spec: dict[str, Any], state: dict[str, Any], timed: Any,
                 value: Any, lat: list[float], rdlat: list[float]) -> dict[str, Any]:  # fmt: skip
    """`paced_rate` msg/s for `paced_seconds`, every message timed."""
    parts, topic = spec["partitions"], spec["topic"]
    state.update(acked=0, errors=0)
    lat.clear()
    rdlat.clear()
    rate, seconds = spec["paced_rate"], spec["paced_seconds"]
    count = int(rate * seconds)
    start = time.perf_counter()
    for j in range(count):
        due = start + j / rate
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.01))
        producer.produce(topic, value(b"p", j), partition=j % parts,
                         on_delivery=timed(time.perf_counter()))  # fmt: skip
        producer.poll(0)
    left = producer.flush(30)
    return {
        "phase": "paced",
        "sent": count,
        "acked": state["acked"],
        "errors": state["errors"],
        "first_error": state["first_error"],
        "in_queue": left,
        "lat": list(lat),
        "rdlat": list(rdlat),
    }


# -- helpers of the parent -------------------------------------------------------------------

_STARTED: list[subprocess.Popen[Any]] = []


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all threads), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, round(q / 100 * len(s)) - 1))]


def log_sizes(paths: list[Path]) -> dict[Path, int]:
    return {p: p.stat().st_size if p.exists() else 0 for p in paths}


def new_log_lines(before: dict[Path, int]) -> dict[str, list[str]]:
    """Lines at WARNING or above (or tracebacks) each log got since `before`."""
    out: dict[str, list[str]] = {}
    for path, offset in before.items():
        try:
            with open(path, errors="replace") as f:
                f.seek(offset)
                text = f.read()
        except OSError:
            continue
        bad = [
            line
            for line in text.splitlines()
            if any(w in line for w in ("WARNING", "ERROR", "CRITICAL", "Traceback", "Exception"))
        ]
        if bad:
            out[path.name] = bad
    return out


def use_snapshot(rev: str, snapshot: Path) -> str:
    """Run brokers and the test harness from `git archive REV` (the shared work tree may be
    mid-edit), with the C extension built in place; return the short commit."""
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev],
        capture_output=True, text=True, check=True, timeout=10,
    ).stdout.strip()  # fmt: skip
    snapshot.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], capture_output=True, check=True, timeout=120
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive, check=True, timeout=120)
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
        cwd=snapshot, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if build.returncode != 0:
        print(f"note: C extension of {commit} did not build: {build.stderr[-300:]}")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(snapshot / "src"), os.environ.get("PYTHONPATH")])
    )
    sys.path[:0] = [str(snapshot), str(snapshot / "src")]
    return commit


def speedups_loaded() -> str:
    """Whether a broker's Python (same environment) gets the C record walk."""
    probe = (
        "from oncelog.protocol.records import record as r;"
        "print('yes' if getattr(r, '_speedups', None) is not None else 'no')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    return out.stdout.strip() or "?"


def machine_info() -> dict[str, str]:
    import confluent_kafka

    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False, timeout=10,
    ).stdout.strip()  # fmt: skip
    etcd = subprocess.run(
        [shutil.which("etcd") or "etcd", "--version"],
        capture_output=True, text=True, check=False, timeout=10,
    ).stdout.splitlines()  # fmt: skip
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "confluent_kafka": str(confluent_kafka.__version__),
        "librdkafka": str(confluent_kafka.libversion()[0]),
        "etcd": etcd[0] if etcd else "?",
        "oncelog": f"work tree (HEAD {head}, may be dirty)",
        "load_before": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


class Target:
    """The broker processes one case runs against: the cluster, or one broker without etcd."""

    def __init__(self, where: str, base: Path, overrides: dict[str, str]) -> None:
        from tests.broker_process import BrokerProcess
        from tests.cluster_process import Cluster, free_port

        self.where = where
        self.cluster: Any = None
        self.single: Any = None
        if where == "cluster":
            self.cluster = Cluster(base / "cluster", 3, overrides)
        else:
            self.single = BrokerProcess(base / "single" / "broker-1", {"node.id": "1", **overrides})
            self.single.port = free_port()

    def start(self) -> Target:
        if self.cluster is not None:
            self.cluster.start()
            for b in self.cluster.brokers.values():
                _STARTED.append(b.proc)
            _STARTED.append(self.cluster.etcd.proc)
        else:
            self.single.data_dir.parent.mkdir(parents=True, exist_ok=True)
            self.single.start()
            _STARTED.append(self.single.proc)
        return self

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        elif self.single is not None:
            self.single.kill()

    @property
    def brokers(self) -> list[Any]:
        return list(self.cluster.brokers.values()) if self.cluster else [self.single]

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    def broker_pids(self) -> list[int]:
        return [b.proc.pid for b in self.brokers]

    def etcd_pid(self) -> int | None:
        return self.cluster.etcd.proc.pid if self.cluster else None

    def log_paths(self) -> list[Path]:
        paths = [b.log_path for b in self.brokers]
        if self.cluster:
            paths.append(self.cluster.etcd.log_path)
        return paths

    def create_topic(self, name: str, partitions: int, rf: int, min_isr: int) -> None:
        configs = {"min.insync.replicas": str(min_isr)}
        if self.cluster is not None:
            self.cluster.create_topic(name, partitions, rf, configs)
            if rf > 1:
                self.cluster.wait_isr_full(name, 60)
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for f in admin.create_topics([NewTopic(name, partitions, rf, config=configs)]).values():
            f.result(15)

    def partitions(self, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
        if self.cluster is not None:
            return dict(self.cluster.partitions(topic))
        return {}


def consume_count(bootstrap: str, topic: str, parts: int, expected: int) -> dict[str, Any]:
    """Read every partition from offset 0; count messages and distinct values."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-cluster-replication-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    total = 0
    seen: set[bytes] = set()
    eof: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and not (total >= expected and len(eof) == parts):
            for msg in consumer.consume(10_000, 1.0):
                err = msg.error()
                part = int(msg.partition() or 0)
                if err is None:
                    total += 1
                    seen.add((msg.value() or b"")[:9] + bytes([part]))
                    eof.discard(part)
                elif err.code() == err._PARTITION_EOF:
                    eof.add(part)
        hw = sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(parts)
        )
    finally:
        consumer.close()
    return {"consumed": total, "distinct": len(seen), "high_watermarks": hw}


def read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    assert proc.stdout is not None
    result: list[str] = []
    t = threading.Thread(target=lambda: result.append(proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    t.start()
    t.join(timeout)
    if not result or not result[0]:
        raise RuntimeError(f"producer gave no answer within {timeout:.0f}s (rc={proc.poll()})")
    return dict(json.loads(result[0]))


def run_case(target: Target, case: str, rnd: int, args: argparse.Namespace) -> dict[str, Any]:
    c = CASES[case]
    topic = f"{case}-r{rnd}"
    target.create_topic(topic, args.partitions, c["rf"], c["min_isr"])
    isr_before = target.partitions(topic)
    logs = log_sizes(target.log_paths())
    spec = {
        "bootstrap": target.bootstrap,
        "topic": topic,
        "n": args.messages,
        "size": args.size,
        "partitions": args.partitions,
        "acks": c["acks"],
        "idem": c["idem"],
        "linger_ms": args.linger_ms,
        "sample_every": args.sample_every,
        "paced_rate": args.paced_rate,
        "paced_seconds": args.paced_seconds,
        "timeout": args.case_timeout,
    }
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), "--_producer", json.dumps(spec)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    _STARTED.append(proc)
    assert proc.stdin is not None
    try:
        ready = read_json_line(proc, 60)
        if "error" in ready:
            raise RuntimeError(ready["error"])
        pids = target.broker_pids()
        etcd = target.etcd_pid()
        # Idle CPU of the brokers for 2 s before the run: background work (session
        # keep-alives, follower long polls) that is in every figure below.
        idle0 = [cpu_seconds(p) for p in pids]
        time.sleep(2)
        idle = sum(cpu_seconds(p) for p in pids) - sum(idle0)
        cpu0 = [cpu_seconds(p) for p in pids]
        etcd0 = cpu_seconds(etcd) if etcd else 0.0
        wall0 = time.monotonic()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        thr = read_json_line(proc, args.case_timeout + 30)
        wall = time.monotonic() - wall0
        cpu1 = [cpu_seconds(p) for p in pids]
        etcd1 = cpu_seconds(etcd) if etcd else 0.0
        proc.stdin.write("go\n")
        proc.stdin.flush()
        paced = read_json_line(proc, args.paced_seconds + 60)
        proc.stdin.close()
        proc.wait(30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    isr_after = target.partitions(topic)
    check = consume_count(target.bootstrap, topic, args.partitions, paced["total_acked"])
    acked = thr["acked"]
    per_broker = [b - a for a, b in zip(cpu0, cpu1, strict=True)]
    return {
        "case": case,
        "round": rnd,
        "topic": topic,
        "acked": acked,
        "errors": thr["errors"],
        "first_error": thr["first_error"] or paced["first_error"],
        "seconds": thr["seconds"],
        "msgs_per_s": acked / thr["seconds"] if thr["seconds"] > 0 else 0.0,
        "broker_cpu_s": sum(per_broker),
        "broker_cpu_each_s": per_broker,
        "broker_us_per_msg": sum(per_broker) / acked * 1e6 if acked else float("nan"),
        "broker_cores": sum(per_broker) / wall if wall > 0 else 0.0,
        "etcd_cpu_s": etcd1 - etcd0,
        "client_us_per_msg": thr["client_cpu"] / acked * 1e6 if acked else float("nan"),
        "idle_broker_cores": idle / 2,
        "lat_samples": len(thr["lat"]),
        "p50_ms": pct(thr["lat"], 50) * 1e3,
        "p99_ms": pct(thr["lat"], 99) * 1e3,
        "rd_p50_ms": pct(thr["rdlat"], 50) * 1e3,
        "rd_p99_ms": pct(thr["rdlat"], 99) * 1e3,
        "paced_acked": paced["acked"],
        "paced_p50_ms": pct(paced["lat"], 50) * 1e3,
        "paced_p99_ms": pct(paced["lat"], 99) * 1e3,
        "paced_max_ms": max(paced["lat"], default=float("nan")) * 1e3,
        "total_acked": paced["total_acked"],
        **check,
        "check_ok": check["consumed"] == paced["total_acked"] == check["distinct"]
        and check["high_watermarks"] == paced["total_acked"],
        "isr_before": {str(k): v for k, v in isr_before.items()},
        "isr_after": {str(k): v for k, v in isr_after.items()},
        "isr_shrunk": any(
            sorted(isr_after.get(p, (0, [], []))[2]) != sorted(v[2]) for p, v in isr_before.items()
        ),
        "log_lines": new_log_lines(logs),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def fmt(x: float, digits: int = 0) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:,.{digits}f}"


def summary(results: list[dict[str, Any]], cases: list[str]) -> str:
    head = (
        "| case | brokers | RF | acks | idempotence | runs | msg/s (median) | msg/s (runs) "
        "| broker CPU us/msg | broker cores busy | etcd CPU s | client CPU us/msg "
        "| p50 / p99 ms (full speed) | p50 / p99 ms (paced) | consumed = acked |"
    )
    lines = [head, "|" + "---|" * head.count(" | ") + "---|"]
    for case in cases:
        rs = [r for r in results if r["case"] == case]
        if not rs:
            continue
        c = CASES[case]

        def med(key: str, rs: list[dict[str, Any]] = rs) -> float:
            return float(statistics.median(r[key] for r in rs))

        lines.append(
            "| "
            + " | ".join(
                [
                    case,
                    "3 + etcd" if c["where"] == "cluster" else "1, no etcd",
                    str(c["rf"]) + (f" (min ISR {c['min_isr']})" if c["rf"] > 1 else ""),
                    c["acks"],
                    "on" if c["idem"] else "off",
                    str(len(rs)),
                    fmt(med("msgs_per_s")),
                    " / ".join(fmt(r["msgs_per_s"]) for r in rs),
                    fmt(med("broker_us_per_msg"), 2),
                    fmt(med("broker_cores"), 2),
                    fmt(med("etcd_cpu_s"), 2),
                    fmt(med("client_us_per_msg"), 2),
                    f"{fmt(med('p50_ms'), 1)} / {fmt(med('p99_ms'), 1)}",
                    f"{fmt(med('paced_p50_ms'), 2)} / {fmt(med('paced_p99_ms'), 2)}",
                    "ok" if all(r["check_ok"] for r in rs) else "MISMATCH",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def ratios(results: list[dict[str, Any]]) -> list[str]:
    def med(case: str) -> float | None:
        v = [r["msgs_per_s"] for r in results if r["case"] == case]
        return statistics.median(v) if v else None

    out = [
        "Kafka 2014 (three machines, 6 partitions, 100 B): RF=3 acks=all 421,823 / "
        "RF=1 acks=1 821,557 records/s = 0.51"
    ]
    rf3 = med("cluster-rf3-all")
    for other in ("cluster-rf1-ack1", "cluster-rf1-all", "single-rf1-ack1", "single-rf1-all"):
        o = med(other)
        if rf3 and o:
            out.append(f"oncelog cluster-rf3-all / {other}: {rf3:,.0f} / {o:,.0f} = {rf3 / o:.2f}")
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=500_000, help="messages per timed run")
    p.add_argument("--size", type=int, default=100, help="value bytes")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--linger-ms", type=float, default=5)
    p.add_argument("--rounds", type=int, default=1, help="runs of every case, interleaved")
    p.add_argument(
        "--cases",
        default="cluster-rf3-all,cluster-rf1-ack1,cluster-rf1-all,single-rf1-ack1,single-rf1-all",
        help="comma list of " + ",".join(CASES),
    )
    p.add_argument("--sample-every", type=int, default=100, help="time every N-th message")
    p.add_argument("--paced-rate", type=float, default=2000, help="msg/s of the paced phase")
    p.add_argument("--paced-seconds", type=float, default=5)
    p.add_argument("--case-timeout", type=float, default=300, help="limit of one timed run, s")
    p.add_argument("--timeout", type=float, default=1800, help="limit of the whole run, s")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="broker setting"
    )
    p.add_argument(
        "--oncelog-rev",
        help="run brokers and tests/cluster_process.py from `git archive REV` (e.g. HEAD) "
        "instead of the work tree",
    )
    p.add_argument("--json", type=Path, help="write every run and the machine info here")
    p.add_argument("--keep", action="store_true", help="keep the temporary dir (data, logs)")
    p.add_argument("--_producer", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def print_run(r: dict[str, Any]) -> None:
    print(
        f"{r['case']} r{r['round']}: {r['msgs_per_s']:,.0f} msg/s, "
        f"{r['broker_us_per_msg']:.2f} broker us/msg "
        f"(each {', '.join(f'{x:.2f}' for x in r['broker_cpu_each_s'])} s, "
        f"{r['broker_cores']:.2f} cores; idle before {r['idle_broker_cores']:.3f}), "
        f"etcd {r['etcd_cpu_s']:.2f} s, client {r['client_us_per_msg']:.2f} us/msg, "
        f"p50/p99 {r['p50_ms']:.1f}/{r['p99_ms']:.1f} ms "
        f"(librdkafka {r['rd_p50_ms']:.1f}/{r['rd_p99_ms']:.1f}), paced "
        f"{r['paced_p50_ms']:.2f}/{r['paced_p99_ms']:.2f}/max {r['paced_max_ms']:.1f} ms; "
        f"errors {r['errors']}; consumed {r['consumed']} distinct {r['distinct']} "
        f"hw {r['high_watermarks']} acked {r['total_acked']} "
        f"{'ok' if r['check_ok'] else 'MISMATCH'}; "
        f"ISR {'shrunk' if r['isr_shrunk'] else 'kept'}; load {r['load']}",
        flush=True,
    )
    if r["first_error"]:
        print(f"  first error: {r['first_error']}")
    for name, lines in r["log_lines"].items():
        print(f"  {name}: {len(lines)} lines at WARNING+, first:")
        for line in lines[:5]:
            print(f"    {line[:300]}")


def _kill_started() -> None:
    for proc in reversed(_STARTED):
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
    _STARTED.clear()


def report(
    args: argparse.Namespace,
    info: dict[str, str],
    overrides: dict[str, str],
    results: list[dict[str, Any]],
    failed: str | None,
    cases: list[str],
) -> None:
    print()
    print(
        f"{args.messages:,} x {args.size} B over {args.partitions} partitions, one producer, "
        f"linger.ms={args.linger_ms:g}; latency: every {args.sample_every}th message at full "
        f"speed, every message at {args.paced_rate:g} msg/s paced"
    )
    print(summary(results, cases))
    print()
    for line in ratios(results):
        print(line)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    write_json(args, info, overrides, results, failed)


def bench_start(
    args: argparse.Namespace, prefix: str
) -> tuple[dict[str, str], Path, dict[str, str]]:
    """Broker settings (Kafka's replica defaults, then `--override`), a temporary dir (the
    broker source of `--oncelog-rev` unpacked under it) and the machine info, printed: the
    start every cluster benchmark shares (this one, latency.py, cores.py)."""
    overrides = dict(BROKER_DEFAULTS)
    for kv in args.override:
        key, _, value = kv.partition("=")
        overrides[key] = value
    base = Path(tempfile.mkdtemp(prefix=prefix))
    info = machine_info()
    if args.oncelog_rev:
        info["oncelog"] = f"commit {use_snapshot(args.oncelog_rev, base / 'src')}"
    info["c_record_walk"] = speedups_loaded()
    print("machine:", json.dumps(info))
    print("broker settings:", json.dumps(overrides), flush=True)
    return overrides, base, info


def write_json(
    args: argparse.Namespace,
    info: dict[str, str],
    overrides: dict[str, str],
    results: list[dict[str, Any]],
    failed: str | None,
) -> None:
    """Every run with the machine, the arguments and the broker settings, to `--json`."""
    if not args.json:
        return
    everything = {
        "machine": info,
        "args": {k: str(v) for k, v in vars(args).items()},
        "broker_settings": overrides,
        "runs": results,
        "failed": failed,
    }
    args.json.write_text(json.dumps(everything, indent=1))


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args._producer:
        producer_main(json.loads(args._producer))
        return 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown cases: {unknown}", file=sys.stderr)
        return 2

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"--timeout {args.timeout:.0f}s reached")

    atexit.register(_kill_started)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(args.timeout))

    overrides, base, info = bench_start(args, "oncelog-bench-cluster-")
    results: list[dict[str, Any]] = []
    failed: str | None = None
    try:
        for where in ("cluster", "single"):
            mine = [c for c in cases if CASES[c]["where"] == where]
            if not mine:
                continue
            target = Target(where, base, overrides).start()
            print(f"{where}: brokers {target.broker_pids()} etcd {target.etcd_pid()}"
                  f" at {target.bootstrap}")  # fmt: skip
            try:
                for rnd in range(1, args.rounds + 1):
                    for case in mine:
                        results.append(run_case(target, case, rnd, args))
                        print_run(results[-1])
            finally:
                target.close()
    except (Exception, TimeoutError) as exc:
        failed = f"{type(exc).__name__}: {exc}"
        print(f"FAILED: {failed}", file=sys.stderr)
    finally:
        signal.alarm(0)
        _kill_started()
        if args.keep or failed:
            print(f"kept {base} (data dirs and logs)")
        else:
            shutil.rmtree(base, ignore_errors=True)

    report(args, info, overrides, results, failed, cases)
    return 1 if failed or not all(r["check_ok"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
