"""`oncelog verify run`: a bounded workload of real clients (confluent-kafka) writing a history.

Why real clients: the promises users rely on are those a broker keeps towards librdkafka's
idempotent and transactional producers and read_committed consumers, retries and all. Each client
runs in a thread and records every invocation and completion through one locked HistoryWriter.
Outcomes are classified conservatively (REFERENCE §4): only a definite rejection is ``fail``;
timeouts, transport errors and anything unknown are ``info`` (indeterminate), which the checker
never counts against the broker. A client that has to be recreated gets a new process id,
because the checker assumes one process never rewinds.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from oncelog.verify import history as h
from oncelog.verify.cluster import LocalCluster
from oncelog.verify.faults import (
    Fault,
    NotInjected,
    check_fault_names,
    make_faults,
)
from oncelog.verify.mock_cluster import MockCluster
from oncelog.verify.processes import LocalBroker
from oncelog.verify.roles import Roles
from oncelog.verify.worker import ProcessClient, WorkerSpec

#: An idempotent producer's message timeout: well above a fault window plus a failover. When a
#: message times out in librdkafka (2.16) it bumps the producer epoch and sends the messages
#: still queued under the new epoch from sequence 0, those a leader change answered with
#: NOT_LEADER_OR_FOLLOWER included, which it counts as never written though the old leader may
#: have appended them: duplicates no broker can recognise (librdkafka issue #4953; Kafka answers
#: a produce waiting for acks=all on a lost leadership the same way). With 10 s, a 300 s cluster
#: run saw it once (195 duplicates of one producer after two leader changes within 10 s).
#: The same bump follows OUT_OF_ORDER_SEQUENCE_NUMBER on a request behind the first one in
#: flight (a new leader that lacks the first one's unacknowledged batch, which a later leader
#: still has): hence one request in flight per connection for these producers.
IDEMPOTENT_MESSAGE_TIMEOUT_MS = 60_000

# Broker rejections after which the record was certainly not written.
DEFINITE_FAILURES = frozenset(
    {
        KafkaError.MSG_SIZE_TOO_LARGE,
        KafkaError.INVALID_RECORD,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.TOPIC_EXCEPTION,
        KafkaError._INVALID_ARG,
    }
)


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


class ClientStuck(Exception):
    """A client call overran its own timeout by far; the client handle is abandoned."""


def bounded(call: Any, timeout: float) -> Any:
    """Run a blocking client call in a helper thread and give up after `timeout` seconds.

    Why: librdkafka's send_offsets_to_transaction() can block forever, ignoring its timeout,
    when its cached group coordinator was decommissioned by a re-bootstrap (all brokers were
    down: librdkafka issues #5456 and #5511). A stuck call cannot be cancelled, so the caller
    abandons that producer and fences it with a new instance of the same transactional.id.
    """
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as e:  # handed back to the caller's thread
            outcome.append((False, e))

    worker = threading.Thread(target=target, name="bounded-call", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        name = getattr(getattr(call, "func", call), "__name__", "call")
        raise ClientStuck(f"{name} still blocked after {timeout}s")
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _error_text(err: object) -> str:
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return str(err)


def classify(err: KafkaError | None) -> h.Phase:
    """ok, fail (definitely not written) or info (indeterminate) for one produce outcome."""
    if err is None:
        return "ok"
    return "fail" if err.code() in DEFINITE_FAILURES else "info"


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


def spread(n: int, topics: list[str], partitions: int) -> tuple[str, int]:
    """The n-th (topic, partition) of a writer's round robin (`Client.next_target`): the topic
    changes at every step, so a transaction of a few sends spans topics, then the partition:
    t0-p0, t1-p0, t2-p0, t0-p1, ..."""
    return topics[n % len(topics)], (n // len(topics)) % partitions


def create_topics(admin: AdminClient, topics: list[NewTopic]) -> None:
    """CreateTopics on a cluster the tool may just have started: the broker that places the
    replicas may not have seen every registration the Metadata answer listed yet
    (INVALID_REPLICATION_FACTOR, as Kafka answers it), so that is asked again for up to 30 s.
    Any other error raises KafkaException."""
    deadline = time.monotonic() + 30
    retried = False
    while topics:
        again = []
        for topic, future in admin.create_topics(topics, request_timeout=30).items():
            try:
                future.result(60)
            except KafkaException as e:
                code = e.args[0].code()
                if retried and code == KafkaError.TOPIC_ALREADY_EXISTS:
                    continue
                early = time.monotonic() < deadline
                if code == KafkaError.INVALID_REPLICATION_FACTOR and early:
                    again += [t for t in topics if t.topic == topic]
                    continue
                raise
        topics, retried = again, True
        if topics:
            time.sleep(0.5)


def new_consumer(
    bootstrap: str, group: str, isolation: str, client_id: str, **extra: Any
) -> Consumer:
    """A quiet confluent-kafka consumer that never auto-commits (every workload reader)."""
    conf = {
        "bootstrap.servers": bootstrap,
        "log_level": 0,
        "group.id": group,
        "enable.auto.commit": False,
        "isolation.level": isolation,
        "client.id": client_id,
    }
    return Consumer({**conf, **extra})


class Client(threading.Thread):
    """A client thread; ``name`` prefixes its process ids, ``generation`` counts restarts."""

    def __init__(self, name: str, run: Run) -> None:
        super().__init__(name=name, daemon=True)
        self.base = name
        self.run_ = run
        self.rec = run.recorder
        self.generation = 0
        self.index = itertools.count()
        self.failure: BaseException | None = None
        self._targets = itertools.count()

    @property
    def process(self) -> str:
        return f"{self.base}.{self.generation}"

    def restart_identity(self) -> None:
        self.generation += 1
        self.index = itertools.count()

    def next_target(self) -> tuple[str, int]:
        """The next (topic, partition) of this client's round robin over the run's writable
        topics (`spread`), on a counter of its own: consecutive sends of this writer, those of
        one transaction too, go to different topics whatever the other writers do (with one
        shared counter three writers in step could each keep to one topic)."""
        return spread(next(self._targets), self.run_.topics, self.run_.config.partitions)

    def pace(self, per_second: float, started: float, done: int) -> None:
        """Sleep so this client does `per_second` operations on average."""
        if per_second <= 0:
            return
        delay = started + done / per_second - time.monotonic()
        if delay > 0:
            self.run_.stop.wait(min(delay, 1.0))

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # reported in the run's summary
            self.failure = e

    def work(self) -> None:
        raise NotImplementedError


class IdempotentProducer(Client):
    """Sends unique values with enable.idempotence, round robin over the partitions of every
    writable topic of the run (`Client.next_target`)."""

    def work(self) -> None:
        fatal = threading.Event()

        def on_error(err: KafkaError) -> None:
            if err.fatal():
                fatal.set()

        producer = self._with_error_cb(on_error)
        started, done = time.monotonic(), 0
        while not self.run_.stop.is_set():
            if fatal.is_set():
                producer.flush(10)
                self.restart_identity()
                fatal.clear()
                producer = self._with_error_cb(on_error)
            topic, partition = self.next_target()
            self.send(producer, partition, None, None, topic)
            done += 1
            producer.poll(0)
            self.pace(self.run_.per_client_rate, started, done)
        producer.flush(15)

    def _with_error_cb(self, on_error: Any) -> Producer:
        """An idempotent producer; a fatal error (reported via on_error) makes us replace it."""
        durability: dict[str, Any] = (
            {
                "enable.idempotence": True,
                "message.timeout.ms": IDEMPOTENT_MESSAGE_TIMEOUT_MS,
                "max.in.flight.requests.per.connection": 1,
            }
            if self.run_.config.acks == "all"
            else {"enable.idempotence": False, "acks": 1, "retries": 0, "message.timeout.ms": 10000}
        )
        return Producer(
            {
                "bootstrap.servers": self.run_.bootstrap,
                "log_level": 0,
                **durability,
                "linger.ms": 5,
                "client.id": self.process,
                "error_cb": on_error,
            }
        )

    def send(
        self,
        producer: Producer,
        partition: int,
        tid: str | None,
        txn: int | None,
        topic: str | None = None,
        source: h.Source | None = None,
    ) -> None:
        """Record the invocation, produce, and record the completion from the delivery report
        (`topic`: the run's main topic when None)."""
        index = next(self.index)
        process, topic = self.process, topic or self.run_.topic
        value = f"{process}-{index}"
        def record(phase: h.Phase, offset: int | None = None, error: str | None = None) -> None:
            self.rec.write(
                h.Send(
                    process,
                    index,
                    phase,
                    topic,
                    partition,
                    value,
                    None,
                    tid,
                    txn,
                    offset=offset,
                    source=source,
                    error=error,
                    time=time.time(),
                )
            )

        record("invoke")

        def delivered(err: KafkaError | None, msg: Message) -> None:
            phase = classify(err)
            error = None if err is None else _error_text(err)
            record(phase, msg.offset() if phase == "ok" else None, error)

        while True:
            try:
                producer.produce(topic, value.encode(), partition=partition, on_delivery=delivered)
                return
            except BufferError:
                producer.poll(0.1)
            except KafkaException as e:  # e.g. the producer hit a fatal error: nothing queued
                record("fail", error=_error_text(e.args[0]))
                raise


class TransactionalProducer(IdempotentProducer):
    """Sends a few values per transaction, then commits or (with a probability) aborts; the
    round robin spreads one transaction over the topics, hence over partitions led by several
    brokers, most not its coordinator."""

    def transactional_id(self) -> str:
        return f"{self.run_.topic}-{self.base}"

    def make_txn(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.run_.bootstrap,
                "log_level": 0,
                "transactional.id": self.transactional_id(),
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 10000,
                "linger.ms": 5,
                "client.id": self.process,
            }
        )
        while not self.run_.stop.is_set():
            try:
                producer.init_transactions(10)
                return producer
            except KafkaException as e:
                if e.args[0].fatal():
                    raise
        producer.init_transactions(10)
        return producer

    def txn_op(self, action: h.TxnAction, txn: int, call: Any) -> bool:
        """One begin/commit/abort: invoke, retry while retriable, then ok or info."""
        index, tid = next(self.index), self.transactional_id()
        self.rec.write(h.Txn(self.process, index, "invoke", action, tid, txn, time=time.time()))
        deadline = time.monotonic() + 20
        while True:
            try:
                call()
                self.rec.write(h.Txn(self.process, index, "ok", action, tid, txn, time=time.time()))
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.retriable() and time.monotonic() < deadline:
                    continue
                self.rec.write(
                    h.Txn(
                        self.process,
                        index,
                        "info",
                        action,
                        tid,
                        txn,
                        error=_error_text(err),
                        time=time.time(),
                    )
                )
                return False

    def work(self) -> None:
        producer = self.make_txn()
        started, done = time.monotonic(), 0
        rng = random.Random(self.base)
        while not self.run_.stop.is_set():
            txn = self.run_.next_txn()
            if not self.txn_op("begin", txn, producer.begin_transaction):
                producer = self.recreate(producer)
                continue
            try:
                for _ in range(rng.randint(1, 5)):
                    topic, partition = self.next_target()
                    self.send(producer, partition, self.transactional_id(), txn, topic)
                    producer.poll(0)
                    done += 1
                    self.pace(self.run_.per_client_rate, started, done)
            except KafkaException:  # a fatal producer: its transaction is left to time out
                producer = self.recreate(producer)
                continue
            producer.flush(15)
            if not self.finish(producer, txn, rng.random() < self.run_.config.abort_probability):
                producer = self.recreate(producer)

    def finish(self, producer: Producer, txn: int, abort: bool) -> bool:
        """Commit (or abort) one transaction; a failed commit is followed by an abort."""
        if abort:
            return self.txn_op("abort", txn, lambda: producer.abort_transaction(15))
        if self.txn_op("commit", txn, lambda: producer.commit_transaction(15)):
            return True
        return self.txn_op("abort", txn, lambda: producer.abort_transaction(15))

    def recreate(self, producer: Producer) -> Producer:
        """A producer in an unknown state is replaced (fencing the old one) under a new id."""
        with contextlib.suppress(KafkaException):  # a fatal producer raises from flush too
            producer.flush(5)
        self.restart_identity()
        return self.make_txn()


class AssignConsumer(Client):
    """Reads every partition of every writable topic from offset 0 with assign; each consume()
    call is one poll op, each record recorded under the topic it came from.

    With ``mode="subscribe"`` it subscribes instead, in a group of its own (so it gets every
    partition, from the earliest offset): the checker then skips the cross-poll order checks,
    since a rebalance may legitimately rewind a group consumer.
    """

    def __init__(
        self, name: str, run: Run, isolation: h.Isolation, mode: h.Mode = "assign"
    ) -> None:
        super().__init__(name, run)
        self.isolation: h.Isolation = isolation
        self.mode: h.Mode = mode
        self.next_offsets: dict[tuple[str, int], int] = {}

    def make(self) -> Consumer:
        topics = self.run_.topics
        consumer = new_consumer(
            self.run_.bootstrap,
            f"{self.run_.topic}-{self.process}",
            self.isolation,
            self.process,
            **{"auto.offset.reset": "earliest"},
        )
        if self.mode == "subscribe":
            consumer.subscribe(list(topics))
            return consumer
        consumer.assign(
            [
                CkTopicPartition(topic, p, self.next_offsets.get((topic, p), 0))
                for topic in topics
                for p in range(self.run_.config.partitions)
            ]
        )
        return consumer

    def work(self) -> None:
        consumer = self.make()
        while not self.run_.stop.is_set():
            index = next(self.index)
            self.rec.write(
                h.Poll(self.process, index, "invoke", self.mode, self.isolation, time=time.time())
            )
            try:
                messages = consumer.consume(num_messages=200, timeout=0.3)
            except KafkaException as e:
                self.rec.write(
                    h.Poll(
                        self.process,
                        index,
                        "info",
                        self.mode,
                        self.isolation,
                        error=_error_text(e.args[0]),
                        time=time.time(),
                    )
                )
                consumer.close()
                self.restart_identity()
                consumer = self.make()
                continue
            records: list[h.Record] = []
            errors: list[str] = []
            for m in messages:
                err = m.error()
                if err is not None:
                    errors.append(_error_text(err))
                    continue
                topic, partition, offset = m.topic(), m.partition(), m.offset()
                assert topic is not None and partition is not None and offset is not None
                raw = m.value()
                value = raw.decode() if isinstance(raw, bytes) else str(raw)
                records.append(h.Record(topic, partition, offset, value))
                self.next_offsets[(topic, partition)] = offset + 1
            phase: h.Phase = "ok" if records or not errors else "info"
            self.rec.write(
                h.Poll(
                    self.process,
                    index,
                    phase,
                    self.mode,
                    self.isolation,
                    tuple(records),
                    error="; ".join(errors) or None,
                    time=time.time(),
                )
            )
        consumer.close()


class Copier(TransactionalProducer):
    """Consume-transform-produce: copies the topic into the output topic, exactly once.

    A read_committed group consumer (one group for all copiers) feeds a transactional producer;
    each batch is one transaction holding the copies and the offsets after them
    (send_offsets_to_transaction). Every copy is recorded with its ``source``, so the checker can
    prove each input was copied exactly once. After an abort (asked for, or after a failed
    commit) the consumer rewinds to the group's committed offsets. Copiers keep draining after
    the producers stop, until the group's committed offsets reach every partition's LSO.

    The offsets committed are those of the records copied, not the consumer's positions: a
    position can be unknown (after a rebalance or a seek), and librdkafka leaves such a partition
    out of the transaction, which would commit its copies without moving its offset. A batch
    from a consume() that ran a rebalance callback, or with records of a partition no longer
    assigned, is not copied at all: it may hold records of the assignment before, which the
    new one (here or in another copier) reads again from the committed offsets.
    """

    def __init__(self, name: str, run: Run) -> None:
        super().__init__(name, run)
        #: Rebalance callbacks run so far (they run inside consume()).
        self.rebalances = 0

    def make_consumer(self) -> Consumer:
        consumer = new_consumer(
            self.run_.bootstrap,
            f"{self.run_.topic}-copiers",
            "read_committed",
            f"{self.process}-consumer",
            **{"auto.offset.reset": "earliest", "session.timeout.ms": 10000},
        )
        consumer.subscribe(
            [self.run_.topic],
            on_assign=partial(self.moved, "assigned"),
            on_revoke=partial(self.moved, "revoked"),
            on_lost=partial(self.moved, "lost"),
        )
        return consumer

    def moved(self, what: str, _consumer: Consumer, partitions: list[CkTopicPartition]) -> None:
        """A rebalance callback; they run inside consume()."""
        self.rebalances += 1
        self.note(what, " ".join(f"p{tp.partition}" for tp in partitions))

    def note(self, what: str, detail: str = "") -> None:
        """A note in the history for post-mortems (the checker does not judge notes)."""
        self.rec.write(h.Note(self.process, what, detail, time.time()))

    def rewind(self, consumer: Consumer) -> Consumer:
        """Back to the committed offsets; a consumer that cannot seek, or that could not learn
        a partition's committed offset, is replaced (librdkafka answers a partition it gave up
        on, e.g. still UNSTABLE_OFFSET_COMMIT, with an error and no offset: seeking that to the
        beginning would copy everything again)."""
        try:
            committed = bounded(partial(consumer.committed, consumer.assignment(), 10), 20)
            self.note("rewind", " ".join(_committed_text(tp) for tp in committed))
            if any(tp.error is not None for tp in committed):
                return self.replace_consumer(consumer)
            for tp in committed:
                if tp.offset < 0:
                    tp.offset = -2  # OFFSET_BEGINNING
                consumer.seek(tp)
            return consumer
        except (KafkaException, ClientStuck) as e:
            self.note("rewind failed", str(e))
            return self.replace_consumer(consumer)

    def replace_consumer(self, consumer: Consumer) -> Consumer:
        """A new group member, which starts from the committed offsets (a rewind).

        The old one is closed if it can be; a close that hangs (the librdkafka coordinator bug
        described in `bounded`) leaves the handle abandoned, and the group evicts it after its
        session timeout.
        """
        self.note("new consumer")
        self.close_consumer(consumer)
        return self.make_consumer()

    def close_consumer(self, consumer: Consumer) -> None:
        try:
            bounded(consumer.close, 10)
        except (KafkaException, ClientStuck):
            self.abandoned.append(consumer)

    def probe(self, isolation: h.Isolation) -> Consumer:
        group = f"{self.run_.topic}-copiers"
        return new_consumer(self.run_.bootstrap, group, isolation, f"{self.process}-probe")

    def caught_up(self) -> bool:
        """Every input transaction is decided (LSO = high watermark on every partition) and no
        committed input record lies after the group's committed offsets."""
        topic, partitions = self.run_.topic, self.run_.config.partitions
        committed_probe, raw_probe = self.probe("read_committed"), self.probe("read_uncommitted")
        try:
            tps = [CkTopicPartition(topic, p) for p in range(partitions)]
            for p in range(partitions):
                tp = CkTopicPartition(topic, p)
                _, lso = committed_probe.get_watermark_offsets(tp, timeout=10, cached=False)
                _, high = raw_probe.get_watermark_offsets(tp, timeout=10, cached=False)
                if lso < high:
                    return False
            start = committed_probe.committed(tps, timeout=10)
            for tp in start:
                if tp.offset < 0:
                    tp.offset = -2  # OFFSET_BEGINNING
            committed_probe.assign(start)
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline:
                if any(m.error() is None for m in committed_probe.consume(100, 0.5)):
                    return False
            return True
        except KafkaException:
            return False
        finally:
            committed_probe.close()
            raw_probe.close()

    def finished(self, idle_since: float, drain_deadline: float | None) -> bool:
        """After the producers stop: done once the input is idle and entirely copied."""
        if drain_deadline is None or time.monotonic() - idle_since < 3:
            return False
        return time.monotonic() > drain_deadline or self.caught_up()

    def work(self) -> None:
        self.abandoned = []
        producer, consumer = self.make_txn(), self.make_consumer()
        rng = random.Random(self.base)
        idle_since = time.monotonic()
        drain_deadline: float | None = None
        while not self.finished(idle_since, drain_deadline):
            if drain_deadline is None and self.run_.producers_done.is_set():
                drain_deadline = time.monotonic() + 120
            consumer, messages = self.poll(consumer)
            if not messages:
                if time.monotonic() - idle_since > 15 and not self.caught_up():
                    # Input waits but nothing arrives: the consumer is stuck, not idle.
                    consumer, idle_since = self.replace_consumer(consumer), time.monotonic()
                continue
            idle_since = time.monotonic()
            txn = self.run_.next_txn()
            if not self.txn_op("begin", txn, producer.begin_transaction):
                producer, consumer = self.recreate(producer), self.rewind(consumer)
                continue
            ends: dict[int, int] = {}
            for m in messages:
                partition, offset = m.partition(), m.offset()
                assert partition is not None and offset is not None
                source = h.Source(self.run_.topic, partition, offset)
                tid = self.transactional_id()
                self.send(producer, partition, tid, txn, self.run_.output_topic, source)
                producer.poll(0)
                ends[partition] = offset + 1
            producer.flush(15)
            abort = rng.random() < self.run_.config.abort_probability
            try:
                if self.settle(producer, consumer, txn, ends, abort):
                    continue
            except ClientStuck:
                # Keep the stuck handle referenced (destroying it under a blocked call is
                # unsafe); the new instance's init_transactions fences it and aborts its txn.
                self.abandoned.append(producer)
                self.restart_identity()
                producer, consumer = self.make_txn(), self.replace_consumer(consumer)
                continue
            aborted = self.txn_op("abort", txn, partial(producer.abort_transaction, 15))
            consumer = self.rewind(consumer)
            if not aborted:
                producer = self.recreate(producer)
        self.close_consumer(consumer)
        producer.flush(15)

    abandoned: list[Producer | Consumer]

    def poll(self, consumer: Consumer) -> tuple[Consumer, list[Message]]:
        """One consume(): the records to copy, none after a failed poll (the consumer is
        replaced) or when a rebalance callback ran in it or it returned a partition no longer
        assigned (the consumer is rewound)."""
        rebalances = self.rebalances
        try:
            messages = [m for m in consumer.consume(200, 0.3) if m.error() is None]
            assigned = {tp.partition for tp in consumer.assignment()} if messages else set()
        except KafkaException:
            return self.replace_consumer(consumer), []
        if self.rebalances != rebalances and messages:
            self.note("batch dropped", f"{len(messages)} records polled across a rebalance")
            return self.rewind(consumer), []
        if any(m.partition() not in assigned for m in messages):
            self.note("batch dropped", f"{len(messages)} records, some of unassigned partitions")
            return self.rewind(consumer), []
        return consumer, messages

    def settle(
        self, producer: Producer, consumer: Consumer, txn: int, ends: dict[int, int], abort: bool
    ) -> bool:
        """Add the offsets and commit; False when the transaction must be aborted instead."""
        if abort or not self.offsets(producer, consumer, ends):
            return False
        return self.txn_op("commit", txn, partial(producer.commit_transaction, 15))

    def offsets(self, producer: Producer, consumer: Consumer, ends: dict[int, int]) -> bool:
        """Put the offsets after the copied records into the transaction."""
        topic = self.run_.topic
        try:
            after = [CkTopicPartition(topic, p, o) for p, o in sorted(ends.items())]
            meta = consumer.consumer_group_metadata()
            bounded(partial(producer.send_offsets_to_transaction, after, meta, 15), 30)
            return True
        except KafkaException:
            return False


def _committed_text(tp: CkTopicPartition) -> str:
    """A committed offset for a note: p0=339, p1=none (nothing committed), p2=? (an error)."""
    if tp.error is not None:
        return f"p{tp.partition}=? ({tp.error.name()})"
    return f"p{tp.partition}={tp.offset if tp.offset >= 0 else 'none'}"


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
        return isinstance(c, Copier) or (isinstance(c, ProcessClient) and c.spec.role == "copier")

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


IN_PROCESS: dict[str, type[Client]] = {
    "producer": IdempotentProducer,
    "txn": TransactionalProducer,
    "copier": Copier,
}


def run(config: RunConfig) -> dict[str, int]:
    """Run the workload and write the history; checking is left to the caller."""
    return Run(config).execute()
