"""Using the machine's cores: one broker on one core against two brokers on two cores.

A broker is one Python process with one event-loop thread, so it does about one core of
work. On one host, more cores need more brokers: a cluster (etcd) whose partition leaders
are spread over them. This measures how far that goes on this machine.

Cases (a fresh data dir, fresh brokers and a fresh topic for every run):

* ``1-pinned`` (A): one broker without etcd, pinned to CPU 0 (every thread, with
  ``os.sched_setaffinity``);
* ``1`` (A'): the same broker, unpinned: what one broker gets from two cores;
* ``1-etcd-pinned``: a one-broker cluster with etcd, pinned to CPU 0 (the cost of cluster
  mode alone, without a second broker);
* ``2-pinned`` (B): two brokers + etcd, broker 1 on CPU 0 and broker 2 on CPU 1, each the
  preferred leader of half the partitions (replica assignment, RF=1);
* ``2`` (B'): the same cluster unpinned, as a user would run it.

etcd and the clients are never pinned. The load is the same in every case: ``--clients``
raw-protocol producer processes, each owning ``partitions / clients`` partitions (client
c the partitions p with p % clients == c, which in the two-broker cases all have the same
leader) on one connection to their leader. A client pre-builds one Produce v9 request with
one batch of ``--records`` records of ``--size`` bytes per partition, and sends the same
bytes again and again with ``--in-flight`` requests outstanding (the broker assigns offsets;
without idempotence a batch can be appended any number of times). So a client spends little
CPU per message: what is measured is the brokers' capacity for many small batches over many
partitions. The client checks every response's correlation id and decodes every
``--check-every``-th one (all partition error codes 0); at the end the sum of the log end
offsets over all partitions must equal the records the clients saw acknowledged.

Per run: ``--warmup`` seconds at full load, then a ``--duration`` window timed by this
process. msg/s = records acknowledged in the window / window. CPU is utime+stime from
``/proc/PID/stat`` of every process (broker, etcd, client) over the window; "cores busy" is
CPU seconds / wall seconds. "other load" is the machine's busy time from ``/proc/stat``
minus ours: what other users of the machine took during the window.

Everything runs on 127.0.0.1, every process this script starts is killed by its pid,
``--timeout`` bounds the whole run. Usage: see bench/README.md.
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
import socket
import statistics
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
SCRIPT = Path(__file__).resolve()
for _p in (str(REPO), str(BENCH)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import cluster_replication as cr  # noqa: E402
import produce_consume as pc  # noqa: E402

CASES: dict[str, dict[str, Any]] = {
    "1-pinned": {"label": "A: 1 broker, CPU 0", "brokers": 1, "etcd": False, "cpus": [{0}]},
    "1": {"label": "A': 1 broker, unpinned", "brokers": 1, "etcd": False, "cpus": [None]},
    "1-etcd-pinned": {
        "label": "1 broker + etcd, CPU 0",
        "brokers": 1,
        "etcd": True,
        "cpus": [{0}],
    },
    "2-pinned": {
        "label": "B: 2 brokers + etcd, CPU 0 / CPU 1",
        "brokers": 2,
        "etcd": True,
        "cpus": [{0}, {1}],
    },
    "2": {
        "label": "B': 2 brokers + etcd, unpinned",
        "brokers": 2,
        "etcd": True,
        "cpus": [None, None],
    },
}
BASELINE = "1-pinned"
PRODUCE, PRODUCE_VERSION = 0, 9


# -- the client process --------------------------------------------------------------------


def build_frame(spec: dict[str, Any]) -> tuple[bytearray, int]:
    """The client's one Produce request (correlation id patched per send) and its records."""
    from tests.integration.rawclient import produce_body, request

    from oncelog.protocol.records.batch import build_batch
    from oncelog.protocol.records.record import encode_record

    nrec, now_ms, value = spec["records"], int(time.time() * 1000), os.urandom(spec["size"])
    records = b"".join(encode_record(offset_delta=i, key=None, value=value) for i in range(nrec))
    batch = build_batch(
        base_offset=0,
        records=records,
        record_count=nrec,
        last_offset_delta=nrec - 1,
        base_timestamp=now_ms,
        max_timestamp=now_ms,
    )
    body = produce_body(
        {spec["topic"]: [(p, batch) for p in spec["partitions"]]},
        acks=spec["acks"],
        timeout_ms=30_000,
    )
    return bytearray(request(PRODUCE, PRODUCE_VERSION, body)), nrec * len(spec["partitions"])


def client_main(spec: dict[str, Any]) -> None:
    """One raw producer on one connection. Talks to the parent one JSON line at a time; the
    timed window starts when the parent writes a line on stdin."""
    from tests.integration.rawclient import decode_response

    def say(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    parts = spec["partitions"]
    frame, per_request = build_frame(spec)
    set_cid = struct.Struct(">i").pack_into  # after the length, api key and version
    sock = socket.create_connection(("127.0.0.1", spec["port"]), timeout=60)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    rfile = sock.makefile("rb", buffering=1 << 16)
    unpack = struct.Struct(">ii").unpack
    state = {"sent": 0, "acked": 0, "bad": 0, "checked": 0, "first_error": None}

    def send_next() -> None:
        state["sent"] += 1
        set_cid(frame, 8, state["sent"] & 0x7FFFFFFF)
        sock.sendall(frame)

    def receive() -> None:
        head = rfile.read(8)
        if len(head) < 8:
            raise ConnectionError("broker closed the connection")
        length, cid = unpack(head)
        payload = head[4:] + rfile.read(length - 4)
        expected = (state["acked"] + 1) & 0x7FFFFFFF
        if cid != expected:
            raise RuntimeError(f"correlation id {cid}, expected {expected}")
        if state["acked"] % spec["check_every"] == 0:
            _, answer = decode_response(PRODUCE, PRODUCE_VERSION, payload)
            codes = [p.error_code for t in answer.responses for p in t.partition_responses]
            state["checked"] += 1
            if len(codes) != len(parts) or any(codes):
                state["bad"] += 1
                state["first_error"] = state["first_error"] or f"error codes {codes}"
        state["acked"] += 1

    def run_for(seconds: float) -> tuple[int, float]:
        start_acked, t0 = state["acked"], time.perf_counter()
        end = t0 + seconds
        while time.perf_counter() < end:
            receive()
            send_next()
        return state["acked"] - start_acked, time.perf_counter() - t0

    for _ in range(spec["in_flight"]):
        send_next()
    run_for(spec["warmup"])
    say({"ready": True, "pid": os.getpid()})
    sys.stdin.readline()
    acked, seconds = run_for(spec["duration"])
    while state["acked"] < state["sent"]:  # drain: every request sent is answered
        receive()
    sock.close()
    say(
        {
            "requests": acked,
            "records": acked * per_request,
            "seconds": seconds,
            "total_requests": state["acked"],
            "total_records": state["acked"] * per_request,
            "checked": state["checked"],
            "bad": state["bad"],
            "first_error": state["first_error"],
        }
    )


# -- the parent --------------------------------------------------------------------------------


def pin(pid: int, cpus: set[int]) -> list[str]:
    """Pin every thread of `pid` (threads created later inherit it from their creator);
    return each thread's allowed CPUs as the kernel reports them."""
    allowed = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(ProcessLookupError, FileNotFoundError):
            os.sched_setaffinity(int(tid), cpus)
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith("Cpus_allowed_list:"):
                    allowed.append(line.split(":", 1)[1].strip())
    return sorted(set(allowed))


def machine_busy() -> tuple[float, float, dict[str, float]]:
    """(user+nice+system seconds, steal seconds, per-CPU busy seconds) from /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy, steal, per_cpu = 0.0, 0.0, {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu"):
                break
            name, *vals = line.split()
            v = [int(x) / tick for x in vals]
            b = v[0] + v[1] + v[2] + v[5] + v[6]  # user nice system irq softirq
            if name == "cpu":
                busy, steal = b, v[7]
            else:
                per_cpu[name] = b
    return busy, steal, per_cpu


def wait_quiet(limit: float, max_wait: float) -> dict[str, float]:
    """Wait (at most `max_wait` s) until the machine was at most `limit` cores busy over 2 s:
    on a shared machine other work takes cores from whichever case runs."""
    start = time.monotonic()
    while True:
        busy0 = machine_busy()[0]
        time.sleep(2)
        busy = (machine_busy()[0] - busy0) / 2
        waited = time.monotonic() - start
        if busy <= limit or waited >= max_wait:
            return {"busy_before": busy, "waited": waited}


class Target:
    """The broker processes of one case, started fresh."""

    def __init__(self, case: str, base: Path, overrides: dict[str, str]) -> None:
        from tests.broker_process import BrokerProcess
        from tests.cluster_process import Cluster, free_port

        self.case = CASES[case]
        self.cluster: Any = None
        if self.case["etcd"]:
            self.cluster = Cluster(base / "cluster", self.case["brokers"], overrides)
            self._brokers = list(self.cluster.brokers.values())
        else:
            b = BrokerProcess(base / "single" / "broker-1", {"node.id": "1", **overrides})
            b.port = free_port()
            b.data_dir.parent.mkdir(parents=True, exist_ok=True)
            self._brokers = [b]

    def start(self) -> Target:
        if self.cluster is not None:
            self.cluster.start()
            pc._STARTED.append(self.cluster.etcd.proc)
            # A ready broker may not know its controller yet; an AdminClient whose first
            # Metadata says so sometimes never sent CreateTopics (1 in 3-6 fresh clusters).
            self.cluster.wait_for(self._controller_known, 30, "a controller")
        else:
            self._brokers[0].start()
        pc._STARTED.extend(b.proc for b in self._brokers)
        return self

    def _controller_known(self) -> bool:
        from tests.integration.rawclient import METADATA, RawClient, metadata_body

        for b in self._brokers:
            with RawClient(b.port, timeout=5) as client:
                if client.call(METADATA, 12, metadata_body([])).controller_id < 0:
                    return False
        return True

    def pin(self) -> list[list[str]]:
        return [
            pin(b.proc.pid, cpus) if cpus is not None else []
            for b, cpus in zip(self._brokers, self.case["cpus"], strict=True)
        ]

    @property
    def broker_pids(self) -> list[int]:
        return [b.proc.pid for b in self._brokers]

    @property
    def etcd_pid(self) -> int | None:
        return self.cluster.etcd.proc.pid if self.cluster is not None else None

    def port_of(self, node_id: int) -> int:
        return int(self._brokers[node_id - 1].port)

    def create_topic(self, topic: str, partitions: int) -> None:
        n = self.case["brokers"]
        assignment = [[p % n + 1] for p in range(partitions)]
        if self.cluster is not None:
            self.cluster.create_topic(topic, assignment=assignment)
            return
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self._brokers[0].bootstrap})
        new = NewTopic(topic, partitions, 1)
        for future in admin.create_topics([new]).values():
            future.result(30)

    def leaders(self, topic: str) -> dict[int, int]:
        if self.cluster is None:
            return {}
        return {p: v[0] for p, v in self.cluster.partitions(topic).items()}

    def log_end_offsets(self, topic: str, partitions: int) -> int:
        from tests.integration.rawclient import LIST_OFFSETS, RawClient, list_offsets_body

        n, total = self.case["brokers"], 0
        for node in range(1, n + 1):
            mine = [p for p in range(partitions) if p % n + 1 == node]
            with RawClient(self.port_of(node), timeout=30) as client:
                answer = client.call(LIST_OFFSETS, 7, list_offsets_body(topic, mine))
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise RuntimeError(f"ListOffsets {topic}-{p.partition_index}: "
                                           f"error {p.error_code}")  # fmt: skip
                    total += int(p.offset)
        return total

    def close(self) -> None:
        if self.cluster is not None:
            self.cluster.close()
        else:
            self._brokers[0].kill()


def start_clients(target: Target, topic: str, args: argparse.Namespace) -> list[Any]:
    """`--clients` producer processes; client c owns the partitions p with p % clients == c
    and connects to their leader."""
    n, procs = target.case["brokers"], []
    for ci in range(args.clients):
        spec = {
            "port": target.port_of(ci % n + 1),
            "topic": topic,
            "partitions": [p for p in range(args.partitions) if p % args.clients == ci],
            "size": args.size,
            "records": args.records,
            "acks": -1 if args.acks == "all" else int(args.acks),
            "in_flight": args.in_flight,
            "check_every": args.check_every,
            "warmup": args.warmup,
            "duration": args.duration,
        }
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPT), "--_client", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        pc._STARTED.append(proc)
        procs.append(proc)
    return procs


def timed_window(pids: dict[str, list[int]], clients: list[Any], duration: float) -> dict[str, Any]:
    """Start the clients' timed window and sample every CPU counter around it."""
    cpu0 = {k: [pc._cpu_seconds(p) for p in v] for k, v in pids.items()}
    busy0, steal0, per0 = machine_busy()
    self0 = sum(os.times()[:2])
    t0 = time.monotonic()
    for proc in clients:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    time.sleep(duration)
    wall = time.monotonic() - t0
    cpu1 = {k: [pc._cpu_seconds(p) for p in v] for k, v in pids.items()}
    busy1, steal1, per1 = machine_busy()
    self1 = sum(os.times()[:2])
    cpu = {k: [b - a for a, b in zip(cpu0[k], cpu1[k], strict=True)] for k in cpu0}
    ours = sum(sum(v) for v in cpu.values()) + (self1 - self0)
    return {
        "cpu": cpu,
        "wall": wall,
        "machine_cores": (busy1 - busy0) / wall,
        "per_cpu_busy": {k: (per1[k] - per0[k]) / wall for k in sorted(per1)},
        "steal_cores": (steal1 - steal0) / wall,
        "other_cores": (busy1 - busy0 - ours) / wall,
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def run_case(case: str, rnd: int, base: Path, args: argparse.Namespace,
             overrides: dict[str, str]) -> dict[str, Any]:  # fmt: skip
    c = CASES[case]
    n = c["brokers"]
    if args.clients % n:
        raise ValueError(f"--clients {args.clients} is not a multiple of {n} brokers")
    workdir = base / f"{case}-r{rnd}"
    quiet = wait_quiet(args.quiet_cores, args.quiet_wait) if args.quiet_wait > 0 else {}
    target = Target(case, workdir, overrides).start()
    clients: list[subprocess.Popen[str]] = []
    try:
        pinned = target.pin()
        topic = f"cores-{case}-r{rnd}"
        target.create_topic(topic, args.partitions)
        leaders = target.leaders(topic)
        if leaders and any(leaders[p] != p % n + 1 for p in leaders):
            raise RuntimeError(f"leaders {leaders} are not the assignment's")
        clients += start_clients(target, topic, args)
        for proc in clients:
            ready = cr.read_json_line(proc, args.warmup + 60)
            if not ready.get("ready"):
                raise RuntimeError(f"client: {ready}")
        pinned = target.pin()  # threads the broker started during the warm-up
        pids = {"broker": target.broker_pids, "client": [p.pid for p in clients]}
        if target.etcd_pid:
            pids["etcd"] = [target.etcd_pid]
        window = timed_window(pids, clients, args.duration)
        results = [cr.read_json_line(proc, 60) for proc in clients]
        for proc in clients:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        acked_total = sum(r["total_records"] for r in results)
        end_offsets = target.log_end_offsets(topic, args.partitions)
    finally:
        for proc in clients:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        target.close()
        if not args.keep and sys.exc_info()[0] is None:
            shutil.rmtree(workdir, ignore_errors=True)
    cpu, wall = window["cpu"], window["wall"]
    records = sum(r["records"] for r in results)
    return {
        "case": case,
        "round": rnd,
        "label": c["label"],
        "brokers": n,
        "pinned": pinned,
        "records": records,
        "wall": wall,
        "msgs_per_s": records / wall,
        "mb_per_s": records * args.size / 1e6 / wall,
        "broker_cores_each": [x / wall for x in cpu["broker"]],
        "broker_cores": sum(cpu["broker"]) / wall,
        "broker_us_per_msg": sum(cpu["broker"]) / records * 1e6 if records else math.nan,
        "etcd_cores": sum(cpu.get("etcd", [0.0])) / wall,
        "client_cores": sum(cpu["client"]) / wall,
        "client_us_per_msg": sum(cpu["client"]) / records * 1e6 if records else math.nan,
        "machine_cores": window["machine_cores"],
        "per_cpu_busy": window["per_cpu_busy"],
        "steal_cores": window["steal_cores"],
        "other_cores": window["other_cores"],
        "checked": sum(r["checked"] for r in results),
        "bad": sum(r["bad"] for r in results),
        "first_error": next((r["first_error"] for r in results if r["first_error"]), None),
        "acked_total": acked_total,
        "log_end_total": end_offsets,
        "check_ok": acked_total == end_offsets and not any(r["bad"] for r in results),
        "load": window["load"],
        **quiet,
    }


def fmt(x: float, digits: int = 0) -> str:
    return "-" if math.isnan(x) else f"{x:,.{digits}f}"


def print_run(r: dict[str, Any]) -> None:
    each = " + ".join(f"{x:.2f}" for x in r["broker_cores_each"])
    cpus = " ".join(f"{k} {v:.2f}" for k, v in r["per_cpu_busy"].items())
    quiet = ""
    if "waited" in r:
        quiet = f" (busy {r['busy_before']:.2f} before, after {r['waited']:.0f} s wait)"
    print(
        f"{r['case']:>14} r{r['round']}: {r['msgs_per_s']:>10,.0f} msg/s "
        f"{r['mb_per_s']:6.1f} MB/s | brokers {r['broker_cores']:.2f} cores ({each}), "
        f"{r['broker_us_per_msg']:.3f} us/msg | etcd {r['etcd_cores']:.2f} | clients "
        f"{r['client_cores']:.2f} cores, {r['client_us_per_msg']:.3f} us/msg | machine "
        f"{r['machine_cores']:.2f} ({cpus}), others {r['other_cores']:.2f}, steal "
        f"{r['steal_cores']:.2f}{quiet} | pinned {r['pinned']} | load {r['load']} | "
        f"{'ok' if r['check_ok'] else 'CHECK FAILED'} (acked {r['acked_total']:,} = log end "
        f"{r['log_end_total']:,}, {r['checked']} answers decoded, {r['bad']} bad)",
        flush=True,
    )
    if r["first_error"]:
        print(f"  first error: {r['first_error']}")


def summary(results: list[dict[str, Any]], cases: list[str]) -> str:
    def med(rs: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(r[key] for r in rs)) if rs else math.nan

    base = med([r for r in results if r["case"] == BASELINE], "msgs_per_s")
    head = (
        "| case | brokers | cores | runs | msg/s (median) | msg/s (runs) | MB/s "
        "| broker cores busy | broker CPU µs/msg | etcd cores | client cores busy "
        "(µs/msg) | other load, cores | scaling vs A | check |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for case in cases:
        rs = [r for r in results if r["case"] == case]
        if not rs:
            continue
        c = CASES[case]
        cores = "+".join(str(min(s)) for s in c["cpus"] if s) if c["cpus"][0] else "any of 2"
        each = [statistics.median(r["broker_cores_each"][i] for r in rs)
                for i in range(c["brokers"])]  # fmt: skip
        busy = fmt(med(rs, "broker_cores"), 2)
        if len(each) > 1:
            busy += " (" + " + ".join(f"{x:.2f}" for x in each) + ")"
        cells = [
            c["label"],
            str(c["brokers"]) + (" + etcd" if c["etcd"] else ""),
            f"CPU {cores}" if c["cpus"][0] else cores,
            str(len(rs)),
            f"**{fmt(med(rs, 'msgs_per_s'))}**",
            " / ".join(fmt(r["msgs_per_s"]) for r in rs),
            fmt(med(rs, "mb_per_s"), 1),
            busy,
            fmt(med(rs, "broker_us_per_msg"), 3),
            fmt(med(rs, "etcd_cores"), 2) if c["etcd"] else "-",
            f"{fmt(med(rs, 'client_cores'), 2)} ({fmt(med(rs, 'client_us_per_msg'), 3)})",
            fmt(med(rs, "other_cores"), 2),
            fmt(med(rs, "msgs_per_s") / base, 2) if not math.isnan(base) else "-",
            "ok" if all(r["check_ok"] for r in rs) else "FAILED",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired(results: list[dict[str, Any]], cases: list[str]) -> list[str]:
    """Per round, each case's msg/s over case A's of the same round (load drifts)."""
    out = []
    rounds = sorted({r["round"] for r in results})
    by = {(r["case"], r["round"]): r["msgs_per_s"] for r in results}
    for case in cases:
        if case == BASELINE:
            continue
        ratios = [by[(case, k)] / by[(BASELINE, k)] for k in rounds
                  if (case, k) in by and (BASELINE, k) in by]  # fmt: skip
        if ratios:
            out.append(
                f"{case} / {BASELINE} per round: "
                + ", ".join(f"{x:.2f}" for x in ratios)
                + f" (median {statistics.median(ratios):.2f})"
            )
    return out


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default=",".join(CASES), help="comma list of " + ",".join(CASES))
    p.add_argument("--rounds", type=int, default=3, help="runs of every case, interleaved")
    p.add_argument("--partitions", type=int, default=32)
    p.add_argument("--clients", type=int, default=2, help="producer processes, one connection each")
    p.add_argument("--size", type=int, default=100, help="value bytes of a record")
    p.add_argument("--records", type=int, default=10, help="records per batch")
    p.add_argument("--in-flight", type=int, default=8, help="requests outstanding per client")
    p.add_argument("--acks", default="all", choices=("all", "1"))
    p.add_argument("--check-every", type=int, default=64, help="decode every N-th answer")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds of load before timing")
    p.add_argument("--duration", type=float, default=10.0, help="timed window, seconds")
    p.add_argument(
        "--quiet-wait",
        type=float,
        default=0,
        help="before each run wait up to this many s for a machine at most --quiet-cores busy",
    )
    p.add_argument("--quiet-cores", type=float, default=0.3)
    p.add_argument("--timeout", type=float, default=1800, help="limit of the whole run, s")
    p.add_argument(
        "--override", action="append", default=[], metavar="KEY=VALUE", help="broker setting"
    )
    p.add_argument(
        "--oncelog-rev",
        help="run brokers and the test harness from `git archive REV` instead of the work tree",
    )
    p.add_argument("--json", type=Path, help="write every run and the machine info here")
    p.add_argument("--keep", action="store_true", help="keep data dirs and logs")
    p.add_argument("--_client", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args._client:
        client_main(json.loads(args._client))
        return 0
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = [c for c in cases if c not in CASES]
    if unknown:
        print(f"unknown cases: {unknown}", file=sys.stderr)
        return 2
    if os.cpu_count() != 2 or not os.sched_getaffinity(0) >= {0, 1}:
        print(f"note: made for 2 cores; this machine has {os.cpu_count()}, "
              f"we may use {sorted(os.sched_getaffinity(0))}")  # fmt: skip

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"--timeout {args.timeout:.0f}s reached")

    atexit.register(pc._kill_started)
    signal.signal(signal.SIGTERM, pc._on_signal)
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(args.timeout))
    overrides, base, info = cr.bench_start(args, "oncelog-bench-cores-")
    results: list[dict[str, Any]] = []
    failed = None
    try:
        for rnd in range(1, args.rounds + 1):
            for case in cases:
                results.append(run_case(case, rnd, base, args, overrides))
                print_run(results[-1])
    except (Exception, TimeoutError) as exc:
        failed = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    finally:
        signal.alarm(0)
        pc._kill_started()
        if args.keep or failed:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"\n{args.clients} raw producer clients, {args.partitions} partitions (RF=1), one "
        f"batch of {args.records} x {args.size} B per partition per request, acks={args.acks}, "
        f"{args.in_flight} requests in flight per client; {args.duration:g} s timed after "
        f"{args.warmup:g} s warm-up; median of {args.rounds} interleaved rounds\n"
    )
    print(summary(results, cases))
    print()
    for line in paired(results, cases):
        print(line)
    cr.write_json(args, info, overrides, results, failed)
    return 1 if failed or not all(r["check_ok"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
