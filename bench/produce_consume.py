"""Produce/consume throughput of oncelog against librdkafka's built-in mock cluster.

For every (message size, partition count) case the same workload runs against both targets:

* a confluent-kafka producer in its own process produces N messages round-robin over the P
  partitions (acks=all, linger.ms=5) and is timed from the first produce() to the last
  delivery report;
* a confluent-kafka consumer in its own process assigns all partitions from offset 0 and is
  timed until it has received all N messages.

The mock cluster lives in a long-lived helper process (oncelog.verify.mock_cluster), created
through the librdkafka C API with ctypes on the very library confluent-kafka ships, because
the mock has no CreateTopics handler (its auto-created topics always get 4 partitions); the
helper creates each P-partition topic with rd_kafka_mock_topic_create() and reads the
address with rd_kafka_mock_cluster_bootstraps(). The mock keeps at most 5 MiB per partition
(older batches are silently dropped), so comparison runs are sized to stay below a
per-partition budget, and the consumer checks that every low watermark is still 0.

oncelog is started with tests/broker_process.py on 127.0.0.1 with a fresh data dir.
Every phase is bounded by a timeout and every process this script starts is killed by its
pid on the way out. Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from oncelog.verify.mock_cluster import MockCluster

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
MIB = 1024 * 1024
RECORD_OVERHEAD = 40  # generous per-record overhead in a v2 batch, for the mock's budget
PROFILE_HZ = 200
LOOP_FRAMES = ("Runner.run (", "run_forever (", "run_until_complete (")
WORKER_ROLES = ("_produce", "_consume")


class BenchError(RuntimeError):
    pass


# -- process bookkeeping -----------------------------------------------------------------------

_STARTED: list[subprocess.Popen[Any]] = []


def _track(proc: subprocess.Popen[Any]) -> subprocess.Popen[Any]:
    _STARTED.append(proc)
    return proc


def _kill_started() -> None:
    """Kill (by pid) every process this script started that is still running."""
    for proc in reversed(_STARTED):
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
    _STARTED.clear()


def _on_signal(signum: int, _frame: Any) -> None:
    _kill_started()
    sys.exit(128 + signum)


# -- workers (each runs in its own process) -------------------------------------------------


def _cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process (all threads) so far, from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rpartition(")")[2].split()
    except OSError:
        return float("nan"), float("nan")
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def _cpu_seconds(pid: int) -> float:
    """CPU seconds of a process so far, to the nanosecond: the sum of its threads'
    /proc/PID/task/TID/schedstat (the clock ticks of /proc/PID/stat are 10 ms, too coarse for
    a phase of a tenth of a second). Falls back to the ticks where schedstat is missing."""
    try:
        total = 0
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        return sum(_cpu_split(pid))


def _common_conf(spec: dict[str, Any]) -> dict[str, Any]:
    return {"bootstrap.servers": spec["bootstrap"], "client.id": f"bench-{spec['role']}"}


def worker_produce(spec: dict[str, Any]) -> dict[str, Any]:
    """Produce N messages round-robin, timed from the first produce() to the last delivery
    report. `spec["conf"]` adds librdkafka settings (bench/bulk.py's 1 MiB batches) and
    `spec["poll_every"]` (a power of two) how often the loop serves delivery reports."""
    from confluent_kafka import KafkaException, Producer

    n, size, parts, topic = spec["n"], spec["size"], spec["partitions"], spec["topic"]
    deadline = time.monotonic() + spec["timeout"]
    state = {"delivered": 0, "errors": 0, "first_error": None, "last": 0.0}

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or str(err)
        else:
            state["delivered"] += 1
        state["last"] = time.perf_counter()

    conf = {
        **_common_conf(spec),
        "acks": "all",
        "linger.ms": spec["linger_ms"],
        "enable.idempotence": spec["idempotence"],
        "compression.type": "none",
        "on_delivery": on_delivery,
    }
    conf.update(spec.get("conf", {}))
    producer = Producer(conf)
    try:
        # Warm-up outside the timed window: connection, ApiVersions, metadata and (with
        # idempotence) the producer id, through one message to a separate topic.
        meta = producer.list_topics(topic, timeout=15)
        got = len(meta.topics[topic].partitions) if topic in meta.topics else 0
        if got != parts:
            return {"ok": False, "error": f"topic {topic} has {got} partitions, want {parts}"}
        producer.produce(spec["warmup_topic"], b"warm-up", partition=0)
        if producer.flush(15) != 0 or state["delivered"] != 1:
            return {"ok": False, "error": f"warm-up failed: {state['first_error']}"}
        state["delivered"] = 0
    except KafkaException as exc:
        return {"ok": False, "error": f"metadata: {exc}"}
    value = os.urandom(size)
    produce, poll = producer.produce, producer.poll
    poll_mask = spec.get("poll_every", 1024) - 1
    t0 = time.perf_counter()
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
        if i & poll_mask == 0:
            poll(0)
    remaining = producer.flush(max(0.0, deadline - time.monotonic()))
    elapsed = state["last"] - t0
    return {
        "ok": state["delivered"] == n and remaining == 0,
        "error": None
        if state["delivered"] == n
        else f"delivered {state['delivered']}/{n}, "
        f"{state['errors']} errors (first: {state['first_error']}), {remaining} in queue",
        "n": state["delivered"],
        "seconds": elapsed,
        "msgs_per_s": state["delivered"] / elapsed if elapsed > 0 else 0.0,
        "mb_per_s": state["delivered"] * size / 1e6 / elapsed if elapsed > 0 else 0.0,
    }


def worker_consume(spec: dict[str, Any]) -> dict[str, Any]:
    """Read every partition from offset 0 until all N arrived, timed from assign().
    `spec["conf"]` adds librdkafka settings (bench/bulk.py's large fetches), then
    `spec["consumer_conf"]` (`--consumer-setting`, the same for every target)."""
    from confluent_kafka import Consumer, TopicPartition

    n, size, parts, topic = spec["n"], spec["size"], spec["partitions"], spec["topic"]
    deadline = time.monotonic() + spec["timeout"]
    consumer = Consumer(
        {
            **_common_conf(spec),
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "error",
            # librdkafka's default (1000 ms) parks a partition whose local queue is full for a
            # whole second; a Python loop that is slower than the fetcher then stalls for
            # fetch.wait.max.ms on the caught-up partitions. Same value for both targets.
            "fetch.queue.backoff.ms": spec["fetch_queue_backoff_ms"],
            **spec.get("conf", {}),
            **spec.get("consumer_conf", {}),
        }
    )
    try:
        # Outside the timed window: connect, and check nothing was dropped (the mock's cap).
        lows, highs = [], []
        for p in range(parts):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15)
            lows.append(low)
            highs.append(high)
        if any(lows) or sum(highs) != n:
            return {
                "ok": False,
                "error": f"watermarks: low {sorted(set(lows))}, sum(high) {sum(highs)} != {n}"
                " (data dropped or missing)",
            }
        received = nbytes = errors = 0
        first_error = None
        batch = spec.get("batch", 10_000)
        t0 = time.perf_counter()
        t_end = t0
        consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
        while received < n and time.monotonic() < deadline:
            # consume() waits for the whole count (or the timeout): never ask for more than
            # is left, or the last call would add up to the timeout to the measurement.
            for msg in consumer.consume(min(batch, n - received), 0.5):
                if msg.error() is not None:
                    errors += 1
                    first_error = first_error or str(msg.error())
                    continue
                received += 1
                nbytes += len(msg.value())
            t_end = time.perf_counter()
        elapsed = t_end - t0
    finally:
        consumer.close()
    ok = received == n and nbytes == n * size and errors == 0
    return {
        "ok": ok,
        "error": None
        if ok
        else f"received {received}/{n}, {nbytes} bytes, {errors} errors (first: {first_error})",
        "n": received,
        "seconds": elapsed,
        "msgs_per_s": received / elapsed if elapsed > 0 else 0.0,
        "mb_per_s": nbytes / 1e6 / elapsed if elapsed > 0 else 0.0,
    }


def _worker_main(role: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    spec["role"] = role.lstrip("_")
    cpu0 = _cpu_seconds(os.getpid())
    try:
        result = worker_produce(spec) if role == "_produce" else worker_consume(spec)
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["client_cpu_s"] = _cpu_seconds(os.getpid()) - cpu0
    print(json.dumps(result), flush=True)
    return 0


# -- targets ---------------------------------------------------------------------------------


class MockTarget(MockCluster):
    """librdkafka's mock cluster (oncelog.verify.mock_cluster), tracked for cleanup."""

    name = "mock"

    def __init__(self) -> None:
        super().__init__()
        _track(self.proc)

    def close(self) -> None:
        self.stop()


def _use_snapshot(rev: str, snapshot: Path) -> None:
    """Run the broker from `git archive REV` (the work tree may be mid-edit), with its
    optional C extension built in place when the commit has one."""
    snapshot.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev],
        capture_output=True,
        check=True,
        timeout=120,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(snapshot)], input=archive, check=True, timeout=120)
    if (snapshot / "setup.py").exists():
        build = subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=snapshot,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if build.returncode != 0:
            print(f"note: C extension of {rev} did not build: {build.stderr[-300:]}")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(snapshot / "src"), os.environ.get("PYTHONPATH")])
    )


@contextlib.contextmanager
def oncelog_under_test(rev: str | None, prefix: str) -> Iterator[dict[str, str]]:
    """The broker's code for a bench script's run: `git archive REV` built in a temporary
    directory when `rev` is given (else the work tree), the repository importable (tests/),
    and the machine's description, printed as the run's first line and yielded."""
    with tempfile.TemporaryDirectory(prefix=prefix) as root:
        if rev:
            _use_snapshot(rev, Path(root) / "oncelog-src")
        sys.path.insert(0, str(REPO))
        machine = machine_info(rev)
        print(f"oncelog {rev or 'work tree'}, machine {machine}")
        yield machine


def _speedups_loaded() -> str:
    """Whether the broker's Python (same env as the broker process) gets the C record walk."""
    probe = (
        "from oncelog.protocol.records import record as r;"
        "print('yes' if getattr(r, '_speedups', None) is not None else 'no')"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


class OncelogTarget:
    name = "oncelog"

    def __init__(self, workdir: Path, rev: str | None) -> None:
        sys.path.insert(0, str(REPO))
        from tests.broker_process import BrokerProcess

        if rev is not None:
            _use_snapshot(rev, workdir / "oncelog-src")
        self.speedups = _speedups_loaded()
        self.broker = BrokerProcess(workdir / "oncelog-data")
        self.broker.start()
        assert self.broker.proc is not None
        _track(self.broker.proc)
        self.bootstrap = self.broker.bootstrap
        self.pid = self.broker.proc.pid
        from confluent_kafka.admin import AdminClient

        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import NewTopic

        for future in self.admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(30)

    def delete_topic(self, topic: str) -> None:
        """Delete the topic's files, and with them their dirty pages: a run left behind
        gigabytes of data that the page cache was still writing back during the next cases,
        and at 1 KiB x 64 the broker's produce took 4.2 us of system CPU per message instead
        of 0.5 (ext4 writeback throttling the writer), a cost of the disk, not of the broker."""
        from confluent_kafka import KafkaException

        for future in self.admin.delete_topics([topic]).values():
            try:
                future.result(30)
            except KafkaException as exc:
                raise BenchError(f"delete {topic}: {exc}") from exc

    def close(self) -> None:
        del self.admin  # disconnect before the broker goes away
        self.broker.stop()


# -- profiling (py-spy, optional) ------------------------------------------------------------


class Profiler:
    """py-spy record (raw collapsed stacks) against a pid for the length of one phase."""

    def __init__(self, pid: int, out: Path) -> None:
        exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.out = out
        self.proc = _track(
            subprocess.Popen(
                [
                    *(exe, "record", "--pid", str(pid), "--rate", str(PROFILE_HZ)),
                    *("--format", "raw", "--threads", "--nonblocking", "--output", str(out)),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        time.sleep(1.0)  # let it attach before the phase starts
        self.started = time.monotonic()
        self.wall = 0.0

    def stop(self) -> None:
        self.wall = time.monotonic() - self.started
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


_FRAME = re.compile(r"^(?P<func>.*?) \((?P<file>[^()]*?)(?::\d+)?\)$")


def _short(frame: str) -> str:
    match = _FRAME.match(frame)
    if not match:
        return frame
    file = match["file"]
    for marker in ("/src/oncelog/", "/site-packages/", "/lib/python3"):
        if marker in file:
            file = file.split(marker, 1)[1]
            break
    return f"{match['func']} ({file})"


def summarize_profile(path: Path, wall: float, top: int = 15) -> dict[str, Any]:
    """Self and inclusive share per function of the busiest thread, from py-spy raw output.

    py-spy (without --idle) records only samples where the thread is running, so the samples
    over `wall` x rate is how busy the thread was; shares are of those busy samples. A leaf
    frame of `Runner.run` is time inside uvloop's C code (socket reads/writes, the loop).
    """
    per_thread: dict[str, list[tuple[list[str], int]]] = {}
    for line in path.read_text().splitlines():
        stack_text, _, count = line.rpartition(" ")
        if not stack_text or not count.isdigit():
            continue
        frames = stack_text.split(";")
        thread = next((f for f in frames[:2] if f.startswith("thread ")), "thread ?")
        frames = [_short(f) for f in frames if not f.startswith(("process ", "thread "))]
        per_thread.setdefault(thread, []).append((frames, int(count)))
    if not per_thread:
        return {"samples": 0}
    thread, stacks = max(per_thread.items(), key=lambda item: sum(c for _, c in item[1]))
    total = sum(c for _, c in stacks)
    own: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    for frames, count in stacks:
        if not frames:
            continue
        own[frames[-1]] += count
        by_file[frames[-1].rpartition(" (")[2].rstrip(")")] += count
        # Frames from the process entry down to the event loop are on every stack: skip them.
        below_loop = max(
            (i + 1 for i, f in enumerate(frames) if f.startswith(LOOP_FRAMES)), default=0
        )
        for name in set(frames[below_loop:]):
            incl[name] += count

    def pct(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(k, 100.0 * v / total) for k, v in counter.most_common(top)]

    return {
        "thread": thread,
        "samples": total,
        "busy_pct": 100.0 * total / max(wall * PROFILE_HZ, 1.0),
        "self": pct(own),
        "self_by_file": pct(by_file),
        "inclusive": pct(incl),
    }


# -- orchestration ---------------------------------------------------------------------------


@dataclass
class Row:
    target: str
    size: int
    partitions: int
    n: int
    produce: list[dict[str, Any]] = field(default_factory=list)
    consume: list[dict[str, Any]] = field(default_factory=list)
    #: The produce-only runs of `long_n` messages (`--long-n`), on a topic of their own.
    long_n: int = 0
    produce_long: list[dict[str, Any]] = field(default_factory=list)

    def median(self, phase: str, key: str) -> float:
        runs = [r for r in getattr(self, phase) if r.get("ok")]
        return statistics.median(r[key] for r in runs) if runs else float("nan")

    @property
    def ok(self) -> bool:
        runs = self.produce + self.consume + self.produce_long
        return bool(runs) and all(r.get("ok") for r in runs)


def _run_worker(
    role: str, spec: dict[str, Any], timeout: float, script: Path = SCRIPT
) -> dict[str, Any]:
    """Run `script ROLE SPEC_JSON` in its own process; its last stdout line is the result."""
    spec = {**spec, "timeout": timeout}
    proc = _track(
        subprocess.Popen(
            [sys.executable, str(script), role, json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    try:
        out, err = proc.communicate(timeout=timeout + 60)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"ok": False, "error": f"{role} worker killed after {timeout + 60:.0f}s"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"ok": False, "error": f"{role} exit {proc.returncode}: {err.strip()[-500:]}"}
    return dict(json.loads(lines[-1]))


def run_case(
    target: MockTarget | OncelogTarget,
    row: Row,
    args: argparse.Namespace,
    profile_dir: Path | None,
) -> None:
    topic = f"bench-{row.size}b-{row.partitions}p-{uuid.uuid4().hex[:6]}"
    target.create_topic(topic, row.partitions)
    target.create_topic(f"{topic}-warmup", 1)
    spec = {
        "warmup_topic": f"{topic}-warmup",
        "bootstrap": target.bootstrap,
        "topic": topic,
        "n": row.n,
        "size": row.size,
        "partitions": row.partitions,
        "linger_ms": args.linger_ms,
        "idempotence": args.idempotence == "on",
        "fetch_queue_backoff_ms": args.fetch_queue_backoff_ms,
        "consumer_conf": dict(kv.split("=", 1) for kv in args.consumer_setting),
    }
    tag = f"{target.name}-{row.size}b-{row.partitions}p-{row.n}"
    for phase in ("produce", "consume"):
        if not _phase(target, row, phase, spec, tag, args, profile_dir):
            break
    with contextlib.suppress(BenchError):
        target.delete_topic(topic)
        target.delete_topic(f"{topic}-warmup")
    if row.long_n:
        _produce_long(target, row, spec, args)


def _produce_long(
    target: MockTarget | OncelogTarget, row: Row, spec: dict[str, Any], args: argparse.Namespace
) -> None:
    """The produce-only phase: `row.long_n` messages on a topic of their own. The comparison
    phases stay small enough for the mock to keep every message for the consumer (5 MiB per
    partition), which at 1 KiB x 8 is a window of 50-70 ms, too short for a stable CPU figure;
    produce alone does not need the mock to keep anything."""
    topic = f"bench-long-{row.size}b-{row.partitions}p-{uuid.uuid4().hex[:6]}"
    target.create_topic(topic, row.partitions)
    target.create_topic(f"{topic}-warmup", 1)
    spec = {**spec, "topic": topic, "warmup_topic": f"{topic}-warmup", "n": row.long_n}
    tag = f"{target.name}-{row.size}b-{row.partitions}p-{row.long_n}"
    _phase(target, row, "produce_long", spec, tag, args, None)
    with contextlib.suppress(BenchError):
        target.delete_topic(topic)
        target.delete_topic(f"{topic}-warmup")


def _phase(
    target: MockTarget | OncelogTarget,
    row: Row,
    phase: str,
    spec: dict[str, Any],
    tag: str,
    args: argparse.Namespace,
    profile_dir: Path | None,
) -> bool:
    """Run one phase's worker, measure the broker's CPU around it, record and print it."""
    prof = None
    if profile_dir is not None and target.name in args.profile_targets:
        prof = Profiler(target.pid, profile_dir / f"{tag}-{phase}.txt")
    cpu0, (_, sys0) = _cpu_seconds(target.pid), _cpu_split(target.pid)
    role = "_produce" if phase == "produce_long" else f"_{phase}"
    result = _run_worker(role, spec, args.timeout)
    result["server_cpu_s"] = _cpu_seconds(target.pid) - cpu0
    result["server_sys_s"] = _cpu_split(target.pid)[1] - sys0  # in 10 ms ticks
    result["loadavg"] = os.getloadavg()[0]
    if prof is not None:
        prof.stop()
        result["profile"] = str(prof.out)
        result["profile_wall"] = prof.wall
    getattr(row, phase).append(result)
    status = "ok" if result.get("ok") else f"FAILED: {result.get('error')}"
    n = spec["n"]
    us_per_msg = result["server_us_per_msg"] = 1e6 * result["server_cpu_s"] / n
    if "client_cpu_s" in result:
        result["client_us_per_msg"] = 1e6 * result["client_cpu_s"] / n
    print(
        f"  {tag:<34} {phase:<8} {result.get('msgs_per_s', 0):>11,.0f} msg/s "
        f"{result.get('mb_per_s', 0):>8.1f} MB/s  {result.get('seconds', 0):7.2f}s  "
        f"server {us_per_msg:5.2f} us/msg "
        f"(sys {1e6 * result['server_sys_s'] / n:4.2f})  "
        f"load {result['loadavg']:.1f}  {status}",
        flush=True,
    )
    return bool(result.get("ok"))


def comparison_n(size: int, partitions: int, args: argparse.Namespace) -> int:
    """Largest N (capped) that keeps every mock partition under the per-partition budget."""
    budget = int(args.mock_partition_mib * MIB)
    fit = budget * partitions // (size + RECORD_OVERHEAD)
    n = min(args.max_n, fit)
    return n - n % partitions


def _fmt(value: float, digits: int = 0) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def render_table(rows: list[Row]) -> str:
    mocks = {(r.size, r.partitions, r.n): r for r in rows if r.target == "mock"}
    head = (
        "| target | msg size | partitions | N | produce msg/s | produce MB/s "
        "| consume msg/s | consume MB/s | produce ratio | consume ratio |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        ratios = ["", ""]
        mock = mocks.get((r.size, r.partitions, r.n))
        if r.target != "mock" and mock is not None:
            for i, phase in enumerate(("produce", "consume")):
                ours, theirs = r.median(phase, "msgs_per_s"), mock.median(phase, "msgs_per_s")
                ratios[i] = _fmt(ours / theirs, 2)
        elif r.target != "mock":
            ratios = ["n/a (no mock run)", "n/a"]
        cells = [
            r.target + ("" if r.ok else " (FAILED)"),
            f"{r.size} B",
            str(r.partitions),
            f"{r.n:,}",
            _fmt(r.median("produce", "msgs_per_s")),
            _fmt(r.median("produce", "mb_per_s"), 1),
            _fmt(r.median("consume", "msgs_per_s")),
            _fmt(r.median("consume", "mb_per_s"), 1),
            *ratios,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_cpu_table(rows: list[Row]) -> str:
    """CPU cost per message: less sensitive to other load on the machine than msg/s."""
    lines = [
        "| target | msg size | partitions | N | server CPU us/msg produce | consume "
        "| client CPU us/msg produce | consume |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        cells = [
            r.target,
            f"{r.size} B",
            str(r.partitions),
            f"{r.n:,}",
            _fmt(r.median("produce", "server_us_per_msg"), 2),
            _fmt(r.median("consume", "server_us_per_msg"), 2),
            _fmt(r.median("produce", "client_us_per_msg"), 2),
            _fmt(r.median("consume", "client_us_per_msg"), 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render_long_table(rows: list[Row]) -> str:
    """The produce-only runs: broker CPU per message and throughput against the mock's."""
    mocks = {(r.size, r.partitions): r for r in rows if r.target == "mock" and r.long_n}
    lines = [
        "| target | msg size | partitions | N | server CPU us/msg (mock) | CPU ratio "
        "| msg/s (mock) | throughput ratio |",
        "|" + "---|" * 8,
    ]
    for r in rows:
        if r.target == "mock" or not r.long_n:
            continue
        mock = mocks.get((r.size, r.partitions))
        ours_cpu = r.median("produce_long", "server_us_per_msg")
        ours_rate = r.median("produce_long", "msgs_per_s")
        nan = float("nan")
        mock_cpu = mock.median("produce_long", "server_us_per_msg") if mock else nan
        mock_rate = mock.median("produce_long", "msgs_per_s") if mock else nan
        cells = [
            r.target + ("" if r.ok else " (FAILED)"),
            f"{r.size} B",
            str(r.partitions),
            f"{r.long_n:,}",
            f"{_fmt(ours_cpu, 2)} ({_fmt(mock_cpu, 2)})",
            _fmt(ours_cpu / mock_cpu, 2),
            f"{_fmt(ours_rate)} ({_fmt(mock_rate)})",
            _fmt(ours_rate / mock_rate, 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_info(rev: str | None) -> dict[str, str]:
    import confluent_kafka

    model = "?"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", rev or "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        timeout=10,
    ).stdout.strip()
    return {
        "nproc": str(os.cpu_count()),
        "cpu": model,
        "python": platform.python_version(),
        "confluent_kafka": confluent_kafka.__version__,
        "librdkafka": confluent_kafka.libversion()[0],
        "oncelog": f"commit {commit}" if rev else f"work tree (HEAD {commit}, may be dirty)",
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="mock,oncelog", help="comma list of mock,oncelog")
    p.add_argument("--sizes", default="100,1024", help="message sizes in bytes")
    p.add_argument("--partitions", default="8,64", help="partition counts")
    p.add_argument("--max-n", type=int, default=300_000, help="cap on N for comparison runs")
    p.add_argument(
        "--mock-partition-mib",
        type=float,
        default=4.0,
        help="bytes per mock partition to stay under (the mock drops data past 5 MiB)",
    )
    p.add_argument(
        "--large-n",
        type=int,
        default=1_000_000,
        help="oncelog-only run of this many messages (0: skip)",
    )
    p.add_argument(
        "--long-n",
        type=int,
        default=1_000_000,
        help="per case and target, a produce-only run of this many messages after the "
        "comparison phases (0: skip); the mock drops what it cannot keep, which produce "
        "does not need",
    )
    p.add_argument("--large-size", type=int, default=100)
    p.add_argument("--large-partitions", type=int, default=8)
    p.add_argument("--idempotence", choices=("on", "off"), default="off")
    p.add_argument(
        "--oncelog-rev",
        help="run the broker from `git archive REV src` instead of the installed work tree",
    )
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument(
        "--fetch-queue-backoff-ms",
        type=int,
        default=10,
        help="consumer fetch.queue.backoff.ms (librdkafka default 1000; see worker_consume)",
    )
    p.add_argument(
        "--consumer-setting",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka consumer setting, the same for every target (e.g. "
        "fetch.max.bytes=1048576: RESULTS.md section 1, nineteenth round)",
    )
    p.add_argument("--repeat", type=int, default=1, help="runs per case; the median is shown")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    p.add_argument("--profile", type=Path, help="write py-spy raw profiles of the broker here")
    p.add_argument("--profile-targets", default="oncelog", help="targets to profile")
    p.add_argument("--json", type=Path, help="write all results as JSON here")
    return p.parse_args(argv)


def _print_profiles(rows: list[Row]) -> None:
    for row in rows:
        for phase in ("produce", "consume"):
            for result in getattr(row, phase):
                if not result.get("profile") or not Path(result["profile"]).exists():
                    continue
                summary = summarize_profile(Path(result["profile"]), result["profile_wall"])
                result["profile_summary"] = summary
                print(f"\n### {row.target} {row.size} B x{row.partitions} N={row.n:,} {phase}")
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
    sizes = [int(s) for s in args.sizes.split(",")]
    partition_counts = [int(s) for s in args.partitions.split(",")]
    atexit.register(_kill_started)
    signal.signal(signal.SIGTERM, _on_signal)
    workdir = Path(tempfile.mkdtemp(prefix="oncelog-bench-"))
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    info = machine_info(args.oncelog_rev)
    print("machine:", json.dumps(info))
    print(
        f"idempotence={args.idempotence} acks=all linger.ms={args.linger_ms} "
        f"fetch.queue.backoff.ms={args.fetch_queue_backoff_ms} "
        f"consumer settings {args.consumer_setting or 'default'}",
        flush=True,
    )
    rows: list[Row] = []
    opened: dict[str, MockTarget | OncelogTarget] = {}
    try:
        if "mock" in targets:
            opened["mock"] = MockTarget()
        if "oncelog" in targets:
            broker = OncelogTarget(workdir, args.oncelog_rev)
            opened["oncelog"] = broker
            info["oncelog_c_record_walk"] = broker.speedups
        for name, t in opened.items():
            print(f"{name}: {t.bootstrap} (pid {t.pid})", flush=True)
        if "oncelog" in opened:
            print(f"oncelog C record walk (_speedups): {info['oncelog_c_record_walk']}")
        plan = [
            (size, parts, comparison_n(size, parts, args))
            for size in sizes
            for parts in partition_counts
        ]
        for size, parts, n in plan:
            case_rows = [Row(name, size, parts, n, long_n=args.long_n) for name in targets]
            rows += case_rows
            for _ in range(args.repeat):  # interleaved, so load changes hit both targets
                for row in case_rows:
                    run_case(opened[row.target], row, args, args.profile)
        if args.large_n and "oncelog" in opened:
            row = Row("oncelog", args.large_size, args.large_partitions, args.large_n)
            rows.append(row)
            for _ in range(args.repeat):
                run_case(opened["oncelog"], row, args, args.profile)
    finally:
        for t in opened.values():
            with contextlib.suppress(Exception):
                t.close()
        _kill_started()
        shutil.rmtree(workdir, ignore_errors=True)
    _report(rows, args, info)
    return 0 if all(r.ok for r in rows) else 1


def _report(rows: list[Row], args: argparse.Namespace, info: dict[str, str]) -> None:
    print("\nmachine:", json.dumps(info))
    print(f"idempotence={args.idempotence}, acks=all, linger.ms={args.linger_ms}, ", end="")
    print(f"median of {args.repeat} run(s); MB/s = payload bytes / 1e6 / s\n")
    print(render_table(rows))
    print("\nCPU per message (server = broker process, or the mock helper process):\n")
    print(render_cpu_table(rows))
    if any(r.long_n for r in rows):
        print("\nProduce only, long runs (the mock's figure in brackets):\n")
        print(render_long_table(rows))
    _print_profiles(rows)
    if args.json:
        payload = {"machine": info, "args": vars(args), "rows": [asdict(r) for r in rows]}
        args.json.write_text(json.dumps(payload, indent=2, default=str))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in WORKER_ROLES:
        sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
