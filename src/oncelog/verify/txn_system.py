"""`oncelog verify transactions`: Kafka's transactions system test, ours.

After Apache Kafka's `tests/kafkatest/tests/core/transactions_test.py`: an idempotent producer
seeds an input topic with the integers 0..N-1; transactional copiers (one transactional.id each,
one consumer group, subscribe mode) move them to an output topic with consume-transform-produce
(read_committed consumer, transactional producer, `send_offsets_to_transaction` with the
consumer's group metadata, commit; on an error abort and rewind to the committed offsets; a
fenced copier is recreated under the same transactional.id) while brokers are hard-killed or
bounced, one at a time. Then a read_committed read of the whole output topic must hold every
input exactly once, each output partition p listing input partition p's values in input order
(a copy goes to the partition with its input's number, as Kafka's copier does).

Why no history here, unlike `verify run`: the claim is about end states (every input copied
once, in order), and 100,000 records through a history would cost more than the copy. The proof
of an anomaly is its evidence (partition, offsets, values, the faults) in the report.

The check (`copy_check.check_copy`) is a pure function over per-partition sequences, testable
without a broker. The copier is `copiers.TxnTestCopier` (that module says why it is not `verify
run`'s `HistoryCopier`). Fault targets are chosen by role from metadata (a partition leader, a
transaction coordinator, the group coordinator), as those are the brokers whose loss tests the
protocol.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from oncelog.verify.clients import ClientStuck, bounded, create_topics, new_consumer
from oncelog.verify.cluster import LocalCluster
from oncelog.verify.copiers import CopierCounts, TxnTestCopier
from oncelog.verify.copy_check import CopyCheck, Value, check_copy
from oncelog.verify.roles import txn_partition

FAULT_KINDS = ("kill", "bounce")
ROLES = ("leader", "txn-coordinator", "group-coordinator")
TXN_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"
MAX_EVENTS = 100


class RunBroken(Exception):
    """The run itself failed (not the broker's promises): exit 2 with this one line."""


# --- roles (fault targets) -----------------------------------------------------------------


def coordinator_partition(key: str, partitions: int) -> int:
    """Kafka's `Utils.abs(key.hashCode()) % partitions` (a group's or a transactional id's)."""
    return txn_partition(key, partitions)


# --- configuration and fault records -------------------------------------------------------------


@dataclass(slots=True)
class TxnTestConfig:
    """What `oncelog verify transactions` was asked to do."""

    bootstrap: str | None = None
    start_cluster: int = 0
    replication_factor: int | None = None
    min_insync_replicas: int | None = None
    messages: int = 100_000
    copiers: int = 3
    partitions: int = 4
    transaction_size: int = 500
    faults: list[str] = field(default_factory=list)
    fault_interval: float = 4.0
    fault_downtime: float = 4.0
    faults_min: int | None = None
    recovery_timeout: float = 60.0
    copy_timeout: float = 900.0
    topic: str = ""
    progress: bool = True
    data_dir: Path | None = None

    def min_faults(self) -> int:
        if not self.faults:
            return 0
        return 10 if self.faults_min is None else self.faults_min


@dataclass(slots=True)
class FaultRecord:
    kind: str
    broker: int
    role: str
    target: str
    at: float
    down_seconds: float = 0.0
    recovered_seconds: float | None = None


# --- the run -----------------------------------------------------------------------------------


class TxnTest:
    """One run: (cluster), topics, seed, copiers and faults, final reads, check, report."""

    def __init__(self, config: TxnTestConfig) -> None:
        self.config = config
        base = config.topic or f"txn-test-{uuid.uuid4().hex[:8]}"
        self.input_topic = f"{base}-in"
        self.output_topic = f"{base}-out"
        self.group = f"{base}-copiers"
        self.bootstrap = config.bootstrap or ""
        self.cluster: LocalCluster | None = None
        self.done = threading.Event()
        self.copy_finished = threading.Event()
        self._lock = threading.Lock()
        self._copied = 0
        self.committed = 0  # sum of the group's committed input offsets (the monitor's view)
        self.faults: list[FaultRecord] = []
        self.faults_started = 0
        self.faults_over = threading.Event()
        self.fault_failure: BaseException | None = None
        self.recovery_timeouts = 0
        self.seconds: dict[str, float] = {}
        self._admin: AdminClient | None = None
        self._roles = itertools.cycle(ROLES)
        self._turn = itertools.count()
        self._copiers: list[TxnTestCopier] = []
        self.began = time.monotonic()
        self.events: list[dict[str, Any]] = []

    # shared state

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
        return self._admin

    def event(self, who: str, what: str, error: str) -> None:
        """A copier's notable moment (abort, recreation) for the report, with the error."""
        at = round(time.monotonic() - self.began, 1)
        with self._lock:
            if len(self.events) < MAX_EVENTS:
                self.events.append({"at": at, "copier": who, "what": what, "error": error})

    def copied_add(self, n: int) -> None:
        with self._lock:
            self._copied += n

    def allowance(self) -> int:
        """How many more records the copiers may copy now (`--faults-min`): the copy is cut
        into min+1 slices and slice k opens when fault k starts, so at least `min` faults hit a
        running copy. Unlimited without faults, after the last slice, or if faults stopped."""
        need = self.config.min_faults()
        if need == 0 or self.faults_started >= need or self.faults_over.is_set():
            return 1 << 62
        with self._lock:
            copied = self._copied
        return self.config.messages * (self.faults_started + 1) // (need + 1) - copied

    # setup

    def start_cluster(self, base: Path) -> None:
        cfg = self.config
        rf = cfg.replication_factor or min(3, cfg.start_cluster)
        mir = cfg.min_insync_replicas or min(2, rf)
        self.cluster = LocalCluster(base, cfg.start_cluster, rf, mir)
        self.cluster.start()
        self.bootstrap = self.cluster.bootstrap

    def live_brokers(self) -> int:
        """From Metadata, not DescribeCluster (see `roles.Roles.controller`)."""
        try:
            return len(self.admin.list_topics(timeout=5).brokers)
        except KafkaException:
            return 0

    def wait_brokers(self, count: int, timeout: float = 60.0) -> int:
        """Until the cluster lists `count` brokers (or any, for count 0); returns the number."""
        deadline = time.monotonic() + timeout
        while True:
            live = self.live_brokers()
            if (live >= count and live > 0) or time.monotonic() > deadline:
                return live
            time.sleep(0.5)

    def create_topics(self) -> None:
        cfg = self.config
        expected = cfg.start_cluster
        live = self.wait_brokers(expected)
        if live == 0 or live < expected:
            raise RunBroken(f"the cluster lists {live} brokers, not {expected or 'any'}")
        rf = cfg.replication_factor or min(3, live)
        mir = cfg.min_insync_replicas or min(2, rf)
        topics = [
            NewTopic(t, cfg.partitions, rf, config={"min.insync.replicas": str(mir)})
            for t in (self.input_topic, self.output_topic)
        ]
        try:
            create_topics(self.admin, topics)
        except KafkaException as e:
            raise RunBroken(f"cannot create topics: {e.args[0].str()}") from None
        self.wait_recovered([self.input_topic, self.output_topic], cfg.recovery_timeout)

    def commit_start(self) -> None:
        """Commit offset 0 of every input partition for the copiers' group before they start.

        The copiers then start from committed offsets, never from auto.offset.reset: for a
        logical offset librdkafka asks ListOffsets, and a leader move during that lookup can
        leave a late answer that puts the partition, already fetching, back to the lookup; it
        then fetches from the beginning again under the same fetch version and delivers every
        record twice. That client race would read here as a duplicate made by the broker.
        """
        starter = new_consumer(self.bootstrap, self.group, "read_committed", "starter")
        try:
            start = [
                CkTopicPartition(self.input_topic, p, 0) for p in range(self.config.partitions)
            ]
            bounded(partial(starter.commit, offsets=start, asynchronous=False), 60)
        except (KafkaException, ClientStuck) as e:
            raise RunBroken(f"cannot commit the copiers' start offsets: {e}") from None
        finally:
            with contextlib.suppress(KafkaException, ClientStuck, RuntimeError):
                bounded(starter.close, 15)

    def partitions_ok(self, topics: Sequence[str]) -> bool:
        """Every partition of `topics` has a leader and a full ISR (topics not yet created,
        like `__transaction_state` before the first transaction, are skipped)."""
        md = self.admin.list_topics(timeout=5)
        for topic in topics:
            t = md.topics.get(topic)
            if t is None or t.error is not None:
                if topic in (self.input_topic, self.output_topic):
                    return False
                continue
            for p in t.partitions.values():
                if p.leader < 0 or set(p.isrs) != set(p.replicas):
                    return False
        return True

    def wait_recovered(self, topics: Sequence[str], timeout: float) -> float | None:
        """Seconds until every partition of `topics` has a leader and a full ISR; None on
        timeout."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            try:
                if self.partitions_ok(topics):
                    return time.monotonic() - began
            except KafkaException:
                pass
            time.sleep(0.5)
        return None

    # seeding

    def seed(self) -> dict[int, list[Value]]:
        """N integers, partition i % P, from one idempotent producer; the acknowledged values
        per partition in offset order (the input order the output must keep)."""
        cfg = self.config
        acked: dict[int, list[tuple[int, Value]]] = {p: [] for p in range(cfg.partitions)}
        failed: list[str] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                failed.append(f"{err.name()}: {err.str()}")
                return
            partition, offset, raw = msg.partition(), msg.offset(), msg.value()
            assert partition is not None and offset is not None and raw is not None
            acked[partition].append((offset, int(raw)))

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "log_level": 0,
                "enable.idempotence": True,
                "linger.ms": 20,
                "message.timeout.ms": 120000,
                "client.id": f"{self.input_topic}-seeder",
            }
        )
        for i in range(cfg.messages):
            while True:
                try:
                    producer.produce(
                        self.input_topic,
                        str(i).encode(),
                        partition=i % cfg.partitions,
                        on_delivery=delivered,
                    )
                    break
                except BufferError:
                    producer.poll(0.1)
            producer.poll(0)
        left = producer.flush(180)
        if failed or left:
            raise RunBroken(
                f"seeding failed: {len(failed)} deliveries failed, {left} unanswered"
                + (f" (first: {failed[0]})" if failed else "")
            )
        return {p: [v for _, v in sorted(acked[p])] for p in acked}

    # reading

    def stable(self, topic: str, timeout: float) -> dict[int, int]:
        """Waits until no transaction is open on `topic` (LSO = high watermark everywhere);
        returns the high watermarks."""
        cfg = self.config
        rc = new_consumer(self.bootstrap, f"{self.group}-probe", "read_committed", "probe-rc")
        ru = new_consumer(self.bootstrap, f"{self.group}-probe", "read_uncommitted", "probe-ru")
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    ends: dict[int, int] = {}
                    for p in range(cfg.partitions):
                        tp = CkTopicPartition(topic, p)
                        _, lso = rc.get_watermark_offsets(tp, timeout=10, cached=False)
                        _, high = ru.get_watermark_offsets(tp, timeout=10, cached=False)
                        if lso != high:
                            break
                        ends[p] = high
                    else:
                        return ends
                except KafkaException:
                    pass
                if time.monotonic() > deadline:
                    raise RunBroken(f"{topic} still has open transactions after {timeout:.0f}s")
                time.sleep(1)
        finally:
            rc.close()
            ru.close()

    def read_all(self, topic: str, timeout: float = 300.0) -> dict[int, list[tuple[int, Value]]]:
        """Every record of `topic`, read_committed, from offset 0 to the end: (offset, value)
        per partition. Values that parse as integers are ints."""
        cfg = self.config
        ends = self.stable(topic, 120)
        out: dict[int, list[tuple[int, Value]]] = {p: [] for p in range(cfg.partitions)}
        consumer = new_consumer(
            self.bootstrap,
            f"{self.group}-reader",
            "read_committed",
            f"reader-{topic}",
            **{"enable.partition.eof": True},
        )
        try:
            consumer.assign([CkTopicPartition(topic, p, 0) for p in range(cfg.partitions)])
            pending = {p for p in range(cfg.partitions) if ends[p] > 0}
            deadline = time.monotonic() + timeout
            while pending:
                if time.monotonic() > deadline:
                    raise RunBroken(f"reading {topic} did not reach its end in {timeout:.0f}s")
                for m in consumer.consume(5000, 1.0):
                    partition, offset = m.partition(), m.offset()
                    assert partition is not None and offset is not None
                    err = m.error()
                    if err is None:
                        raw = m.value() or b""
                        text = raw.decode(errors="replace")
                        value: Value = int(text) if text.lstrip("-").isdigit() else text
                        out[partition].append((offset, value))
                        if offset + 1 >= ends[partition]:
                            pending.discard(partition)
                    elif err.code() == KafkaError._PARTITION_EOF and offset >= ends[partition]:
                        pending.discard(partition)
            return out
        finally:
            consumer.close()

    # copy monitor

    def committed_total(self, probe: Consumer, ends: dict[int, int]) -> int | None:
        tps = [CkTopicPartition(self.input_topic, p) for p in ends]
        try:
            committed = probe.committed(tps, timeout=10)
        except KafkaException:
            return None
        return sum(min(max(tp.offset, 0), ends[tp.partition]) for tp in committed)

    def monitor(self, ends: dict[int, int], copiers: list[TxnTestCopier]) -> bool:
        """Until the group's committed offsets reach the input's end offsets (every input
        copied), all copiers died, or the copy timeout; prints progress. True when complete."""
        total = sum(ends.values())
        probe = new_consumer(self.bootstrap, self.group, "read_committed", "monitor")
        began = last_print = time.monotonic()
        try:
            while time.monotonic() - began < self.config.copy_timeout:
                got = self.committed_total(probe, ends)
                if got is not None:
                    self.committed = got
                    if got >= total:
                        return True
                if not any(c.is_alive() for c in copiers):
                    return False
                if self.config.progress and time.monotonic() - last_print >= 5:
                    last_print = time.monotonic()
                    print(self.progress_line(time.monotonic() - began), file=sys.stderr)
                time.sleep(1)
            return False
        finally:
            probe.close()

    def progress_line(self, elapsed: float) -> str:
        counts = self.copier_counts(self._copiers)
        kills = sum(f.kind == "kill" for f in self.faults)
        bounces = sum(f.kind == "bounce" for f in self.faults)
        return (
            f"[{elapsed:5.0f}s] committed {self.committed}/{self.config.messages}"
            f"  kills {kills}  bounces {bounces}  commits {counts.commits}"
            f"  aborts {counts.aborts}  restarts {counts.restarts}"
        )

    @staticmethod
    def copier_counts(copiers: Sequence[TxnTestCopier]) -> CopierCounts:
        total = CopierCounts()
        for c in copiers:
            total.add(c.counts)
        return total

    # faults

    def find_target(self, role: str, copiers: Sequence[TxnTestCopier]) -> tuple[int, str] | None:
        """(broker id, what it holds) for a broker in `role`, from the cluster's metadata."""
        turn = next(self._turn)
        if role == "group-coordinator":
            # A fresh client each time: a long-lived one keeps asking the coordinator it cached
            # before that broker restarted (NOT_COORDINATOR, then timeouts), librdkafka 2.16.
            admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0})
            described = admin.describe_consumer_groups([self.group], request_timeout=5)
            coordinator = described[self.group].result(10).coordinator
            if coordinator is None:
                return None
            return int(coordinator.id), f"coordinator of group {self.group}"
        if role == "txn-coordinator":
            txn_id = copiers[turn % len(copiers)].transactional_id
            txn = self.admin.list_topics(TXN_TOPIC, timeout=5).topics.get(TXN_TOPIC)
            if txn is None or txn.error is not None or not txn.partitions:
                return None
            p = coordinator_partition(txn_id, len(txn.partitions))
            leader = txn.partitions[p].leader if p in txn.partitions else -1
            if leader < 0:
                return None
            return leader, f"coordinator of {txn_id} ({TXN_TOPIC}-{p})"
        led: list[tuple[int, str]] = []
        md = self.admin.list_topics(timeout=5)
        for topic in (self.input_topic, self.output_topic):
            t = md.topics.get(topic)
            if t is None:
                continue
            for part in sorted(t.partitions.values(), key=lambda x: x.id):
                if part.leader >= 0:
                    led.append((part.leader, f"leader of {topic}-{part.id}"))
        return led[turn % len(led)] if led else None

    def inject(self, kind: str, node: int, role: str, target: str) -> FaultRecord:
        assert self.cluster is not None
        broker = self.cluster.brokers[node]
        record = FaultRecord(kind, node, role, target, round(time.monotonic() - self.began, 1))
        self.faults.append(record)
        self.faults_started += 1
        down = time.monotonic()
        if kind == "kill":
            broker.kill()
            time.sleep(self.config.fault_downtime)
        else:
            broker.stop()
        self.restart(node)
        record.down_seconds = round(time.monotonic() - down, 1)
        topics = [self.input_topic, self.output_topic, OFFSETS_TOPIC, TXN_TOPIC]
        recovered = self.wait_recovered(topics, self.config.recovery_timeout)
        if recovered is None:
            self.recovery_timeouts += 1
        else:
            record.recovered_seconds = round(recovered, 1)
        return record

    def restart(self, node: int) -> None:
        assert self.cluster is not None
        try:
            self.cluster.start_broker(node)
        except RuntimeError:
            time.sleep(2)
            self.cluster.start_broker(node)  # a second failure breaks the run

    def fault_loop(self, copiers: Sequence[TxnTestCopier]) -> None:
        """Faults one at a time until the copy is done: wait the quiet interval, hit a broker
        in the next role (leader, transaction coordinator, group coordinator), restart it,
        wait until every partition has its full ISR again."""
        kinds = itertools.cycle(self.config.faults)
        try:
            while not self.copy_finished.wait(self.config.fault_interval):
                for _ in ROLES:
                    role = next(self._roles)
                    try:
                        found = self.find_target(role, copiers)
                    except (KafkaException, KeyError, ValueError):
                        found = None
                    if found is not None:
                        break
                else:
                    continue
                node, target = found
                assert self.cluster is not None
                if node not in self.cluster.brokers:
                    continue
                self.inject(next(kinds), node, role, target)
        except BaseException as e:  # the run reports it (exit 2)
            self.fault_failure = e
        finally:
            self.faults_over.set()

    # the whole run

    def execute(self) -> dict[str, Any]:
        cfg = self.config
        self.began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="oncelog-txn-test-") as tmp:
            try:
                if cfg.start_cluster:
                    self.start_cluster(cfg.data_dir or Path(tmp))
                return self.run_test()
            finally:
                self.done.set()
                self.copy_finished.set()
                for c in self._copiers:
                    c.join(30)
                if self.cluster is not None:
                    self.cluster.close()

    def run_test(self) -> dict[str, Any]:
        cfg = self.config
        t = time.monotonic()
        self.create_topics()
        self.seconds["setup"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        seeded = self.seed()
        ends = {p: len(v) for p, v in seeded.items()}
        self.seconds["seed"] = round(time.monotonic() - t, 1)
        t = time.monotonic()
        self.commit_start()
        self._copiers = [TxnTestCopier(self, i) for i in range(cfg.copiers)]
        for c in self._copiers:
            c.start()
        faulter: threading.Thread | None = None
        if cfg.faults:
            faulter = threading.Thread(target=self.fault_loop, args=(self._copiers,), daemon=True)
            faulter.start()
        complete = self.monitor(ends, self._copiers)
        self.copy_finished.set()
        if faulter is not None:
            faulter.join()
        self.done.set()
        for c in self._copiers:
            c.join(120)
        self.seconds["copy"] = round(time.monotonic() - t, 1)
        failures = [f"{c.name}: {c.failure!r}" for c in self._copiers if c.failure is not None]
        if self.fault_failure is not None:
            failures.append(f"faults: {self.fault_failure!r}")
        if failures:
            raise RunBroken("; ".join(failures))
        t = time.monotonic()
        self.wait_recovered([self.input_topic, self.output_topic], cfg.recovery_timeout)
        input_check = check_copy(seeded, self.read_all(self.input_topic))
        output_check = check_copy(seeded, self.read_all(self.output_topic))
        self.seconds["check"] = round(time.monotonic() - t, 1)
        self.seconds["total"] = round(time.monotonic() - self.began, 1)
        return self.report(input_check, output_check, complete)

    def report(self, inp: CopyCheck, out: CopyCheck, complete: bool) -> dict[str, Any]:
        counts = self.copier_counts(self._copiers)
        config = asdict(self.config)
        ok = inp.ok and out.ok and complete
        if inp.ok and out.ok and not complete:
            verdict = f"INCOMPLETE: the copy did not finish ({self.committed} committed)"
        elif ok:
            verdict = "OK: every input copied exactly once, in order"
        else:
            verdict = f"FAIL: {inp.anomalies + out.anomalies} anomalies"
        return {
            "ok": ok,
            "complete": complete,
            "verdict": verdict,
            "messages": {
                "seeded": self.config.messages,
                "copied": out.copied,
                "duplicates": out.duplicates,
                "missing": out.missing,
                "order_violations": out.order_violations,
                "unexpected": out.unexpected,
            },
            "output": out.to_json(),
            "input": inp.to_json(),
            "faults": {
                "kills": sum(f.kind == "kill" for f in self.faults),
                "bounces": sum(f.kind == "bounce" for f in self.faults),
                "recovery_timeouts": self.recovery_timeouts,
                "list": [asdict(f) for f in self.faults],
            },
            "copiers": {"count": self.config.copiers, **asdict(counts), "events": self.events},
            "topics": {
                "input": self.input_topic,
                "output": self.output_topic,
                "group": self.group,
                "partitions": self.config.partitions,
            },
            "seconds": self.seconds,
            "config": {k: v if not isinstance(v, Path) else str(v) for k, v in config.items()},
        }


def summary(report: dict[str, Any]) -> str:
    """The lines printed at the end of a run."""
    m, f, c = report["messages"], report["faults"], report["copiers"]
    lines = [
        f"seeded {m['seeded']}, copied {m['copied']}, duplicates {m['duplicates']},"
        f" missing {m['missing']}, order violations {m['order_violations']},"
        f" unexpected {m['unexpected']}",
        f"faults: kills {f['kills']}, bounces {f['bounces']}"
        f" (recovery timeouts {f['recovery_timeouts']})",
        f"copiers: {c['count']}, transactions {c['transactions']}, commits {c['commits']},"
        f" aborts {c['aborts']}, restarts {c['restarts']} (fenced {c['fencings']},"
        f" stuck {c['stuck']}), consumer replacements {c['consumer_replacements']}",
        f"seconds: {', '.join(f'{k} {v}' for k, v in report['seconds'].items())}",
    ]
    inp = report["input"]
    if not inp["ok"]:
        lines.append(
            f"input topic vs seeded: duplicates {inp['duplicates']}, missing {inp['missing']},"
            f" order violations {inp['order_violations']}, unexpected {inp['unexpected']}"
        )
    events = report["copiers"]["events"]
    if events:
        lines.append(f"first copier event: {json.dumps(events[0])}")
    for where in ("output", "input"):
        for kind, items in report[where]["examples"].items():
            lines.append(f"e.g. {where} {kind}: {json.dumps(items[0])}")
    lines.append(report["verdict"])
    return "\n".join(lines)


def run(config: TxnTestConfig) -> dict[str, Any]:
    """Run the test; the report (see `TxnTest.report`). Raises RunBroken when the run broke."""
    return TxnTest(config).execute()
