"""Restart time and internal-topic size after a day of offset commits and transactions (issue 11).

    .venv/bin/python bench/compaction.py --oncelog-rev HEAD --commits 1000000 \
        --transactions 100000 --json bench/results/REV-compaction-day.json

Starts the real broker (tests/broker_process.py: its own process on 127.0.0.1, an ephemeral
port, a fresh data dir; with --oncelog-rev from `git archive REV`, as produce_consume.py
does), then simulates the day as fast as the broker allows, both at once:

* `--commits N` offset commits (confluent-kafka `Consumer.commit(offsets=...,
  asynchronous=True)`, at most `--commit-window` in flight per group) by `--groups` consumer
  groups (default 1) over the `--partitions` (8) partitions of topic `day-in`; commit i sets
  every partition to offset i, so a group's committed offsets end at its commit count;
* `--transactions M` transactions over `--txn-ids` transactional ids (one confluent-kafka
  Producer each, one thread each, spread over `--txn-workers` processes): begin, produce
  `--records-per-txn` records to `day-out`, and unless `--no-txn-offsets`
  `send_offsets_to_transaction` of offset i for group `oncelog-day-eos-K` (one partition),
  then commit.

Then it measures the internal topics (`__consumer_offsets`, `__transaction_state`): bytes on
disk summed over their partition dirs, segments, batches and records (control batches
apart), and the distinct and live keys (a scan of the segment files while the broker is
stopped) next to the live keys expected: groups x partitions offset keys plus one per
transactional id's group, and one key per transactional id. With `--wait-for-cleaning S` it
first polls those sizes every 2 s until they stop changing (10 s) or S seconds pass, for a
background cleaner.

Restarts, `--restarts` (3) of each kind, alternating, SIGKILL first (right after the day,
as a crash would be): SIGKILL then start; SIGTERM (the stop is timed too), wait for the
exit, then start. A start is timed from spawning the process to its ready line (printed after
the coordinators replayed their topics); the broker's CPU seconds at that moment are given
too. The fresh broker's first start is the baseline. After every restart it checks that
every group's committed offsets are the last ones committed (Admin OffsetFetch), that the
transactional ids are all listed and one of them kept its producer id and epoch, and that
this id continues: `init_transactions` works, the epoch went up by one, and one more
transaction with offsets commits. The table row printed at the end is meant for
bench/RESULTS.md.

Every phase is bounded (`--timeout`) and every process this script starts is killed by its
pid on the way out.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_consume as pc

SCRIPT = Path(__file__).resolve()
REPO = SCRIPT.parent.parent
WORKER_ROLES = ("_commit", "_txn")
INTERNAL = ("__consumer_offsets", "__transaction_state")
IN_TOPIC, OUT_TOPIC = "day-in", "day-out"
COMMIT_GROUP = "oncelog-day-group-{}"
TXN_ID = "oncelog-day-txn-{}"
TXN_GROUP = "oncelog-day-eos-{}"
PROGRESS_S = 30.0


def _conf(spec: dict[str, Any], role: str) -> dict[str, Any]:
    return {"bootstrap.servers": spec["bootstrap"], "client.id": f"day-{role}"}


def _progress(role: str, done: int, total: int, t0: float) -> None:
    el = time.perf_counter() - t0
    print(
        f"    [{role}] {done:,}/{total:,} in {el:.0f} s ({done / el if el else 0:,.0f}/s), "
        f"load {os.getloadavg()[0]:.1f}",
        file=sys.stderr,
        flush=True,
    )


# -- workers (each runs in its own process) -------------------------------------------------


def worker_commit(spec: dict[str, Any]) -> dict[str, Any]:
    """Async offset commits, at most `window` in flight per group, round-robin over groups."""
    from confluent_kafka import Consumer, TopicPartition

    deadline = time.monotonic() + spec["timeout"]
    parts, window = spec["partitions"], spec["window"]
    groups: list[tuple[str, int]] = [tuple(g) for g in spec["groups"]]  # type: ignore[misc]
    state = {"acked": [0] * len(groups), "errors": 0, "first_error": None}

    def on_commit_for(index: int) -> Any:
        def on_commit(err: Any, _parts: Any) -> None:
            state["acked"][index] += 1
            if err is not None:
                state["errors"] += 1
                state["first_error"] = state["first_error"] or str(err)

        return on_commit

    consumers = [
        Consumer(
            {
                **_conf(spec, "commit"),
                "group.id": group,
                "enable.auto.commit": False,
                "on_commit": on_commit_for(i),
            }
        )
        for i, (group, _) in enumerate(groups)
    ]
    total = sum(count for _, count in groups)
    sent = [0] * len(groups)
    done = 0
    t0 = last_note = time.perf_counter()
    timed_out = False
    while done < total and not timed_out:
        for i, (_, count) in enumerate(groups):
            if sent[i] >= count:
                continue
            c = consumers[i]
            while sent[i] - state["acked"][i] >= window:
                c.poll(0.001)
                if time.monotonic() > deadline:
                    timed_out = True
                    break
            if timed_out:
                break
            sent[i] += 1
            done += 1
            offset = sent[i]
            c.commit(
                offsets=[TopicPartition(spec["topic"], p, offset) for p in range(parts)],
                asynchronous=True,
            )
        if time.perf_counter() - last_note > PROGRESS_S:
            last_note = time.perf_counter()
            _progress("commits", done, total, t0)
    for i, c in enumerate(consumers):
        while state["acked"][i] < sent[i] and time.monotonic() < deadline:
            c.poll(0.01)
    elapsed = time.perf_counter() - t0
    for c in consumers:
        c.close()
    acked = sum(state["acked"])
    ok = acked == total and state["errors"] == 0
    return {
        "ok": ok,
        "error": None
        if ok
        else f"acked {acked}/{total}, {state['errors']} errors (first: {state['first_error']})",
        "commits": acked,
        "seconds": elapsed,
        "per_s": acked / elapsed if elapsed > 0 else 0.0,
    }


def _txn_thread(spec: dict[str, Any], k: int, count: int, out: dict[str, Any]) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    deadline = time.monotonic() + spec["timeout"]
    partition = k % spec["partitions"]
    producer = Producer(
        {
            **_conf(spec, f"txn-{k}"),
            "transactional.id": TXN_ID.format(k),
            "linger.ms": 1,
        }
    )
    metadata = None
    consumer = None
    if spec["offsets"]:
        consumer = Consumer({**_conf(spec, f"eos-{k}"), "group.id": TXN_GROUP.format(k)})
        metadata = consumer.consumer_group_metadata()
    value = b"x" * spec["value_bytes"]
    done = 0
    try:
        producer.init_transactions(60)
        for i in range(1, count + 1):
            if time.monotonic() > deadline:
                out["error"] = "timed out"
                break
            producer.begin_transaction()
            for _ in range(spec["records_per_txn"]):
                producer.produce(OUT_TOPIC, value, key=str(i).encode(), partition=partition)
            if metadata is not None:
                producer.send_offsets_to_transaction(
                    [TopicPartition(IN_TOPIC, partition, i)], metadata, 60
                )
            producer.commit_transaction(60)
            done = i
            out["done"] = done
    except Exception as exc:  # a failed transaction ends this id's run; reported
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        out["done"] = done
        producer.flush(10)
        if consumer is not None:
            consumer.close()


def worker_txn(spec: dict[str, Any]) -> dict[str, Any]:
    """One thread per transactional id: begin, produce, send offsets, commit, repeated."""
    ids: list[tuple[int, int]] = [tuple(x) for x in spec["ids"]]  # type: ignore[misc]
    outs: dict[int, dict[str, Any]] = {k: {"done": 0, "error": None} for k, _ in ids}
    threads = [
        threading.Thread(target=_txn_thread, args=(spec, k, count, outs[k]), daemon=True)
        for k, count in ids
    ]
    total = sum(count for _, count in ids)
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        for t in threads:
            t.join(PROGRESS_S / len(threads))
        if any(t.is_alive() for t in threads):
            _progress(
                f"transactions w{spec['worker']}", sum(o["done"] for o in outs.values()), total, t0
            )
    elapsed = time.perf_counter() - t0
    done = sum(o["done"] for o in outs.values())
    errors = {k: o["error"] for k, o in outs.items() if o["error"]}
    ok = done == total and not errors
    return {
        "ok": ok,
        "error": None if ok else f"{done}/{total} committed; errors: {errors}",
        "transactions": done,
        "done_by_id": {str(k): o["done"] for k, o in outs.items()},
        "seconds": elapsed,
        "per_s": done / elapsed if elapsed > 0 else 0.0,
    }


def _worker_main(role: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    cpu0 = pc._cpu_seconds(os.getpid())
    try:
        result = worker_commit(spec) if role == "_commit" else worker_txn(spec)
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result["client_cpu_s"] = pc._cpu_seconds(os.getpid()) - cpu0
    print(json.dumps(result), flush=True)
    return 0


def _spawn_worker(role: str, spec: dict[str, Any]) -> subprocess.Popen[str]:
    """`script ROLE SPEC_JSON` in its own process; progress goes to our stderr."""
    return pc._track(
        subprocess.Popen(
            [sys.executable, str(SCRIPT), role, json.dumps(spec)],
            stdout=subprocess.PIPE,
            text=True,
        )
    )


def _collect(proc: subprocess.Popen[str], role: str, timeout: float) -> dict[str, Any]:
    try:
        out, _ = proc.communicate(timeout=max(1.0, timeout))
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"ok": False, "error": f"{role} worker killed at the time limit"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"ok": False, "error": f"{role} worker exit {proc.returncode}"}
    return dict(json.loads(lines[-1]))


def python_loop_ms() -> float:
    """Best of 3 of a fixed pure-Python loop: how fast this (shared) machine runs Python now."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        sum(i * i for i in range(1_000_000))
        best = min(best, time.perf_counter() - t0)
    return round(best * 1000, 1)


def _split(total: int, ways: int) -> list[int]:
    return [total // ways + (1 if i < total % ways else 0) for i in range(ways)]


# -- the internal topics on disk ------------------------------------------------------------

_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
ATTR_OFFSET, COUNT_OFFSET, RECORDS_OFFSET = 21, 57, 61
CONTROL_FLAG, COMPRESSION_MASK = 0x20, 0x07


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """Zigzag varint at `pos`: (value, next position)."""
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _scan_records(buf: bytes, pos: int, end: int, count: int, latest: dict[bytes, bool]) -> None:
    """Key and whether the value is non-null of each record of an uncompressed batch body."""
    for _ in range(count):
        length, pos = _varint(buf, pos)
        next_record = pos + length
        pos += 1  # attributes
        _, pos = _varint(buf, pos)  # timestamp delta
        _, pos = _varint(buf, pos)  # offset delta
        key_len, pos = _varint(buf, pos)
        key = bytes(buf[pos : pos + key_len]) if key_len >= 0 else b""
        pos += max(key_len, 0)
        value_len, _ = _varint(buf, pos)
        latest[key] = value_len >= 0
        pos = next_record
        if pos > end:
            raise ValueError("record runs past its batch")


def measure_topic(data_dir: Path, topic: str, keys: bool) -> dict[str, Any]:
    """Bytes, segments and (with `keys`, broker stopped) batches, records and keys of a topic."""
    dirs = [d for d in data_dir.glob(f"{topic}-*") if d.is_dir()]
    out: dict[str, Any] = {
        "partition_dirs": len(dirs),
        "disk_bytes": 0,
        "log_bytes": 0,
        "segments": 0,
        "largest_partition_log_bytes": 0,
    }
    for d in dirs:
        part_log = 0
        for f in d.iterdir():
            with contextlib.suppress(FileNotFoundError):
                st = f.stat()
                out["disk_bytes"] += st.st_blocks * 512
                if f.suffix == ".log":
                    out["log_bytes"] += st.st_size
                    part_log += st.st_size
                    out["segments"] += 1
        out["largest_partition_log_bytes"] = max(out["largest_partition_log_bytes"], part_log)
    if not keys:
        return out
    batches = records = control_batches = control_records = compressed = 0
    latest: dict[bytes, bool] = {}
    for d in sorted(dirs):
        for seg in sorted(d.glob("*.log")):
            buf = seg.read_bytes()
            pos = 0
            while pos + 12 <= len(buf):
                _, length = _BATCH_HEAD.unpack_from(buf, pos)
                end = pos + 12 + length
                if length <= 0 or end > len(buf):
                    break  # torn tail (would be truncated by recovery)
                attrs = struct.unpack_from(">h", buf, pos + ATTR_OFFSET)[0]
                (count,) = struct.unpack_from(">i", buf, pos + COUNT_OFFSET)
                if attrs & CONTROL_FLAG:
                    control_batches += 1
                    control_records += count
                else:
                    batches += 1
                    records += count
                    if attrs & COMPRESSION_MASK:
                        compressed += 1
                    else:
                        _scan_records(buf, pos + RECORDS_OFFSET, end, count, latest)
                pos = end
    out.update(
        batches=batches,
        records=records,
        control_batches=control_batches,
        control_records=control_records,
        compressed_batches_not_scanned=compressed,
        distinct_keys=len(latest),
        live_keys=sum(latest.values()),
    )
    return out


def measure_internal(data_dir: Path, keys: bool) -> dict[str, Any]:
    return {t: measure_topic(data_dir, t, keys) for t in INTERNAL}


def wait_for_cleaning(data_dir: Path, seconds: float) -> dict[str, Any]:
    """Poll the internal topics' bytes every 2 s until unchanged for 10 s or `seconds` pass."""
    t0 = time.monotonic()
    history: list[tuple[float, int, int]] = []
    stable_since = t0
    last = None
    while time.monotonic() - t0 < seconds:
        m = measure_internal(data_dir, keys=False)
        now_sizes = tuple(m[t]["log_bytes"] for t in INTERNAL)
        history.append((round(time.monotonic() - t0, 1), *now_sizes))
        if now_sizes != last:
            last, stable_since = now_sizes, time.monotonic()
        elif time.monotonic() - stable_since >= 10:
            break
        time.sleep(2)
    return {"waited_s": round(time.monotonic() - t0, 1), "log_bytes_history": history}


# -- the broker, its restarts, and the checks ------------------------------------------------


class Broker:
    def __init__(self, root: Path, overrides: dict[str, str]) -> None:
        from tests.broker_process import BrokerProcess

        self.proc = BrokerProcess(root / "data", overrides)
        self.data_dir = root / "data"
        self.log_pos = 0

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap

    @property
    def pid(self) -> int:
        assert self.proc.proc is not None
        return self.proc.proc.pid

    def start(self, timeout: float) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.proc.start(timeout=timeout)
        seconds = time.perf_counter() - t0
        assert self.proc.proc is not None
        pc._track(self.proc.proc)
        return {
            "start_s": seconds,
            "start_cpu_s": pc._cpu_seconds(self.pid),
            "loadavg": os.getloadavg()[0],
            "log": self.new_log_lines(),
        }

    def new_log_lines(self) -> list[str]:
        """The broker log's new INFO/WARNING lines about loading and recovery."""
        try:
            with open(self.proc.log_path) as f:
                f.seek(self.log_pos)
                text = f.read()
                self.log_pos = f.tell()
        except OSError:
            return []
        wanted = ("loaded", "recover", "clean-shutdown", "completing", "ERROR", "Traceback")
        return [line for line in text.splitlines() if any(w in line for w in wanted)][:20]

    def stop(self) -> float:
        t0 = time.perf_counter()
        code = self.proc.stop(timeout=120)
        if code != 0:
            raise pc.BenchError(f"broker exited {code} on SIGTERM; see {self.proc.log_path}")
        return time.perf_counter() - t0

    def kill(self) -> None:
        self.proc.kill()


def _cli(bootstrap: str, *args: str) -> str:
    """`python -m oncelog ...` (the broker's code, via PYTHONPATH) as an operator would run it."""
    out = subprocess.run(
        [sys.executable, "-m", "oncelog", *args, "--bootstrap-server", bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if out.returncode != 0:
        raise pc.BenchError(f"oncelog {' '.join(args)}: {out.stderr.strip()[-300:]}")
    return out.stdout


def describe_txn(bootstrap: str, txn_id: str) -> dict[str, Any]:
    lines = _cli(bootstrap, "transactions", "describe", "--transactional-id", txn_id).splitlines()
    head, row = lines[0].split(), lines[1].split()
    cells = dict(zip(head, row, strict=False))
    return {
        "producer_id": int(cells["ProducerId"]),
        "epoch": int(cells["ProducerEpoch"]),
        "state": cells["TransactionState"],
    }


def listed_txn_ids(bootstrap: str) -> set[str]:
    lines = _cli(bootstrap, "transactions", "list").splitlines()
    return {line.split()[0] for line in lines[1:] if line.strip()}


class Expect:
    """What the broker must still know after a restart."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.partitions = args.partitions
        counts = _split(args.commits, args.groups) if args.commits else []
        self.groups = {COMMIT_GROUP.format(g): c for g, c in enumerate(counts) if c}
        self.txn_counts: dict[int, int] = {}
        self.offsets = not args.no_txn_offsets
        self.restarts = 0

    def live_keys(self) -> dict[str, int]:
        txn_groups = sum(1 for c in self.txn_counts.values() if c) if self.offsets else 0
        return {
            "__consumer_offsets": len(self.groups) * self.partitions + txn_groups,
            "__transaction_state": len(self.txn_counts),
        }


def check_offsets(bootstrap: str, expect: Expect) -> list[str]:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    wanted: dict[str, dict[int, int]] = {
        g: dict.fromkeys(range(expect.partitions), c) for g, c in expect.groups.items()
    }
    if expect.offsets:
        for k, c in expect.txn_counts.items():
            if c:
                wanted[TXN_GROUP.format(k)] = {k % expect.partitions: c}
    problems = []
    for group, parts in wanted.items():
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(IN_TOPIC, p) for p in parts])
        try:
            got = admin.list_consumer_group_offsets([request], require_stable=True)[group]
            result = got.result(60)
        except Exception as exc:
            problems.append(f"{group}: {exc}")
            continue
        have = {tp.partition: tp.offset for tp in result.topic_partitions}
        if have != parts:
            problems.append(f"{group}: committed {have}, want {parts}")
    return problems


def continue_txn(bootstrap: str, k: int, expect: Expect) -> dict[str, Any]:
    """init_transactions on id k, then one transaction (with offsets): it must go on."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    txn_id = TXN_ID.format(k)
    before = describe_txn(bootstrap, txn_id)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    n = expect.txn_counts[k] + 1
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": TXN_GROUP.format(k)})
    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.produce(OUT_TOPIC, b"after restart", partition=k % expect.partitions)
        if expect.offsets:
            producer.send_offsets_to_transaction(
                [TopicPartition(IN_TOPIC, k % expect.partitions, n)],
                consumer.consumer_group_metadata(),
                60,
            )
        producer.commit_transaction(60)
    finally:
        producer.flush(10)
        consumer.close()
    expect.txn_counts[k] = n
    after = describe_txn(bootstrap, txn_id)
    ok = (
        after["producer_id"] == before["producer_id"]
        and after["epoch"] == before["epoch"] + 1
        and after["state"] == "CompleteCommit"
    )
    return {"txn_id": txn_id, "before": before, "after": after, "ok": ok}


def verify(broker: Broker, expect: Expect, kept: dict[str, Any] | None) -> dict[str, Any]:
    """After a restart: offsets, transactional ids and their epochs, and one id continues."""
    t0 = time.perf_counter()
    problems = check_offsets(broker.bootstrap, expect)
    result: dict[str, Any] = {}
    if expect.txn_counts:
        listed = listed_txn_ids(broker.bootstrap)
        missing = {TXN_ID.format(k) for k in expect.txn_counts} - listed
        if missing:
            problems.append(f"transactional ids not listed: {sorted(missing)[:5]}")
        k = expect.restarts % len(expect.txn_counts)
        if kept is not None and kept["k"] == k:
            now = describe_txn(broker.bootstrap, TXN_ID.format(k))
            if now != kept["state"]:
                problems.append(f"{TXN_ID.format(k)} was {kept['state']}, after restart {now}")
        cont = continue_txn(broker.bootstrap, k, expect)
        result["continued"] = cont
        if not cont["ok"]:
            problems.append(f"transactional id did not continue: {cont}")
    expect.restarts += 1
    result.update(ok=not problems, problems=problems, seconds=time.perf_counter() - t0)
    return result


def remember(broker: Broker, expect: Expect) -> dict[str, Any] | None:
    """The state of the id the next verify continues, as it is before the restart."""
    if not expect.txn_counts:
        return None
    k = expect.restarts % len(expect.txn_counts)
    return {"k": k, "state": describe_txn(broker.bootstrap, TXN_ID.format(k))}


# -- the day ---------------------------------------------------------------------------------


def create_topics(bootstrap: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, partitions, 1) for t in (IN_TOPIC, OUT_TOPIC)])
    for future in futures.values():
        future.result(30)


def run_day(broker: Broker, args: argparse.Namespace, expect: Expect) -> dict[str, Any]:
    base = {"bootstrap": broker.bootstrap, "partitions": args.partitions, "topic": IN_TOPIC}
    deadline = time.monotonic() + args.timeout
    procs: list[tuple[str, subprocess.Popen[str]]] = []
    group_items = list(expect.groups.items())
    for w in range(min(args.commit_workers, len(group_items))):
        spec = {
            **base,
            "timeout": args.timeout,
            "window": args.commit_window,
            "groups": group_items[w :: args.commit_workers],
        }
        procs.append(("commits", _spawn_worker("_commit", spec)))
    per_id = _split(args.transactions, args.txn_ids) if args.transactions else []
    ids = [(k, c) for k, c in enumerate(per_id) if c]
    workers = min(args.txn_workers, len(ids))
    for w in range(workers):
        spec = {
            **base,
            "timeout": args.timeout,
            "worker": w,
            "ids": ids[w::workers],
            "offsets": not args.no_txn_offsets,
            "records_per_txn": args.records_per_txn,
            "value_bytes": args.value_bytes,
        }
        procs.append(("transactions", _spawn_worker("_txn", spec)))
    cpu0 = pc._cpu_seconds(broker.pid)
    t0 = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {"commits": [], "transactions": []}
    for role, proc in procs:
        results[role].append(_collect(proc, role, deadline - time.monotonic() + 60))
    elapsed = time.perf_counter() - t0
    for r in results["transactions"]:
        for k, done in r.get("done_by_id", {}).items():
            expect.txn_counts[int(k)] = done
    for k, _ in ids:
        expect.txn_counts.setdefault(k, 0)
    commits = sum(r.get("commits", 0) for r in results["commits"])
    txns = sum(r.get("transactions", 0) for r in results["transactions"])
    return {
        "ok": all(r.get("ok") for rs in results.values() for r in rs),
        "seconds": elapsed,
        "commits": commits,
        "transactions": txns,
        "commits_per_s": commits / elapsed if elapsed else 0.0,
        "transactions_per_s": txns / elapsed if elapsed else 0.0,
        "broker_cpu_s": pc._cpu_seconds(broker.pid) - cpu0,
        "loadavg_end": os.getloadavg(),
        "workers": results,
    }


# -- report ------------------------------------------------------------------------------------


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f}"


def _median(runs: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in runs if key in r]
    return statistics.median(values) if values else float("nan")


def _spread(runs: list[dict[str, Any]], key: str) -> str:
    return " / ".join(f"{r[key]:.2f}" for r in runs if key in r)


def table_row(report: dict[str, Any]) -> str:
    a, internal = report["args"], report["internal"]
    co, ts = internal["__consumer_offsets"], internal["__transaction_state"]
    live = report["expected_live_keys"]
    kill = [r for r in report["restarts"] if r["kind"] == "sigkill"]
    clean = [r for r in report["restarts"] if r["kind"] == "clean"]

    def topic_cell(m: dict[str, Any], expected: int) -> str:
        if "records" not in m:
            return f"{_mb(m['disk_bytes'])} MB"
        return (
            f"{_mb(m['disk_bytes'])} MB, {m['segments']} seg, {m['records']:,} records, "
            f"{m['live_keys']:,} live keys (expected {expected:,})"
        )

    verified = all(r["verify"]["ok"] for r in report["restarts"])
    loads = [r["loadavg"] for r in report["restarts"]]
    loop = [report["machine"].get(f"python_loop_ms_{w}") for w in ("before", "after")]
    return (
        f"| {report['machine']['oncelog']} | {a['commits']:,} by {a['groups']} group(s) x "
        f"{a['partitions']} p | {report['day']['transactions']:,} over {a['txn_ids']} ids | "
        f"{report['day']['seconds']:,.0f} s | "
        f"{topic_cell(co, live['__consumer_offsets'])} | "
        f"{topic_cell(ts, live['__transaction_state'])} | "
        f"{report['fresh_start']['start_s']:.2f} | "
        f"**{_median(clean, 'start_s'):.2f}** ({_spread(clean, 'start_s')}) | "
        f"**{_median(kill, 'start_s'):.2f}** ({_spread(kill, 'start_s')}) | "
        f"{_median(clean, 'stop_s'):.2f} | "
        f"{_median(clean, 'start_cpu_s'):.2f} / {_median(kill, 'start_cpu_s'):.2f} | "
        f"{min(loads):.1f}-{max(loads):.1f} | {' / '.join(str(x) for x in loop if x)} | "
        f"{'yes' if verified else 'NO'} |"
    )


TABLE_HEAD = (
    "| oncelog | offset commits | transactions | day took | __consumer_offsets | "
    "__transaction_state | fresh start s | clean restart s, median (runs) | "
    "restart after SIGKILL s, median (runs) | clean stop s | broker CPU s to ready "
    "(clean / SIGKILL) | load (restarts) | Python loop ms | checks |\n" + "|---" * 14 + "|"
)


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--commits", type=int, default=50_000, help="offset commits in all")
    p.add_argument("--groups", type=int, default=1, help="consumer groups sharing the commits")
    p.add_argument("--partitions", type=int, default=8, help="partitions per commit")
    p.add_argument("--commit-window", type=int, default=64, help="async commits in flight")
    p.add_argument("--commit-workers", type=int, default=1, help="processes for the groups")
    p.add_argument("--transactions", type=int, default=0, help="transactions in all")
    p.add_argument("--txn-ids", type=int, default=8, help="transactional ids (one thread each)")
    p.add_argument("--txn-workers", type=int, default=2, help="processes for the ids")
    p.add_argument("--records-per-txn", type=int, default=2)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument(
        "--no-txn-offsets",
        action="store_true",
        help="no send_offsets_to_transaction (by default each transaction sends one offset)",
    )
    p.add_argument("--restarts", type=int, default=3, help="restarts of each kind")
    p.add_argument(
        "--wait-for-cleaning",
        type=float,
        default=0.0,
        metavar="S",
        help="before restarting, poll the internal topics' size until stable, at most S s",
    )
    p.add_argument("--no-key-scan", action="store_true", help="skip counting records and keys")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="broker setting (repeatable), e.g. for the log cleaner",
    )
    p.add_argument("--oncelog-rev", help="run the broker from `git archive REV`")
    p.add_argument(
        "--broker-without-hypothesis",
        action="store_true",
        help="hide hypothesis (a test dependency) from the broker, as in a plain install: kio "
        "registers Hypothesis strategies at import when it finds it (~0.3-1 s per start)",
    )
    p.add_argument(
        "--keep-data",
        action="store_true",
        help="keep the temporary dir (data dir, broker log, source snapshot) for profiling",
    )
    p.add_argument("--timeout", type=float, default=1500.0, help="seconds for the day")
    p.add_argument("--start-timeout", type=float, default=600.0, help="seconds per start")
    p.add_argument("--json", type=Path, help="write the whole report as JSON here")
    return p.parse_args(argv)


def _print_internal(report: dict[str, Any]) -> None:
    for t in INTERNAL:
        m = report["internal"][t]
        counts = (
            f"{m['records']:,} records in {m['batches']:,} batches "
            f"(+{m['control_records']:,} markers), {m['live_keys']:,} live keys; "
            if "records" in m
            else ""
        )
        print(
            f"{t}: {m['disk_bytes'] / 1e6:.1f} MB on disk ({m['log_bytes'] / 1e6:.1f} MB of "
            f".log) in {m['segments']} segments of {m['partition_dirs']} partitions; {counts}"
            f"expected live keys {report['expected_live_keys'][t]:,}",
            flush=True,
        )


def restarts(
    broker: Broker, args: argparse.Namespace, expect: Expect, report: dict[str, Any]
) -> None:
    """SIGKILL and clean restarts, alternating, each checked; the records are counted at
    the first clean stop (nothing moves then)."""
    kinds = [k for _ in range(args.restarts) for k in ("sigkill", "clean")]
    for i, kind in enumerate(kinds):
        kept = remember(broker, expect)
        run: dict[str, Any] = {"kind": kind}
        if kind == "sigkill":
            broker.kill()
        else:
            run["stop_s"] = broker.stop()
            if "internal" not in report:  # stopped: nothing moves, count records
                t0 = time.perf_counter()
                report["internal"] = measure_internal(broker.data_dir, keys=not args.no_key_scan)
                report["scan_s"] = time.perf_counter() - t0
                _print_internal(report)
        run.update(broker.start(args.start_timeout))
        run["verify"] = verify(broker, expect, kept)
        report["restarts"].append(run)
        v = run["verify"]
        print(
            f"restart {i + 1} ({kind}): ready in {run['start_s']:.2f} s "
            f"(broker CPU {run['start_cpu_s']:.2f} s)"
            + (f", stop took {run['stop_s']:.2f} s" if "stop_s" in run else "")
            + f", load {run['loadavg']:.1f}; checks "
            + ("ok" if v["ok"] else f"FAILED: {v['problems']}")
            + (
                f" (epoch {v['continued']['before']['epoch']} -> "
                f"{v['continued']['after']['epoch']})"
                if "continued" in v
                else ""
            ),
            flush=True,
        )
        for line in run["log"]:
            print(f"    broker: {line[:200]}")


def prepare(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    """The broker's source (`git archive`), its environment, and the machine's description."""
    if args.oncelog_rev:
        pc._use_snapshot(args.oncelog_rev, root / "oncelog-src")
    if args.broker_without_hypothesis:
        hidden = root / "no-hypothesis" / "hypothesis"
        hidden.mkdir(parents=True)
        (hidden / "__init__.py").write_text('raise ImportError("hidden by bench/compaction.py")\n')
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(hidden.parent), os.environ.get("PYTHONPATH")])
        )
    sys.path.insert(0, str(REPO))
    info = pc.machine_info(args.oncelog_rev)
    info["broker_hypothesis"] = "hidden" if args.broker_without_hypothesis else "importable"
    info["oncelog_c_record_walk"] = pc._speedups_loaded()
    info["python_loop_ms_before"] = python_loop_ms()
    return info


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    overrides = dict(kv.split("=", 1) for kv in args.override)
    atexit.register(pc._kill_started)
    signal.signal(signal.SIGTERM, pc._on_signal)
    root = Path(tempfile.mkdtemp(prefix="oncelog-day-"))
    info = prepare(args, root)
    print("machine:", json.dumps(info), flush=True)
    expect = Expect(args)
    broker = Broker(root, overrides)
    report: dict[str, Any] = {"machine": info, "args": vars(args), "restarts": []}
    ok = False
    try:
        report["fresh_start"] = fresh = broker.start(args.start_timeout)
        print(f"fresh start: {fresh['start_s']:.2f} s (pid {broker.pid})", flush=True)
        create_topics(broker.bootstrap, args.partitions)
        print(
            f"day: {args.commits:,} offset commits by {args.groups} group(s) x "
            f"{args.partitions} partitions, {args.transactions:,} transactions over "
            f"{args.txn_ids} ids ...",
            flush=True,
        )
        report["day"] = day = run_day(broker, args, expect)
        print(
            f"day took {day['seconds']:.0f} s: {day['commits']:,} commits "
            f"({day['commits_per_s']:,.0f}/s), {day['transactions']:,} transactions "
            f"({day['transactions_per_s']:,.0f}/s), broker CPU {day['broker_cpu_s']:.0f} s, "
            f"load {day['loadavg_end'][0]:.1f} {'ok' if day['ok'] else 'FAILED'}",
            flush=True,
        )
        if not day["ok"]:
            for rs in day["workers"].values():
                for r in rs:
                    if not r.get("ok"):
                        print(f"  worker: {r.get('error')}")
        report["expected_live_keys"] = expect.live_keys()
        if args.wait_for_cleaning > 0:
            report["cleaning"] = wait_for_cleaning(broker.data_dir, args.wait_for_cleaning)
            print(f"waited {report['cleaning']['waited_s']} s for the sizes to settle")
        report["internal_running"] = measure_internal(broker.data_dir, keys=False)
        restarts(broker, args, expect, report)
        broker.stop()
        info["python_loop_ms_after"] = python_loop_ms()
        ok = day["ok"] and all(r["verify"]["ok"] for r in report["restarts"])
    finally:
        with contextlib.suppress(Exception):
            broker.kill()
        pc._kill_started()
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2, default=str))
        if args.keep_data:
            print(f"kept {root} (data in {root / 'data'})")
        else:
            shutil.rmtree(root, ignore_errors=True)
    if "internal" in report and report["restarts"]:
        print("\nmachine:", json.dumps(info))
        print(f"\n{TABLE_HEAD}\n{table_row(report)}")
    return 0 if ok else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in WORKER_ROLES:
        sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
