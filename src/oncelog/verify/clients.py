"""The client roles of `oncelog verify run`: real clients (confluent-kafka) writing a history.

Why real clients: the promises users rely on are those a broker keeps towards librdkafka's
idempotent and transactional producers and read_committed consumers, retries and all. Each client
runs in a thread (or, for the crash fault, in a worker process: `worker.py`) and records every
invocation and completion through the run's recorder. Outcomes are classified conservatively
(REFERENCE §4): only a definite rejection is ``fail``; timeouts, transport errors and anything
unknown are ``info`` (indeterminate), which the checker never counts against the broker. A client
that has to be recreated gets a new process id, because the checker assumes one process never
rewinds.

A client sees its run only through `RunContext` (what `workload.Run` and `worker.WorkerRun`
both provide), so this module imports neither. The copier, a client role too, is in
`copiers.py`. Also the client helpers `verify transactions` shares: `bounded`, `new_consumer`,
`create_topics`.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import threading
import time
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from oncelog.verify import history as h

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


class OpSink(Protocol):
    """Where a client's operations go: the run's `workload.Recorder`, or a worker's stdout."""

    def write(self, op: h.Op) -> None: ...


class ClientConfig(Protocol):
    """The part of the run's configuration clients read."""

    @property
    def partitions(self) -> int: ...

    @property
    def abort_probability(self) -> float: ...

    @property
    def acks(self) -> str: ...


class RunContext(Protocol):
    """What a client uses of its run: `workload.Run` in process, `worker.WorkerRun` in a
    worker process."""

    @property
    def topic(self) -> str:
        """The main topic (the copiers' input, the transactional ids' prefix)."""
        ...

    @property
    def topics(self) -> list[str]:
        """Every writable topic, the main one first."""
        ...

    @property
    def output_topic(self) -> str: ...

    @property
    def bootstrap(self) -> str: ...

    @property
    def per_client_rate(self) -> float: ...

    @property
    def config(self) -> ClientConfig: ...

    @property
    def recorder(self) -> OpSink: ...

    @property
    def stop(self) -> threading.Event:
        """Set when the run's duration is over: producers and consumers finish."""
        ...

    @property
    def producers_done(self) -> threading.Event:
        """Set once the producers stopped: copiers drain what is left."""
        ...

    def next_txn(self) -> int:
        """A transaction number unique in the run."""
        ...


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


def error_text(err: object) -> str:
    if isinstance(err, KafkaError):
        return f"{err.name()}: {err.str()}"
    return str(err)


def classify(err: KafkaError | None) -> h.Phase:
    """ok, fail (definitely not written) or info (indeterminate) for one produce outcome."""
    if err is None:
        return "ok"
    return "fail" if err.code() in DEFINITE_FAILURES else "info"


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

    def __init__(self, name: str, run: RunContext) -> None:
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
            error = None if err is None else error_text(err)
            record(phase, msg.offset() if phase == "ok" else None, error)

        while True:
            try:
                producer.produce(topic, value.encode(), partition=partition, on_delivery=delivered)
                return
            except BufferError:
                producer.poll(0.1)
            except KafkaException as e:  # e.g. the producer hit a fatal error: nothing queued
                record("fail", error=error_text(e.args[0]))
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
                        error=error_text(err),
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
        self, name: str, run: RunContext, isolation: h.Isolation, mode: h.Mode = "assign"
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
                        error=error_text(e.args[0]),
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
                    errors.append(error_text(err))
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
