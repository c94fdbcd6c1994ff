"""The two consume-transform-produce copiers: `HistoryCopier` (`verify run`) and
`TxnTestCopier` (`verify transactions`).

Both run Kafka's copy loop: a read_committed group consumer feeds a transactional producer, one
consumed batch per transaction, the offsets after the batch sent with
`send_offsets_to_transaction`, commit; on errors abort and rewind to the group's committed
offsets; a batch polled across a rebalance (or holding a partition no longer assigned) is not
copied. They are two classes because what each run proves differs, and with it most of the
loop's decisions:

- `HistoryCopier` is a history client (`clients.Client`): every begin, copy, commit and abort
  is an operation with an invocation and a conservatively classified outcome for the checker
  (an unanswered commit is indeterminate, not retried for long), each copy a new unique value
  with its `source` (the checker proves exactly-once by the sources), a recreated producer a
  new process label; it aborts at random (`--abort-probability`) so aborted copies are tested
  too; it may run in a worker process (the crash fault); it decides itself when it is done
  (the input keeps growing until the producers stop, then it drains to the LSO).
- `TxnTestCopier` is Kafka's TransactionalMessageCopier: it copies the input's value and key
  verbatim (the check compares values and their order per partition), batches of
  `--transaction-size`, the group metadata taken at the poll (as Java's `groupMetadata()`),
  a commit retried for up to 90 s (librdkafka resumes the same commit), never an abort on
  purpose; no history (100,000 records), counters and events for the report instead; its
  copy is held back in slices by `--faults-min`, and the run's monitor decides when the copy
  is complete.

Making one class of them would leave one loop with a strategy for nearly every step, and a
change meant for one test would move the other's behaviour.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, Producer
from confluent_kafka import TopicPartition as CkTopicPartition

from oncelog.verify import history as h
from oncelog.verify.clients import (
    ClientStuck,
    RunContext,
    TransactionalProducer,
    bounded,
    new_consumer,
)

# --- verify run -------------------------------------------------------------------------------


class HistoryCopier(TransactionalProducer):
    """`verify run`'s copier (consume-transform-produce): copies the main topic into the output
    topic, exactly once, recording every operation (why not `TxnTestCopier`: module docstring).

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

    def __init__(self, name: str, run: RunContext) -> None:
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


# --- verify transactions ------------------------------------------------------------------------


class CopyJobConfig(Protocol):
    """The part of `txn_system.TxnTestConfig` a copier reads."""

    @property
    def transaction_size(self) -> int:
        """The most records one consume() (hence one transaction) copies."""
        ...


class CopyJob(Protocol):
    """What a `TxnTestCopier` uses of its run (`txn_system.TxnTest`)."""

    @property
    def bootstrap(self) -> str: ...

    @property
    def input_topic(self) -> str: ...

    @property
    def output_topic(self) -> str: ...

    @property
    def group(self) -> str:
        """The copiers' consumer group."""
        ...

    @property
    def config(self) -> CopyJobConfig: ...

    @property
    def done(self) -> threading.Event:
        """Set when the copy is over (complete, timed out, or the run broke)."""
        ...

    def allowance(self) -> int:
        """How many more records the copiers may copy now (`--faults-min`)."""
        ...

    def event(self, who: str, what: str, error: str) -> None:
        """A copier's notable moment (abort, recreation) for the report."""
        ...

    def copied_add(self, n: int) -> None:
        """`n` more records copied in a committed transaction."""
        ...


@dataclass(slots=True)
class CopierCounts:
    """What the copiers went through (summed over copiers for the report)."""

    transactions: int = 0
    commits: int = 0
    aborts: int = 0
    commit_retries: int = 0
    restarts: int = 0
    fencings: int = 0
    stuck: int = 0
    consumer_replacements: int = 0
    rewinds: int = 0
    rebalances: int = 0

    def add(self, other: CopierCounts) -> None:
        for name in self.__slots__:
            setattr(self, name, getattr(self, name) + getattr(other, name))


class TxnTestCopier(threading.Thread):
    """`verify transactions`' copier: Kafka's TransactionalMessageCopier, in confluent-kafka
    (why not `HistoryCopier`: module docstring).

    Each batch the consumer returns is one transaction: its records go to the output partition
    with their input partition's number, the offsets after them go into the transaction with
    the consumer's group metadata (taken when the batch was polled, as Java's groupMetadata()
    only changes in poll), then commit. A transaction is never open across consume(), where
    rebalance callbacks run, so a revoked partition's records are always decided before another
    member gets it; a batch from a consume() that ran one is dropped for a rewind. Errors: abort
    and rewind to the committed offsets; a fatal error (fenced) or a failed abort recreates the
    producer under the same transactional.id.
    """

    def __init__(self, job: CopyJob, index: int) -> None:
        super().__init__(name=f"copier{index}", daemon=True)
        self.job = job
        self.transactional_id = f"{job.input_topic}-copier{index}"
        self.counts = CopierCounts()
        self.failure: BaseException | None = None
        self.generation = 0
        self.abandoned: list[Producer | Consumer] = []
        #: Rebalance callbacks run so far (inside consume()).
        self.moves = 0

    # clients

    def make_producer(self) -> Producer:
        """A transactional producer, initialized (fencing any earlier instance)."""
        self.generation += 1
        producer = Producer(
            {
                "bootstrap.servers": self.job.bootstrap,
                "log_level": 0,
                "transactional.id": self.transactional_id,
                "transaction.timeout.ms": 40000,
                "message.timeout.ms": 30000,
                "linger.ms": 5,
                "client.id": f"{self.transactional_id}.{self.generation}",
            }
        )
        deadline = time.monotonic() + 180
        while True:
            try:
                bounded(partial(producer.init_transactions, 30), 60)
                return producer
            except KafkaException as e:
                if e.args[0].fatal() or time.monotonic() > deadline:
                    raise
            except ClientStuck:
                if time.monotonic() > deadline:
                    raise
            if self.job.done.is_set():
                return producer

    def make_consumer(self) -> Consumer:
        consumer = new_consumer(
            self.job.bootstrap,
            self.job.group,
            "read_committed",
            f"{self.transactional_id}.consumer",
            **{
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
                "heartbeat.interval.ms": 1000,
            },
        )

        def assigned(_: Consumer, partitions: list[CkTopicPartition]) -> None:
            self.counts.rebalances += 1
            self.moves += 1

        def revoked(_: Consumer, partitions: list[CkTopicPartition]) -> None:
            self.moves += 1

        consumer.subscribe(
            [self.job.input_topic], on_assign=assigned, on_revoke=revoked, on_lost=revoked
        )
        return consumer

    def close_consumer(self, consumer: Consumer) -> None:
        try:
            bounded(consumer.close, 15)
        except (KafkaException, ClientStuck, RuntimeError):
            self.abandoned.append(consumer)

    def replace_consumer(self, consumer: Consumer) -> Consumer:
        """A new group member: it starts from the committed offsets (a rewind)."""
        self.counts.consumer_replacements += 1
        self.close_consumer(consumer)
        return self.make_consumer()

    def replace_producer(self, producer: Producer, reason: str, error: str = "") -> Producer:
        """Recreate under the same transactional.id; init_transactions fences the old one and
        aborts its open transaction. The old handle stays referenced (it may be blocked)."""
        self.job.event(self.transactional_id, f"producer recreated ({reason})", error)
        self.counts.restarts += 1
        if reason == "fenced":
            self.counts.fencings += 1
        elif reason == "stuck":
            self.counts.stuck += 1
        self.abandoned.append(producer)
        return self.make_producer()

    def rewind(self, consumer: Consumer) -> Consumer:
        """Back to the group's committed offsets; a consumer that cannot seek is replaced."""
        self.counts.rewinds += 1
        try:
            assignment = consumer.assignment()
            committed = bounded(partial(consumer.committed, assignment, 15), 30)
            if any(tp.error is not None for tp in committed):
                # A partition librdkafka gave up on (say, still UNSTABLE_OFFSET_COMMIT) comes
                # back with an error and no offset: not a reason to copy from the beginning.
                return self.replace_consumer(consumer)
            for tp in committed:
                if tp.offset < 0:
                    tp.offset = OFFSET_BEGINNING
                consumer.seek(tp)
            return consumer
        except (KafkaException, ClientStuck, RuntimeError):
            return self.replace_consumer(consumer)

    # transactions

    def commit(self, producer: Producer) -> None:
        """commit_transaction, retried while retriable (an answer lost to a dead coordinator
        is asked again: librdkafka resumes the same commit)."""
        deadline = time.monotonic() + 90
        while True:
            try:
                bounded(partial(producer.commit_transaction, 30), 60)
                return
            except KafkaException as e:
                err = e.args[0]
                if err.fatal() or err.txn_requires_abort() or not err.retriable():
                    raise
                if time.monotonic() > deadline:
                    raise
                self.counts.commit_retries += 1

    def abort(self, producer: Producer) -> bool:
        """abort_transaction, retried while retriable; False when the producer must go."""
        deadline = time.monotonic() + 90
        while True:
            try:
                bounded(partial(producer.abort_transaction, 30), 60)
                self.counts.aborts += 1
                return True
            except KafkaException as e:
                err = e.args[0]
                if err.fatal() or not err.retriable() or time.monotonic() > deadline:
                    return False
            except ClientStuck:
                return False

    def copy(self, producer: Producer, consumer: Consumer, records: list[Message]) -> None:
        """One transaction: the copies, the consumed offsets, commit."""
        meta = consumer.consumer_group_metadata()
        producer.begin_transaction()
        self.counts.transactions += 1
        ends: dict[int, int] = {}
        for m in records:
            partition, offset = m.partition(), m.offset()
            assert partition is not None and offset is not None
            while True:
                try:
                    producer.produce(self.job.output_topic, m.value(), m.key(), partition=partition)
                    break
                except BufferError:
                    producer.poll(0.1)
            ends[partition] = offset + 1
        offsets = [CkTopicPartition(self.job.input_topic, p, o) for p, o in sorted(ends.items())]
        bounded(partial(producer.send_offsets_to_transaction, offsets, meta, 30), 60)
        self.commit(producer)
        self.counts.commits += 1
        self.job.copied_add(len(records))

    def work(self) -> None:
        producer, consumer = self.make_producer(), self.make_consumer()
        gated = False
        while not self.job.done.is_set():
            if self.job.allowance() <= 0:
                gated = True
                consumer.pause(consumer.assignment())
            elif gated:
                consumer.resume(consumer.assignment())
                gated = False
            moves = self.moves
            try:
                polled = consumer.consume(self.job.config.transaction_size, 0.5)
                records = [m for m in polled if m.error() is None]
                assigned = {tp.partition for tp in consumer.assignment()} if records else set()
            except KafkaException:
                consumer = self.replace_consumer(consumer)
                continue
            if records and (
                self.moves != moves or any(m.partition() not in assigned for m in records)
            ):
                # The batch may hold records of the assignment before the rebalance, which the
                # new one reads again from the committed offsets: copy none, start from those.
                consumer = self.rewind(consumer)
                continue
            if not records:
                continue
            try:
                self.copy(producer, consumer, records)
                continue
            except ClientStuck as e:
                # The librdkafka coordinator bug (see clients.bounded): abandon both handles.
                producer = self.replace_producer(producer, "stuck", str(e))
                consumer = self.replace_consumer(consumer)
                continue
            except KafkaException as e:
                err = e.args[0]
                text = f"{err.name()}: {err.str()}"
                if err.fatal():
                    producer = self.replace_producer(producer, "fenced", text)
                else:
                    self.job.event(self.transactional_id, "abort", text)
                    if not self.abort(producer):
                        producer = self.replace_producer(producer, "abort failed", text)
            consumer = self.rewind(consumer)
        self.close_consumer(consumer)
        try:
            bounded(partial(producer.flush, 10), 20)
        except ClientStuck:
            self.abandoned.append(producer)

    def run(self) -> None:
        try:
            self.work()
        except BaseException as e:  # reported by the run (exit 2)
            self.failure = e
