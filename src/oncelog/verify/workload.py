"""`oncelog verify run`: the Run, a bounded workload of real clients writing one history.

The Run plans the topics (`plan_topics`), starts (maybe) a broker, a cluster or librdkafka's
mock cluster, creates the topics, starts the client roles (`clients.py`, `copiers.py`: in
threads, or in worker processes for the crash fault, `worker.py`), schedules the faults,
samples the leaders, then heals, drains and final-reads every partition. Every operation goes
through one locked `Recorder`, which also keeps the counts the progress line shows.
"""

from __future__ import annotations

import itertools
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from oncelog.verify import history as h
from oncelog.verify.clients import AssignConsumer, Client, create_topics, new_consumer
from oncelog.verify.cluster import LocalCluster
from oncelog.verify.copiers import HistoryCopier
from oncelog.verify.faults import (
    Fault,
    NotInjected,
    check_fault_names,
    make_faults,
)
from oncelog.verify.mock_cluster import MockCluster
from oncelog.verify.processes import LocalBroker
from oncelog.verify.roles import Roles
from oncelog.verify.worker import IN_PROCESS, ProcessClient, WorkerSpec


@dataclass(slots=True)
class RunConfig:
    """What `oncelog verify run` was asked to do."""

    history: Path
    bootstrap: str | None = None
    start_broker: bool = False
    mock_cluster: bool = False
    #: Brokers of a cluster the tool starts (with etcd); 0: none.
    start_cluster: int = 0
    #: Of the workload's main topic; None: 3 on a cluster the tool starts (or its size if
    #: smaller), else 1. None on a started cluster of 2+ brokers also adds the spread topics
    #: (`plan_topics`); a replication factor given keeps the run to its one topic.
    replication_factor: int | None = None
    #: None: 2, or the replication factor if smaller.
    min_insync_replicas: int | None = None
    #: Extra broker settings (`--broker-config KEY=VALUE`) for the broker or cluster started.
    broker_config: dict[str, str] = field(default_factory=dict)
    #: "all": idempotent producers; "1": plain producers, acks=1, no retries (to show what a
    #: weakened configuration loses).
    acks: str = "all"
    #: Where a started broker or cluster keeps its data and logs; None: a temporary directory,
    #: removed at the end.
    data_dir: Path | None = None
    duration: float = 30.0
    rate: float = 300.0
    partitions: int = 3
    producers: int = 2
    txn_producers: int = 1
    abort_probability: float = 0.2
    consumers: int = 2
    copiers: int = 0
    subscribe: bool = False
    faults: list[str] = field(default_factory=list)
    fault_interval: float = 3.0
    fault_duration: float = 2.0
    topic: str = ""
    progress: bool = True


class Recorder:
    """One history writer shared by all client threads; tallies the operations as they are
    written (``history.Tally``, the counts the report and the timeline show too)."""

    def __init__(self, writer: h.HistoryWriter, started: float) -> None:
        self._writer = writer
        self._lock = threading.Lock()
        self.started = started
        self.tally = h.Tally()

    def now(self) -> float:
        return time.time()

    def write(self, op: h.Op) -> None:
        with self._lock:
            self._writer.write(op)
            self.tally.add(op)

    def counts(self) -> dict[str, int]:
        with self._lock:
            return self.tally.counts()


#: The replication factors of the topics a started cluster's run adds next to its main one, when
#: no replication factor was asked for (those below the main topic's).
SPREAD_REPLICATION_FACTORS = (2, 1)


def plan_topics(config: RunConfig, topic: str) -> list[tuple[str, int]]:
    """The run's writable topics and their replication factors, the main topic first.

    Why more than one: with RF = broker count every broker hosts every partition, so a bug that
    holds only for partitions a broker does not host (AddPartitionsToTxn once checked the
    coordinator's own logs) never shows. On a cluster the tool starts, without an explicit
    replication factor, `TOPIC-rf2` and `TOPIC-rf1` (those below the main topic's RF) are
    added, placed by the brokers: most of their partitions live on brokers other than a given
    transaction's coordinator.
    """
    if config.start_cluster:
        rf = config.replication_factor or min(3, config.start_cluster)
    else:
        rf = config.replication_factor or 1
    planned = [(topic, rf)]
    if config.start_cluster >= 2 and config.replication_factor is None:
        planned += [(f"{topic}-rf{n}", n) for n in SPREAD_REPLICATION_FACTORS if n < rf]
    return planned


class Run:
    """One workload run: topics, clients, fault schedule, final read."""

    def __init__(self, config: RunConfig) -> None:
        self.config = config
        self.topic = config.topic or f"verify-{uuid.uuid4().hex[:8]}"
        #: The writable topics (the main one first) and their replication factors.
        self.planned = plan_topics(config, self.topic)
        #: Their names: what producers write to and consumers and final reads read.
        self.topics = [t for t, _ in self.planned]
        self.stop = threading.Event()
        self.faults_done = threading.Event()
        self.producers_done = threading.Event()
        self.output_topic = f"{self.topic}-out"
        self._txn = itertools.count(1)
        self._lock = threading.Lock()
        self.broker: LocalBroker | None = None
        self.cluster: LocalCluster | None = None
        self.roles: Roles | None = None
        self.sampling_done = threading.Event()
        self.mock: MockCluster | None = None
        self.bootstrap = config.bootstrap or ""
        self.faults: list[Fault] = []
        #: Faults that could not be injected or healed for another reason than NotInjected:
        #: the run then reports them and exits 2, since its fault schedule did not happen.
        self.fault_errors: list[str] = []
        writers = config.producers + config.txn_producers
        self.per_client_rate = config.rate / writers if writers else 0.0
        self.recorder: Recorder

    @property
    def read_topics(self) -> list[str]:
        """Every topic the run writes and reads: the writable ones, and the copiers' output."""
        return self.topics + ([self.output_topic] if self.config.copiers else [])

    def next_txn(self) -> int:
        with self._lock:
            return next(self._txn)

    def fault_op(
        self, fault: Fault, phase: str, detail: str | None, at: float | None = None
    ) -> None:
        op = h.Fault(
            fault.kind,
            "start" if phase == "start" else "end",
            fault.target,
            detail,
            at or time.time(),
        )
        self.recorder.write(op)

    def schedule_faults(self) -> None:
        """Rotate the faults with quiet windows; each is healed before the next starts."""
        cfg = self.config
        end = time.monotonic() + cfg.duration
        for fault in itertools.cycle(self.faults):
            if self.stop.wait(cfg.fault_interval):
                break
            if time.monotonic() + cfg.fault_duration + 1 > end:
                break
            began = time.time()
            try:
                detail = fault.start()
            except NotInjected:
                continue  # nothing to hit this round: no fault window
            except Exception as e:  # a broken fault must not end the schedule in silence
                self.fault_errors.append(f"{fault.kind} {fault.target}: {e}")
                continue
            # A role lookup may take seconds: the window opens when the fault was injected.
            self.fault_op(fault, "start", detail, fault.injected_at or began)
            self.stop.wait(cfg.fault_duration)
            try:
                healed = fault.heal()
            except Exception as e:  # the final heal (`heal_all`) tries again
                self.fault_errors.append(f"healing {fault.kind} {fault.target}: {e}")
                healed = f"heal failed: {e}"
            self.fault_op(fault, "end", healed)
        self.faults_done.set()

    def heal_all(self) -> None:
        for fault in self.faults:
            detail = fault.heal()
            if detail is not None:
                self.fault_op(fault, "end", detail)
        if self.cluster is not None:  # whatever a fault left behind: links, processes
            self.cluster.heal()

    def transactional_ids(self) -> list[str]:
        """Those of the transactional writers (their coordinators are fault targets)."""
        cfg = self.config
        names = [f"txn{i}" for i in range(cfg.txn_producers)]
        names += [f"copier{i}" for i in range(cfg.copiers)]
        return [f"{self.topic}-{name}" for name in names]

    def sample_leaders(self) -> None:
        """Record the controller and the partition leaders whenever they change (timeline)."""
        assert self.roles is not None
        last: h.Leaders | None = None
        while not self.sampling_done.wait(0.5):
            try:
                controller = self.roles.controller()
                leaders = tuple(
                    (t, p, v[0]) for (t, p), v in sorted(self.roles.leaders().items())
                )
            except (KafkaException, TimeoutError, ValueError):
                continue
            if last is None or (last.controller, last.leaders) != (controller, leaders):
                last = h.Leaders(controller, leaders, time.time())
                self.recorder.write(last)

    def wait_ready(self, timeout: float = 60.0) -> None:
        """Recovery: the topics' metadata is served with a leader for every partition."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topics = self.read_topics
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                md = admin.list_topics(timeout=5)
                found = [md.topics.get(t) for t in topics]
                if all(
                    t is not None and t.error is None and self._leaders(t.partitions)
                    for t in found
                ):
                    return
            except KafkaException:
                pass
            time.sleep(0.5)
        raise RuntimeError("the broker did not recover")

    def _leaders(self, partitions: dict[int, Any]) -> bool:
        """Every partition of the topic is listed with a leader."""
        if len(partitions) != self.config.partitions:
            return False
        return all(p.leader >= 0 for p in partitions.values())

    def create_topic(self) -> None:
        """The planned topics and the copiers' output (the main topic's RF), default placement.

        A spread topic gets min.insync.replicas of its own, no more than its replicas (the
        cluster's, 2 by default, would refuse every acks=all write to an RF 1 topic).
        """
        if self.mock is not None:  # the mock has no CreateTopics
            for topic in self.read_topics:
                self.mock.create_topic(topic, self.config.partitions)
            self.wait_ready()
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        main_rf = self.planned[0][1]
        planned = self.planned + ([(self.output_topic, main_rf)] if self.config.copiers else [])
        topics = []
        for topic, rf in planned:
            config = {}
            if rf < main_rf:
                min_isr = self.config.min_insync_replicas or min(2, main_rf)
                config["min.insync.replicas"] = str(min(min_isr, rf))
            topics.append(NewTopic(topic, self.config.partitions, rf, config=config))
        create_topics(admin, topics)
        self.wait_ready()

    def final_read(self, topic: str, partition: int) -> h.FinalRead:
        """Every record of one partition from offset 0, read_uncommitted, up to the high mark."""
        consumer = new_consumer(
            self.bootstrap, f"{self.topic}-final", "read_uncommitted", f"final-{topic}-{partition}"
        )
        try:
            _, high = consumer.get_watermark_offsets(CkTopicPartition(topic, partition), timeout=30)
            consumer.assign([CkTopicPartition(topic, partition, 0)])
            records: list[h.Record] = []
            tp = CkTopicPartition(topic, partition)
            idle_since = time.monotonic()
            while records[-1].offset + 1 < high if records else high > 0:
                messages = consumer.consume(num_messages=1000, timeout=0.5)
                got = [m for m in messages if m.error() is None]
                for m in got:
                    raw = m.value()
                    value = raw.decode() if isinstance(raw, bytes) else str(raw)
                    offset = m.offset()
                    assert offset is not None
                    records.append(h.Record(topic, partition, offset, value))
                if got:
                    idle_since = time.monotonic()
                    continue
                # Nothing new: done once the position passed the high mark (the tail is
                # control records, transaction markers); a leader moving after the heal only
                # delays the read, so wait for it rather than report its records as lost.
                (pos,) = consumer.position([tp])
                if pos.offset >= high or time.monotonic() - idle_since > 60:
                    break
            return h.FinalRead(topic, partition, "read_uncommitted", tuple(records), time.time())
        finally:
            consumer.close()

    def progress(self) -> None:
        """A progress bar on a terminal (redrawn in place), else one line every 5 seconds."""
        started, tty = time.monotonic(), sys.stderr.isatty()
        ticks = 0
        while not self.stop.wait(1.0):
            ticks += 1
            if tty or ticks % 5 == 0:
                line = progress_line(
                    time.monotonic() - started, self.config.duration, self.recorder.counts()
                )
                print(
                    ("\r" + line) if tty else line,
                    end="" if tty else "\n",
                    file=sys.stderr,
                    flush=True,
                )
        if tty:
            print(file=sys.stderr)

    def last_progress(self, began: float) -> dict[str, int]:
        """The final counts; printed as a last progress line, which counts the whole history
        (drain and final reads included) and so agrees with the report and the timeline."""
        counts = self.recorder.counts()
        if self.config.progress:
            line = progress_line(self.config.duration, self.config.duration, counts)
            print(f"{line}  (done after {time.monotonic() - began:.0f}s)", file=sys.stderr)
        return counts

    def clients(self) -> list[Client | ProcessClient]:
        """Producers, transactional producers, consumers alternating isolation levels, copiers.

        With the crash fault the writers run as worker processes, so crashing one is real.
        """
        cfg = self.config
        writers = [("producer", f"producer{i}") for i in range(cfg.producers)]
        writers += [("txn", f"txn{i}") for i in range(cfg.txn_producers)]
        writers += [("copier", f"copier{i}") for i in range(cfg.copiers)]
        out: list[Client | ProcessClient] = []
        for n, (role, name) in enumerate(writers):
            if "crash" in cfg.faults:
                out.append(ProcessClient(self.worker_spec(role, name, n), self.recorder))
            else:
                out.append(IN_PROCESS[role](name, self))
        for i in range(cfg.consumers):
            isolation: h.Isolation = "read_committed" if i % 2 == 0 else "read_uncommitted"
            mode: h.Mode = "subscribe" if cfg.subscribe else "assign"
            out.append(AssignConsumer(f"consumer{i}", self, isolation, mode))
        return out

    def worker_spec(self, role: str, name: str, n: int) -> WorkerSpec:
        return WorkerSpec(
            role=role,
            name=name,
            bootstrap=self.bootstrap,
            topic=self.topic,
            topics=list(self.topics),
            output_topic=self.output_topic,
            partitions=self.config.partitions,
            per_client_rate=self.per_client_rate,
            abort_probability=self.config.abort_probability,
            txn_base=(n + 1) * 10_000_000,
            acks=self.config.acks,
        )

    @staticmethod
    def is_copier(c: Client | ProcessClient) -> bool:
        if isinstance(c, ProcessClient):
            return c.spec.role == "copier"
        return isinstance(c, HistoryCopier)

    def drain(self, clients: list[Client | ProcessClient]) -> None:
        """Stop the clients (copiers last, once they copied everything), then the final reads."""
        for c in clients:
            if isinstance(c, ProcessClient) and not self.is_copier(c):
                c.finish()
        for c in clients:
            if not self.is_copier(c):
                c.join(90)
        self.producers_done.set()
        for c in clients:
            if isinstance(c, ProcessClient):
                c.finish()
        for c in clients:
            c.join(90)
        self.wait_ready()
        for topic in self.read_topics:
            for p in range(self.config.partitions):
                self.recorder.write(self.final_read(topic, p))

    def execute(self) -> dict[str, int]:
        """Start (maybe) a broker or a cluster, run clients and faults, heal, final-read;
        return the counts of the history written (``history.COUNTS``)."""
        cfg = self.config
        check_fault_names(cfg.faults, cfg.start_broker, bool(cfg.start_cluster))
        tmp: tempfile.TemporaryDirectory[str] | None = None
        base = cfg.data_dir
        if base is None and (cfg.start_broker or cfg.start_cluster):
            tmp = tempfile.TemporaryDirectory(prefix="oncelog-verify-")
            base = Path(tmp.name)
        try:
            self.start_servers(base)
            return self.run_clients()
        finally:
            if self.broker is not None:
                self.broker.stop()
            if self.cluster is not None:
                self.cluster.close()
            if self.mock is not None:
                self.mock.stop()
            if tmp is not None:
                tmp.cleanup()

    def start_servers(self, base: Path | None) -> None:
        """The broker, cluster or mock the run was asked to start, and its bootstrap."""
        cfg = self.config
        if cfg.start_broker:
            assert base is not None
            self.broker = LocalBroker(base / "data", base / "broker.log", cfg.broker_config)
            self.broker.start()
            self.bootstrap = self.broker.bootstrap
        elif cfg.start_cluster:
            assert base is not None
            rf = self.planned[0][1]
            self.cluster = LocalCluster(  # set before start: an interrupted start is closed too
                base,
                cfg.start_cluster,
                rf,
                cfg.min_insync_replicas or min(2, rf),
                cfg.broker_config,
            )
            self.cluster.start()
            self.bootstrap = self.cluster.bootstrap
            wait_brokers(self.bootstrap, cfg.start_cluster)
        elif cfg.mock_cluster:
            self.mock = MockCluster()
            self.bootstrap = self.mock.bootstrap

    def run_clients(self) -> dict[str, int]:
        cfg = self.config
        cfg.history.parent.mkdir(parents=True, exist_ok=True)
        cfg.history.write_text("")
        writer = h.HistoryWriter.open(cfg.history)
        self.recorder = Recorder(writer, time.time())
        clients: list[Client | ProcessClient] = []
        threads: list[threading.Thread] = []
        try:
            self.create_topic()
            clients = self.clients()
            crashable = [c for c in clients if isinstance(c, ProcessClient)]
            self.roles = Roles(self.bootstrap, self.read_topics, self.transactional_ids)
            self.faults = make_faults(cfg.faults, self.broker, crashable, self.cluster, self.roles)
            sampler = threading.Thread(target=self.sample_leaders, daemon=True)
            sampler.start()
            for c in clients:
                c.start()
            threads += [threading.Thread(target=self.schedule_faults, daemon=True)]
            if cfg.progress:
                threads.append(threading.Thread(target=self.progress, daemon=True))
            for t in threads:
                t.start()
            began = time.monotonic()
            self.stop.wait(cfg.duration)
            self.stop.set()
            for t in threads:
                t.join(60)
            self.heal_all()
            self.drain(clients)
            self.sampling_done.set()
            sampler.join(30)
            failures = [f"{c.name}: {c.failure!r}" for c in clients if c.failure is not None]
            if failures:
                raise RuntimeError("clients failed: " + "; ".join(failures))
            if self.fault_errors:
                raise RuntimeError("faults failed: " + "; ".join(self.fault_errors))
            return self.last_progress(began)
        finally:
            # Interrupted (Ctrl-C, SIGTERM) or broken: no fault may restart a process after the
            # servers are closed, so the schedule stops and is waited for first.
            self.stop.set()
            for t in threads:
                t.join(60)
            for c in clients:  # a run cut short must not leave worker processes behind
                if isinstance(c, ProcessClient):
                    c.kill()
            self.sampling_done.set()
            writer.close()


def wait_brokers(bootstrap: str, count: int, timeout: float = 60.0) -> None:
    """Until the cluster's metadata lists `count` brokers (placement needs them all)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if len(admin.list_topics(timeout=5).brokers) >= count:
                return
        except KafkaException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"the cluster did not list {count} brokers within {timeout:.0f}s")


# The counts the progress line shows, named as in the report and on the timeline page.
PROGRESS_COUNTS = ("operations", "sends", "acknowledged", "failed", "indeterminate", "faults")


def progress_line(elapsed: float, duration: float, counts: dict[str, int], width: int = 10) -> str:
    """`[#####-----]  12s/20s  operations 2290  sends 900  acknowledged 850  ...  faults 2`."""
    done = min(width, int(width * elapsed / duration)) if duration > 0 else width
    bar = "#" * done + "-" * (width - done)
    shown = "  ".join(f"{k} {counts.get(k, 0)}" for k in PROGRESS_COUNTS)
    return f"[{bar}] {elapsed:4.0f}s/{duration:.0f}s  {shown}"


def run(config: RunConfig) -> dict[str, int]:
    """Run the workload and write the history; checking is left to the caller."""
    return Run(config).execute()
