"""End-to-end latency at fixed rates: a paced idempotent producer, a consumer that polls.

Per case (target x rate):

* the producer (its own process, confluent-kafka) sends ``rate`` msg/s of ``--size`` bytes
  for ``--warmup`` s (not measured) and then ``--duration`` s, explicit round-robin over
  ``--partitions`` partitions, ``acks=all``, ``enable.idempotence=true``,
  ``linger.ms=--linger-ms`` (0). Each value starts with the producer's
  ``time.monotonic_ns()`` taken just before ``produce()`` and a sequence number. Sends are
  paced by schedule (message i is due at t0 + i/rate; when late, the due ones go at once);
  how late the producer itself was is reported too;
* the consumer (its own process) assigns every partition from offset 0 of the fresh topic
  and calls ``poll()`` one message at a time, with ``fetch.min.bytes=1``,
  ``fetch.wait.max.ms=--fetch-wait-ms`` (100: the broker answers a fetch as soon as data is
  there; this only bounds an idle long poll) and ``fetch.queue.backoff.ms=0`` (librdkafka's
  pre-fetch never pauses). Latency = ``time.monotonic_ns()`` when ``poll()`` returned the
  message minus the stamp in the message: CLOCK_MONOTONIC is one clock for every process of the
  machine;
* reported: count, p50/p90/p99/p99.9/max, the producer's delivery-report latency, the
  worst seconds, broker CPU, the producer process's CPU (librdkafka's threads included:
  it shares the cores), and — when the brokers run with the loop monitor
  (``ONCELOG_LOOP_MONITOR``, `oncelog.server.loop_monitor`; only with ``--monitor``: its
  4 ms timer and watchdog thread in each broker add wake-ups that lengthen RF=3's tail) —
  each broker's event-loop lag, loop stalls with the stack that held the loop, and GC pauses
  per generation, of the case's time window; the worst messages are listed with the broker
  events near their send time.

Targets: ``single`` (one broker, `tests/broker_process.py`) and ``rf3`` (three brokers + etcd,
`tests/cluster_process.py`, Kafka's replica defaults as bench/cluster_replication.py, topic
RF=3 with min.insync.replicas=2). Everything on 127.0.0.1; every process started is killed by
its pid at the end; ``--timeout`` bounds the whole run. Usage: bench/README.md.
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
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve()
for _p in (str(REPO), str(REPO / "bench")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import cluster_replication as cr  # noqa: E402  (bench/ helpers: targets, snapshot, machine)

STAMP = struct.Struct(">qq")  # send time (monotonic ns), sequence (< 0: warm-up)
QUANTILES = (50.0, 90.0, 99.0, 99.9)
TARGETS = {"single": "single", "rf3": "cluster"}
MONITOR_FILE = "loop-monitor-{pid}.json"


# -- the producer process ----------------------------------------------------------------------


def producer_main(spec: dict[str, Any]) -> None:
    from confluent_kafka import Producer

    rate, size, parts, topic = spec["rate"], spec["size"], spec["partitions"], spec["topic"]
    acked: list[float] = []  # delivery-report latency, s (librdkafka's msg.latency())
    state: dict[str, Any] = {"acked": 0, "errors": 0, "first_error": None}

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            state["errors"] += 1
            state["first_error"] = state["first_error"] or str(err)
            return
        state["acked"] += 1
        if state["measuring"]:
            rd = msg.latency()
            if rd is not None and rd >= 0:
                acked.append(rd)

    producer = Producer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "client.id": "bench-latency-producer",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": spec["linger_ms"],
            "compression.type": "none",
            "message.timeout.ms": 60_000,
            "on_delivery": on_delivery,
            **spec.get("settings", {}),
        }
    )
    pad = os.urandom(max(0, size - STAMP.size))

    def say(obj: dict[str, Any]) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    state["measuring"] = False
    meta = producer.list_topics(topic, timeout=15)
    got = len(meta.topics[topic].partitions) if topic in meta.topics else 0
    if got != parts:
        say({"error": f"topic {topic} has {got} partitions, want {parts}"})
        return
    for p in range(parts):  # connections and the producer id, before the clock starts
        producer.produce(topic, STAMP.pack(time.monotonic_ns(), -1) + pad, partition=p)
    if producer.flush(30) != 0 or state["errors"]:
        say({"error": f"warm-up failed: {state['first_error']}"})
        return
    say({"ready": True})
    sys.stdin.readline()
    warm = _paced(producer, topic, parts, rate, spec["warmup"], pad, warmup=True)
    state["measuring"] = True
    state["acked"] = 0
    cpu0 = os.times()
    t0 = time.monotonic()
    sent = _paced(producer, topic, parts, rate, spec["duration"], pad, warmup=False)
    t1 = time.monotonic()
    left = producer.flush(30)
    cpu1 = os.times()
    lateness = sorted(sent.pop("lateness"))
    acked.sort()
    say(
        {
            **sent,
            "warmup_sent": warm["sent"],
            "t0": t0,
            "t1": t1,
            "acked": state["acked"],
            "errors": state["errors"],
            "first_error": state["first_error"],
            "unacked": left,
            "client_cpu_s": cpu1.user + cpu1.system - cpu0.user - cpu0.system,
            "ack_ms": {f"p{q:g}": _q(acked, q) * 1000 for q in QUANTILES}
            | {"max": (acked[-1] * 1000) if acked else float("nan")},
            "late_ms": {"p99": _q(lateness, 99) * 1000, "max": (lateness or [0.0])[-1] * 1000},
        }
    )


def _paced(producer: Any, topic: str, parts: int, rate: float, seconds: float, pad: bytes,
           *, warmup: bool) -> dict[str, Any]:  # fmt: skip
    """Message i is due at t0 + i/rate; every due one goes at once; sleeps in between
    (poll() for 1 ms or more, so delivery reports are served meanwhile)."""
    produce, poll, pack, now_ns = producer.produce, producer.poll, STAMP.pack, time.monotonic_ns
    n = int(rate * seconds)
    interval = 1.0 / rate
    lateness: list[float] = []
    t0 = time.monotonic() + 0.001
    i = 0
    while i < n:
        now = time.monotonic()
        due = t0 + i * interval
        if now < due:
            wait = due - now
            if wait >= 0.001:
                poll(wait)
            else:
                time.sleep(wait)
            continue
        while i < n and t0 + i * interval <= now:
            seq = -2 - i if warmup else i
            while True:
                try:
                    produce(topic, pack(now_ns(), seq) + pad, partition=i % parts)
                    break
                except BufferError:
                    poll(0.001)
            if not warmup:
                lateness.append(now - (t0 + i * interval))
            i += 1
        poll(0)
    return {"sent": i, "lateness": lateness, "seconds": time.monotonic() - t0}


def _q(sorted_values: list[float] | list[int], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, -(-int(q * len(sorted_values)) // 100) - 1))
    return float(sorted_values[k])


# -- the consumer process ----------------------------------------------------------------------


def consumer_main(spec: dict[str, Any]) -> None:  # noqa: PLR0915
    from confluent_kafka import Consumer, TopicPartition

    parts, topic = spec["partitions"], spec["topic"]
    consumer = Consumer(
        {
            "bootstrap.servers": spec["bootstrap"],
            "client.id": "bench-latency-consumer",
            "group.id": "bench-latency",
            "enable.auto.commit": False,
            "fetch.min.bytes": 1,
            "fetch.wait.max.ms": spec["fetch_wait_ms"],
            "fetch.queue.backoff.ms": 0,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    consumer.poll(0.5)  # connects and starts fetching
    expected: list[int] = []

    def read_expected() -> None:
        line = sys.stdin.readline()
        expected.append(int(line) if line.strip() else -1)

    sys.stdout.write(json.dumps({"ready": True}) + "\n")
    sys.stdout.flush()
    threading.Thread(target=read_expected, daemon=True).start()
    lat: list[int] = []
    sent_at: list[int] = []
    seen = bytearray()
    dups = errors = warm = 0
    poll, now_ns, unpack = consumer.poll, time.monotonic_ns, STAMP.unpack_from
    deadline = time.monotonic() + spec["timeout"]
    gave_up_at = None
    while time.monotonic() < deadline:
        msg = poll(0.1)
        if msg is not None:
            t = now_ns()
            if msg.error() is not None:
                errors += 1
                continue
            stamp, seq = unpack(msg.value())
            if seq < 0:
                warm += 1
                continue
            if seq >= len(seen):
                seen.extend(bytes(seq + 1 - len(seen) + 65536))
            if seen[seq]:
                dups += 1
                continue
            seen[seq] = 1
            lat.append(t - stamp)
            sent_at.append(stamp)
        if expected:
            if expected[0] >= 0 and len(lat) >= expected[0]:
                break
            gave_up_at = gave_up_at or time.monotonic() + spec["drain"]
            if time.monotonic() > gave_up_at:
                break
    consumer.close()
    order = sorted(range(len(lat)), key=lat.__getitem__)
    ordered = [lat[k] for k in order]
    ms = 1e-6
    first = min(sent_at) if sent_at else 0
    per_second: dict[int, list[int]] = {}
    for s, v in zip(sent_at, lat, strict=True):
        per_second.setdefault(int((s - first) // 1_000_000_000), []).append(v)
    seconds = sorted(per_second)
    worst = [
        {"sent": sent_at[k] / 1e9, "ms": round(lat[k] * ms, 3)} for k in reversed(order[-50:])
    ]
    print(
        json.dumps(
            {
                "count": len(lat),
                "expected": expected[0] if expected else None,
                "dups": dups,
                "errors": errors,
                "warmup_seen": warm,
                "ms": {f"p{q:g}": _q(ordered, q) * ms for q in QUANTILES}
                | {
                    "max": (ordered[-1] * ms) if ordered else float("nan"),
                    "mean": statistics.fmean(ordered) * ms if ordered else float("nan"),
                },
                "over_ms": {
                    str(b): sum(1 for v in ordered if v > b * 1_000_000) for b in (5, 10, 20, 50)
                },
                "per_second_max_ms": [
                    round(max(per_second[s]) * ms, 2) for s in seconds
                ],
                "worst": worst,
            }
        ),
        flush=True,
    )


# -- broker-side evidence (oncelog.server.loop_monitor) -----------------------------------------


def read_monitor(path: Path) -> dict[str, Any] | None:
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return None


def monitor_window(before: dict[str, Any] | None, after: dict[str, Any] | None,
                   t0: float, t1: float) -> dict[str, Any] | None:  # fmt: skip
    """What one broker's monitor saw between t0 and t1 (histograms: after minus before)."""
    if after is None:
        return None
    b = before or {}
    buckets = after["buckets_ms"]

    def diff(path: list[str]) -> list[int]:
        a: Any = after
        o: Any = b
        for key in path:
            a = a[key]
            o = o.get(key, {}) if isinstance(o, dict) else {}
        return [x - (o[i] if isinstance(o, list) and i < len(o) else 0) for i, x in enumerate(a)]

    def hist_q(hist: list[int], q: float) -> float:
        total = sum(hist)
        if not total:
            return float("nan")
        need = q / 100 * total
        run = 0
        for i, c in enumerate(hist):
            run += c
            if run >= need:
                return float(buckets[i]) if i < len(buckets) else float("inf")
        return float("inf")

    lag = diff(["lag", "hist"])
    gc_counts = {
        g: after["gc"]["count"][g] - (b.get("gc", {}).get("count", {}).get(g, 0))
        for g in after["gc"]["count"]
    }
    gc_total = {
        g: round(after["gc"]["total_ms"][g] - b.get("gc", {}).get("total_ms", {}).get(g, 0), 1)
        for g in after["gc"]["total_ms"]
    }
    inside = [e for e in after["lag"]["slow"] if t0 <= e[0] <= t1]
    stalls = [s for s in after["stalls"] if t0 <= s["time"] <= t1]
    gc_slow = [e for e in after["gc"]["slow"] if t0 <= e[0] <= t1]
    full = [e for e in inside if len(e) >= 5 and e[3] >= 0]
    return {
        "lag_slow_ms_total": round(sum(e[1] for e in inside), 1),
        # over the slow ticks (since the tick before each): the loop thread's run-queue wait
        # (cores busy elsewhere) and its own CPU time (a busy loop); the rest, blocked
        "lag_slow_runqueue_ms": round(sum(e[3] for e in full), 1) if full else None,
        "lag_slow_cpu_ms": round(sum(e[2] for e in full), 1) if full else None,
        "lag_slow_since_ms": round(sum(e[4] for e in full), 1) if full else None,
        "lag_samples": sum(lag),
        "lag_p99_ms_le": hist_q(lag, 99),
        "lag_p999_ms_le": hist_q(lag, 99.9),
        "lag_over_2ms": len(inside),
        "lag_max_ms": max((e[1] for e in inside), default=0.0),
        "lag_slow": inside,
        "stalls": stalls,
        "gc_count": gc_counts,
        "gc_total_ms": gc_total,
        "gc_slow": gc_slow,
        "gc_max_ms": max((e[2] for e in gc_slow), default=0.0),
    }


def stall_summary(stalls: list[dict[str, Any]], top: int = 6) -> list[tuple[int, float, str]]:
    """Stalls grouped by the innermost oncelog frames: (count, worst ms, where)."""
    groups: dict[str, list[float]] = {}
    for s in stalls:
        frames = s["stack"]
        ours = [f for f in frames if "oncelog/" in f and "loop_monitor" not in f]
        inner = frames[0] if frames else "(no stack taken: at most 10 a second)"
        key = inner if not ours else f"{inner} <- {ours[0]}" if ours[0] != inner else inner
        if len(ours) > 1:
            key += f" <- {ours[1]}"
        groups.setdefault(key, []).append(s["behind_ms"])
    ranked = sorted(groups.items(), key=lambda kv: (-len(kv[1]), -max(kv[1])))
    return [(len(v), max(v), k) for k, v in ranked[:top]]


# -- one case ------------------------------------------------------------------------------------


def spawn(role: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), f"--_{role}", json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    cr._STARTED.append(proc)
    return proc


def tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


def answer(proc: subprocess.Popen[str], timeout: float, who: str) -> dict[str, Any]:
    out = cr.read_json_line(proc, timeout)
    if "error" in out:
        raise RuntimeError(f"{who}: {out['error']}")
    return out


def make_idle(target: cr.Target, name: str, count: int) -> None:
    """`count` partitions that never get a record, in topics of 100 (RF=3 on rf3): a real
    cluster's many quiet partitions, which every follower follows too."""
    rf, min_isr = (3, 2) if name == "rf3" else (1, 1)
    for k in range((count + 99) // 100):
        target.create_topic(f"idle-{k}", min(100, count - 100 * k), rf, min_isr)
    if count:
        print(f"{name}: {count} idle partitions", flush=True)


def run_case(target: cr.Target, name: str, rate: float, rnd: int, args: argparse.Namespace,
             monitor_dir: Path | None) -> dict[str, Any]:  # fmt: skip
    topic = f"lat-{name}-{int(rate)}-r{rnd}"
    rf, min_isr = (3, 2) if name == "rf3" else (1, 1)
    target.create_topic(topic, args.partitions, rf, min_isr)
    common = {"bootstrap": target.bootstrap, "topic": topic, "partitions": args.partitions}
    consumer = spawn(
        "consumer",
        {**common, "fetch_wait_ms": args.fetch_wait_ms, "drain": 15.0,
         "timeout": args.warmup + args.duration + 120},
    )  # fmt: skip
    answer(consumer, 60, "consumer")
    producer = spawn(
        "producer",
        {**common, "rate": rate, "size": args.size, "linger_ms": args.linger_ms,
         "warmup": args.warmup, "duration": args.duration,
         "settings": dict(kv.split("=", 1) for kv in args.producer_setting)},
    )  # fmt: skip
    answer(producer, 60, "producer")
    pids = target.broker_pids()
    logs = cr.log_sizes(target.log_paths())
    paths = {pid: monitor_dir / MONITOR_FILE.format(pid=pid) for pid in pids} if monitor_dir else {}
    before = {pid: read_monitor(p) for pid, p in paths.items()}
    cpu0 = {pid: cr.cpu_seconds(pid) for pid in pids}
    load0 = os.getloadavg()[0]
    tell(producer, "go")
    sent = answer(producer, args.warmup + args.duration + 90, "producer")
    cpu1 = {pid: cr.cpu_seconds(pid) for pid in pids}
    tell(consumer, str(sent["sent"]))
    got = answer(consumer, 60, "consumer")
    load1 = os.getloadavg()[0]
    if paths:
        time.sleep(1.3)  # one more dump of every monitor
    after = {pid: read_monitor(p) for pid, p in paths.items()}
    for proc in (producer, consumer):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
    t0, t1 = sent["t0"], sent["t1"]
    brokers = {
        str(pid): monitor_window(before[pid], after[pid], t0, t1 + 1.0) for pid in paths
    }
    window = sent["t1"] - sent["t0"]
    result = {
        "target": name,
        "rate": rate,
        "round": rnd,
        "topic": topic,
        "sent": sent["sent"],
        "acked": sent["acked"],
        "errors": sent["errors"] + got["errors"],
        "first_error": sent["first_error"],
        "count": got["count"],
        "dups": got["dups"],
        "ms": got["ms"],
        "over_ms": got["over_ms"],
        "ack_ms": sent["ack_ms"],
        "producer_late_ms": sent["late_ms"],
        "per_second_max_ms": got["per_second_max_ms"],
        "worst": got["worst"],
        "t0": t0,
        "t1": t1,
        "broker_cpu_cores": round(sum(cpu1[p] - cpu0[p] for p in pids) / window, 3),
        "client_cpu_cores": round(sent["client_cpu_s"] / window, 3),
        "load": [round(load0, 2), round(load1, 2)],
        "brokers": brokers,
        "log_lines": cr.new_log_lines(logs),
    }
    result["worst_with_events"] = near_events(result, brokers)
    return result


def near_events(r: dict[str, Any], brokers: dict[str, Any]) -> list[dict[str, Any]]:
    """The ten worst messages, each with the broker events in the 50 ms before it arrived."""
    out = []
    for w in r["worst"][:10]:
        start, end = w["sent"] - 0.05, w["sent"] + w["ms"] / 1000
        events = []
        for pid, m in brokers.items():
            if not m:
                continue
            events += [f"{pid} lag {e[1]:.1f}ms @{e[0] - r['t0']:.3f}" for e in m["lag_slow"]
                       if start <= e[0] <= end]  # fmt: skip
            events += [f"{pid} gc{e[1]} {e[2]:.1f}ms @{e[0] - r['t0']:.3f}" for e in m["gc_slow"]
                       if start <= e[0] <= end + 0.01]  # fmt: skip
            events += [f"{pid} stall {s['behind_ms']:.0f}ms {(s['stack'] or ['?'])[0]}"
                       for s in m["stalls"] if start <= s["time"] <= end + 0.01]  # fmt: skip
        out.append({"at": round(w["sent"] - r["t0"], 3), "ms": w["ms"], "events": events})
    return out


# -- reporting ------------------------------------------------------------------------------------


def fmt(x: float, digits: int = 1) -> str:
    return "-" if math.isnan(x) else f"{x:,.{digits}f}"


def print_run(r: dict[str, Any]) -> None:
    ms, ack = r["ms"], r["ack_ms"]
    print(
        f"[{r['target']} {r['rate']:g}/s r{r['round']}] n={r['count']:,}/{r['sent']:,} "
        f"e2e ms p50 {fmt(ms['p50'], 2)} p90 {fmt(ms['p90'], 2)} p99 {fmt(ms['p99'], 2)} "
        f"p99.9 {fmt(ms['p99.9'], 2)} max {fmt(ms['max'], 1)} | ack p50 {fmt(ack['p50'], 2)} "
        f"p99 {fmt(ack['p99'], 2)} | producer late p99 {fmt(r['producer_late_ms']['p99'], 2)} "
        f"max {fmt(r['producer_late_ms']['max'], 1)} | >5ms {r['over_ms']['5']} "
        f">10ms {r['over_ms']['10']} | broker cores {r['broker_cpu_cores']} "
        f"producer cores {r.get('client_cpu_cores', '-')} | load {r['load'][0]}→{r['load'][1]}",
        flush=True,
    )
    if r["errors"] or r["dups"] or r["count"] != r["sent"]:
        print(f"  errors {r['errors']} ({r['first_error']}), dups {r['dups']}, "
              f"received {r['count']} of {r['sent']}")  # fmt: skip
    for pid, m in r["brokers"].items():
        if not m:
            print(f"  broker {pid}: no loop monitor data")
            continue
        print(
            f"  broker {pid}: loop lag p99 ≤{m['lag_p99_ms_le']:g} ms, p99.9 "
            f"≤{m['lag_p999_ms_le']:g} ms, {m['lag_over_2ms']} over 2 ms (max "
            f"{m['lag_max_ms']:.1f}); stalls ≥4 ms: {len(m['stalls'])}; GC per gen "
            f"{m['gc_count']} total ms {m['gc_total_ms']}, {len(m['gc_slow'])} pauses ≥2 ms "
            f"(max {m['gc_max_ms']:.1f})"
        )
        if m.get("lag_slow_runqueue_ms") is not None:
            print(
                f"    slow ticks: {m['lag_slow_since_ms']:.0f} ms between them, of which the "
                f"loop waited for a core {m['lag_slow_runqueue_ms']:.0f} ms and ran "
                f"{m['lag_slow_cpu_ms']:.0f} ms (the rest: blocked, e.g. IO, GIL)"
            )
        for count, worst, where in stall_summary(m["stalls"]):
            print(f"    {count}x stall (worst {worst:.0f} ms): {where[:260]}")
    slow_seconds = sorted(
        enumerate(r["per_second_max_ms"]), key=lambda kv: -kv[1]
    )[:5]
    print("  worst seconds (s: max ms): " + ", ".join(f"{s}: {v}" for s, v in slow_seconds))
    for w in r["worst_with_events"][:5]:
        print(f"  worst {w['ms']:.1f} ms sent @{w['at']:.3f}s: {'; '.join(w['events'][:4]) or '-'}")
    for name, lines in r["log_lines"].items():
        print(f"  {name}: {len(lines)} lines at WARNING+, first: {lines[0][:200]}")


def summary(results: list[dict[str, Any]]) -> str:
    keys = sorted({(r["target"], r["rate"]) for r in results}, key=lambda k: (k[0] != "single", k))
    lines = [
        "| target | msg/s | runs | p50 ms | p90 ms | p99 ms | p99.9 ms | max ms | ack p99 ms "
        "| runs' p99 / p99.9 | broker cores | load |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for target, rate in keys:
        rs = [r for r in results if (r["target"], r["rate"]) == (target, rate)]

        def med(key: str, rs: list[dict[str, Any]] = rs, sub: str = "ms") -> float:
            return statistics.median(r[sub][key] for r in rs)

        runs = " ".join(f"{r['ms']['p99']:.1f}/{r['ms']['p99.9']:.1f}" for r in rs)
        lines.append(
            f"| {target} | {rate:,.0f} | {len(rs)} | {fmt(med('p50'), 2)} | {fmt(med('p90'), 2)} "
            f"| {fmt(med('p99'), 2)} | {fmt(med('p99.9'), 2)} | {fmt(med('max'), 1)} "
            f"| {fmt(med('p99', sub='ack_ms'), 2)} | {runs} "
            f"| {statistics.median(r['broker_cpu_cores'] for r in rs):.2f} "
            f"| {min(r['load'][0] for r in rs):.1f}-{max(r['load'][1] for r in rs):.1f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--targets", default="single,rf3", help="comma list of " + ",".join(TARGETS))
    p.add_argument("--rates", default="2000,10000", help="comma list of msg/s")
    p.add_argument("--duration", type=float, default=30, help="measured seconds per case")
    p.add_argument("--warmup", type=float, default=3, help="paced seconds before measuring")
    p.add_argument("--rounds", type=int, default=1, help="runs of every case (fresh brokers)")
    p.add_argument("--size", type=int, default=1024, help="value bytes")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--linger-ms", type=float, default=0)
    p.add_argument("--idle-partitions", type=int, default=0,
                   help="partitions never written, created first (topics of 100)")  # fmt: skip
    p.add_argument("--fetch-wait-ms", type=int, default=100, help="consumer fetch.wait.max.ms")
    p.add_argument("--timeout", type=float, default=1800, help="limit of the whole run, s")
    p.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                   help="broker setting (on top of Kafka's replica defaults)")  # fmt: skip
    p.add_argument("--producer-setting", action="append", default=[], metavar="KEY=VALUE",
                   help="extra librdkafka producer setting (experiments)")  # fmt: skip
    p.add_argument("--oncelog-rev", help="brokers and test harness from `git archive REV`")
    p.add_argument("--monitor", action="store_true",
                   help="brokers with ONCELOG_LOOP_MONITOR (lag, stall, GC figures; it adds "
                   "wake-ups of its own: RF=3's p99 2-3x)")  # fmt: skip
    p.add_argument("--json", type=Path, help="write every run and the machine info here")
    p.add_argument("--keep", action="store_true", help="keep the temporary dir (data, logs)")
    p.add_argument("--_producer", help=argparse.SUPPRESS)
    p.add_argument("--_consumer", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if args._producer:
        producer_main(json.loads(args._producer))
        return 0
    if args._consumer:
        consumer_main(json.loads(args._consumer))
        return 0
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if any(t not in TARGETS for t in targets):
        print(f"unknown targets in {targets}", file=sys.stderr)
        return 2

    def on_alarm(_signum: int, _frame: Any) -> None:
        raise TimeoutError(f"--timeout {args.timeout:.0f}s reached")

    atexit.register(cr._kill_started)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(int(args.timeout))
    overrides, base, info = cr.bench_start(args, "oncelog-bench-latency-")
    monitor_dir = base / "monitor" if args.monitor else None
    if monitor_dir is not None:
        monitor_dir.mkdir()
        os.environ["ONCELOG_LOOP_MONITOR"] = str(monitor_dir / MONITOR_FILE)
    print(
        f"{args.size} B, {args.partitions} partitions, acks=all, idempotent, "
        f"linger.ms={args.linger_ms:g}; consumer poll(), fetch.min.bytes=1, "
        f"fetch.wait.max.ms={args.fetch_wait_ms}, fetch.queue.backoff.ms=0; "
        f"{args.warmup:g} s warm-up + {args.duration:g} s per case"
        + (f"; producer {args.producer_setting}" if args.producer_setting else ""),
        flush=True,
    )
    results: list[dict[str, Any]] = []
    failed: str | None = None
    try:
        for rnd in range(1, args.rounds + 1):
            for name in targets:
                target = cr.Target(TARGETS[name], base / f"r{rnd}-{name}", overrides).start()
                print(f"{name}: brokers {target.broker_pids()} etcd {target.etcd_pid()}",
                      flush=True)  # fmt: skip
                make_idle(target, name, args.idle_partitions)
                try:
                    for rate in rates:
                        results.append(run_case(target, name, rate, rnd, args, monitor_dir))
                        print_run(results[-1])
                finally:
                    target.close()
    except (Exception, TimeoutError) as exc:
        failed = f"{type(exc).__name__}: {exc}"
        print(f"FAILED: {failed}", file=sys.stderr)
    finally:
        signal.alarm(0)
        cr._kill_started()
        if args.keep or failed:
            print(f"kept {base} (data dirs, logs, monitor files)")
        else:
            shutil.rmtree(base, ignore_errors=True)
    info["load_after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print()
    print(summary(results))
    cr.write_json(args, info, overrides, results, failed)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
