"""Exactly-once Kafka sink of the `oncelog` Python data source (streaming and batch writes).

Streaming, per Spark partition and batch (standard Kafka APIs only, so any Kafka works):

* transactional.id = ``{sinkId}-{queryId}-{partitionId}``: the same for every attempt and every
  restart of one checkpoint, so ``init_transactions()`` in a new attempt fences zombie and
  speculative attempts and aborts whatever they left open;
* the partition's *marker* — consumer group = the transactional.id, offset ``batchId + 1`` on
  partition 0 of the marker topic, metadata = batch id, record count, content digest — is
  committed inside the same transaction as the records (``send_offsets_to_transaction``), so
  records and marker become visible together or not at all;
* a replayed batch whose marker is already there is read, digested and skipped; a different
  digest fails the task loudly (`NonDeterministicReplay`);
* the driver's ``commit`` writes an idempotent *seal* (group ``{sinkId}-{queryId}-seal``).

A read_committed reader may see a batch's partitions before Spark records the batch as
committed; a replay never duplicates them. ``semantics=at-least-once`` is the contrast writer:
an idempotent producer without transactions or markers, so a replayed batch is written again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from oncelog import fault_points
from oncelog.spark.markers import (
    Action,
    Digest,
    Marker,
    Seal,
    marker_group,
    plan,
    seal_group,
    verify_replay,
)
from oncelog.spark.rows import BatchEncoder, ProduceArgs, batch_encoder
from oncelog.spark.sink_options import SinkOptions

log = logging.getLogger(__name__)

#: Timeout of every blocking client call (init, commit, offset fetch), seconds.
CLIENT_TIMEOUT = 60.0
#: Serve delivery reports every this many rows so the producer queue drains while we produce.
POLL_EVERY = 4096
#: Rows produced by attempt 0 before the `failTaskAttempt0` hook raises.
FAIL_AFTER_ROWS = 1


class InjectedFailure(RuntimeError):
    """Raised by the `oncelog.testing.failTaskAttempt0` hook (testing only)."""


class DeliveryFailed(RuntimeError):
    """Records the producer could not deliver (at-least-once mode)."""


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What one task wrote; the driver's commit sums these into the batch seal."""

    partition_id: int
    batch_id: int
    query_id: str
    transactional_id: str | None
    records: int
    digest: str
    skipped: bool
    semantics: str


# == Client helpers (also used by tests and the pipeline) ======================================


def marker_partition(opts: SinkOptions) -> TopicPartition:
    """Where markers and seals live: partition 0 of the marker topic (offsets need a real
    partition; one partition is enough because the group id already tells tasks apart)."""
    assert opts.marker_topic is not None
    return TopicPartition(opts.marker_topic, 0)


def transactional_producer(opts: SinkOptions, transactional_id: str) -> Producer:
    """A producer whose `init_transactions()` fenced every older holder of the id."""
    producer = Producer(
        {
            "partitioner": "murmur2_random",  # same partition for a key as Java clients
            **opts.client_conf(),
            "transactional.id": transactional_id,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT)
    return producer


def group_client(opts: SinkOptions, group_id: str) -> Consumer:
    """A consumer that never subscribes: it reads/commits offsets and names the group of a
    transactional offset commit (generation -1, no member id)."""
    conf: dict[str, Any] = {
        **opts.client_conf(),
        "group.id": group_id,
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
    }
    return Consumer(conf)


def read_marker(consumer: Consumer, tp: TopicPartition) -> Marker | None:
    """The marker of the consumer's group. librdkafka asks with require_stable, so an
    in-flight transactional commit is waited for, never answered with a stale offset."""
    [stored] = consumer.committed([TopicPartition(tp.topic, tp.partition)], CLIENT_TIMEOUT)
    if stored.error is not None:
        raise KafkaException(stored.error)
    return Marker.decode(stored.offset, stored.metadata)


def read_seal(opts: SinkOptions, query_id: str) -> Seal | None:
    consumer = group_client(opts, seal_group(opts.sink_id, query_id))
    try:
        tp = marker_partition(opts)
        [stored] = consumer.committed([tp], CLIENT_TIMEOUT)
        return Seal.decode(stored.offset, stored.metadata)
    finally:
        consumer.close()


def produce_batches(
    producer: Producer,
    encode: BatchEncoder,
    batches: Iterator[Any],
    digest: Digest | None,
    stop_after: int | None = None,
) -> int:
    """Produce every row of every Arrow batch (digesting it when a digest is given) with
    bounded buffering: a full local queue waits for deliveries. Returns the rows produced."""
    n = 0
    for batch in batches:
        records = encode(batch)
        if digest is None and records.plain and stop_after is None:
            assert records.topic is not None
            n += _produce_plain(producer, records.topic, records.keys, records.values)
            continue
        for record in records.records():
            if digest is not None:
                digest.add(*record)
            _produce_one(producer, record)
            n += 1
            if n % POLL_EVERY == 0:
                producer.poll(0)
            if n == stop_after:
                return n
    return n


def _produce_plain(
    producer: Producer, topic: str, keys: list[Any] | None, values: list[Any]
) -> int:
    """produce(topic, value, key) for each row: the common shape, one call per row."""
    produce = producer.produce
    poll = producer.poll
    n = 0
    for key, value in zip(keys if keys is not None else [None] * len(values), values, strict=True):
        try:
            produce(topic, value, key)
        except BufferError:
            while True:
                poll(0.1)
                try:
                    produce(topic, value, key)
                    break
                except BufferError:
                    continue
        n += 1
        if n % POLL_EVERY == 0:
            poll(0)
    return n


def _produce_one(producer: Producer, record: ProduceArgs) -> None:
    topic, partition, key, value, headers = record
    while True:
        try:
            producer.produce(
                topic,
                value,
                key,
                -1 if partition is None else partition,
                headers=headers,  # type: ignore[arg-type]  # list is invariant; bytes is fine
            )
            return
        except BufferError:
            producer.poll(0.1)


def digest_batches(encode: BatchEncoder, batches: Iterator[Any], ordered: bool) -> Digest:
    digest = Digest(ordered)
    add = digest.add
    for batch in batches:
        for record in encode(batch).records():
            add(*record)
    return digest


def _run_transaction(producer: Producer, body: Callable[[], None], begun: bool = False) -> None:
    """begin → body → commit; an abortable error aborts and re-raises so Spark retries the task
    (the retry's init_transactions fences us anyway). Retriable commit errors are retried.
    `begun`: the transaction is already open (a cached producer's, see `_still_current`)."""
    if not begun:
        producer.begin_transaction()
    try:
        body()
        for attempt in range(5):
            try:
                producer.commit_transaction(CLIENT_TIMEOUT)
                return
            except KafkaException as exc:
                err: KafkaError = exc.args[0]
                if not err.retriable() or attempt == 4:
                    raise
                log.warning("commit_transaction retriable error %s, retrying", err)
    except KafkaException as exc:
        if exc.args[0].txn_requires_abort():
            producer.abort_transaction(CLIENT_TIMEOUT)
        raise
    except Exception:
        # Not the client's fault (bad row, missing topic...): end the transaction now rather
        # than leave it open until the retry's init_transactions or the transaction timeout.
        try:
            producer.abort_transaction(CLIENT_TIMEOUT)
        except KafkaException:
            log.exception("abort_transaction after a failed task")
        raise


def _flush_checked(producer: Producer, errors: list[KafkaError]) -> None:
    remaining = producer.flush(CLIENT_TIMEOUT)
    if remaining or errors:
        raise DeliveryFailed(f"{remaining} records undelivered, errors: {errors[:5]}")


def _plain_producer(opts: SinkOptions, errors: list[KafkaError]) -> Producer:
    def on_delivery(err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    return Producer(
        {
            "partitioner": "murmur2_random",
            **opts.client_conf(),
            "enable.idempotence": True,
            "delivery.report.only.error": True,
            "on_delivery": on_delivery,
        }
    )


def _task_context() -> TaskContext:
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the Kafka sink's write() must run inside a Spark task")
    return ctx


# == Clients kept by a Python worker between its tasks ==========================================
#
# A streaming task's fixed cost was mostly a new transactional producer and its
# init_transactions (~18 ms, and one task in 15 waited 500 ms in librdkafka's coordinator
# lookup: bench/RESULTS.md 9.2). Spark reuses Python workers, so a worker keeps the producer
# (and marker client) of each transactional id it last initialised and its next task of that id
# uses them — only for attempt 0 and only once the broker confirmed the producer still holds the
# id (`_still_current`): a task retry (attempt > 0) and a fenced producer get a new producer and
# init_transactions, which fences every older holder as before.

#: Entries per worker; the least recently used is closed beyond it.
CACHE_SIZE = 8


@dataclass
class _TxnClients:
    producer: Producer
    consumer: Consumer


_txn_cache: dict[tuple[str, str], _TxnClients] = {}
_seal_cache: dict[tuple[str, str], Consumer] = {}
_plain_cache: dict[str, tuple[Producer, list[KafkaError]]] = {}


def _conf_key(opts: SinkOptions) -> str:
    return repr(sorted(opts.client_conf().items()))


def _take_txn_clients(opts: SinkOptions, txn_id: str) -> _TxnClients | None:
    """The cached clients of `txn_id`, removed from the cache (a task that fails never puts
    them back)."""
    return _txn_cache.pop((_conf_key(opts), txn_id), None)


def _keep_txn_clients(opts: SinkOptions, txn_id: str, clients: _TxnClients) -> None:
    """Cache clients whose producer has no open transaction (after a commit or a skip)."""
    _txn_cache[(_conf_key(opts), txn_id)] = clients
    while len(_txn_cache) > CACHE_SIZE:
        oldest = next(iter(_txn_cache))
        _close_txn_clients(_txn_cache.pop(oldest))


def _close_txn_clients(clients: _TxnClients) -> None:
    try:
        clients.consumer.close()
    except (KafkaException, RuntimeError):
        log.debug("closing a cached marker client", exc_info=True)


def _still_current(
    producer: Producer, consumer: Consumer, tp: TopicPartition, batch_id: int
) -> bool:
    """Begin a transaction with a cached producer and make the coordinator accept its epoch:
    an AddOffsetsToTxn/TxnOffsetCommit of a placeholder marker (overwritten by the real marker
    before the commit; aborted with the transaction otherwise). False, with the transaction
    given up, when a newer producer fenced this one (or anything else went wrong). True means
    no other holder of the id can commit any more: older ones were fenced when this producer
    was initialised, and there is no newer one."""
    placeholder = Marker(batch_id, -1, "")
    offsets = [TopicPartition(tp.topic, tp.partition, placeholder.offset, "{}")]
    try:
        producer.begin_transaction()
        producer.send_offsets_to_transaction(
            offsets, consumer.consumer_group_metadata(), CLIENT_TIMEOUT
        )
        return True
    except KafkaException as exc:
        log.info("cached producer no longer usable (%s): a new one fences the others", exc)
        return False


def _seal_client(opts: SinkOptions, group: str) -> Consumer:
    key = (_conf_key(opts), group)
    client = _seal_cache.get(key)
    if client is None:
        client = _seal_cache[key] = group_client(opts, group)
        while len(_seal_cache) > CACHE_SIZE:
            _seal_cache.pop(next(iter(_seal_cache))).close()
    return client


def _cached_plain_producer(opts: SinkOptions) -> tuple[Producer, list[KafkaError]]:
    """The at-least-once writer's idempotent producer, kept by the worker like the
    transactional ones (so the contrast pays the same set-up as exactly-once)."""
    key = _conf_key(opts)
    entry = _plain_cache.get(key)
    if entry is None:
        errors: list[KafkaError] = []
        entry = _plain_cache[key] = (_plain_producer(opts, errors), errors)
        while len(_plain_cache) > CACHE_SIZE:
            _plain_cache.pop(next(iter(_plain_cache)))[0].flush(CLIENT_TIMEOUT)
    entry[1].clear()
    return entry


# == Streaming ================================================================================


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writer: exactly-once per Spark partition (or at-least-once on request)."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.opts = SinkOptions.parse(options)
        self.schema = schema
        batch_encoder(schema, self.opts.topic)  # fail on the driver, before any task runs

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        ctx = _task_context()
        partition_id = ctx.partitionId()
        attempt = ctx.attemptNumber()
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId") or "-1")
        query_id = ctx.getLocalProperty("sql.streaming.queryId") or ""
        if batch_id < 0 or not query_id:
            raise RuntimeError("streaming batch id / query id missing from the task context")
        encode = batch_encoder(self.schema, self.opts.topic)
        fail = self.opts.fail_attempt0 == (batch_id, partition_id) and attempt == 0
        if not self.opts.exactly_once:
            return self._write_at_least_once(
                iterator, encode, partition_id, batch_id, query_id, fail
            )
        txn_id = marker_group(self.opts.sink_id, query_id, partition_id)
        tp = marker_partition(self.opts)
        clients = _take_txn_clients(self.opts, txn_id)
        if clients is not None and attempt > 0:
            # A retry always fences: the attempt it replaces may still be alive somewhere.
            _close_txn_clients(clients)
            clients = None
        fresh = clients is None
        if clients is None:
            clients = _TxnClients(
                transactional_producer(self.opts, txn_id), group_client(self.opts, txn_id)
            )
        try:
            marker = read_marker(clients.consumer, tp)
            action = plan(marker, batch_id, partition_id)
            if (
                action is not Action.VERIFY
                and not fresh
                and not _still_current(clients.producer, clients.consumer, tp, batch_id)
            ):
                # Fenced by a newer producer of this id: fence it in turn, then read the
                # marker again (that producer may have committed this batch).
                _close_txn_clients(clients)
                clients = _TxnClients(
                    transactional_producer(self.opts, txn_id), group_client(self.opts, txn_id)
                )
                fresh = True
                marker = read_marker(clients.consumer, tp)
                action = plan(marker, batch_id, partition_id)
            # A cached producer that passed _still_current has begun the transaction.
            begun = not fresh and action is not Action.VERIFY
            message = self._write_transaction(
                clients, marker, action, tp, txn_id, iterator, encode,
                (partition_id, batch_id, query_id), fail, begun,
            )  # fmt: skip
        except BaseException:
            _close_txn_clients(clients)
            raise
        _keep_txn_clients(self.opts, txn_id, clients)
        return message

    def _write_transaction(
        self,
        clients: _TxnClients,
        marker: Marker | None,
        action: Action,
        tp: TopicPartition,
        txn_id: str,
        iterator: Iterator[Any],
        encode: BatchEncoder,
        task: tuple[int, int, str],
        fail: bool,
        begun: bool,
    ) -> SinkCommitMessage:
        """Skip (VERIFY) or write the task's rows and marker in one transaction, which a
        cached producer has already begun (`begun`)."""
        partition_id, batch_id, query_id = task
        producer, consumer = clients.producer, clients.consumer
        if action is Action.VERIFY:
            assert marker is not None and not begun
            digest = digest_batches(encode, iterator, self.opts.ordered_digest)
            verify_replay(marker, batch_id, partition_id, digest.hexdigest(), digest.count)
            log.info("batch %d partition %d already written: skipped", batch_id, partition_id)
            return SinkCommitMessage(
                partition_id, batch_id, query_id, txn_id, digest.count,
                digest.hexdigest(), True, self.opts.semantics,
            )  # fmt: skip
        digest = Digest(self.opts.ordered_digest)
        if fail:
            # Die as a crashed attempt would: one record in the log, transaction left
            # open. The retry's init_transactions must abort it.
            if not begun:
                producer.begin_transaction()
            produce_batches(producer, encode, iterator, digest, stop_after=FAIL_AFTER_ROWS)
            producer.flush(CLIENT_TIMEOUT)
            raise InjectedFailure(
                f"injected failure in batch {batch_id} partition {partition_id} attempt 0"
            )

        def body() -> None:
            produce_batches(producer, encode, iterator, digest)
            new = Marker(batch_id, digest.count, digest.hexdigest())
            offsets = [TopicPartition(tp.topic, tp.partition, new.offset, new.metadata())]
            producer.send_offsets_to_transaction(
                offsets, consumer.consumer_group_metadata(), CLIENT_TIMEOUT
            )

        _run_transaction(producer, body, begun=begun)
        return SinkCommitMessage(
            partition_id, batch_id, query_id, txn_id, digest.count,
            digest.hexdigest(), False, self.opts.semantics,
        )  # fmt: skip

    def _write_at_least_once(
        self,
        iterator: Iterator[Any],
        encode: BatchEncoder,
        partition_id: int,
        batch_id: int,
        query_id: str,
        fail: bool,
    ) -> SinkCommitMessage:
        producer, errors = _cached_plain_producer(self.opts)
        try:
            n = produce_batches(producer, encode, iterator, None, FAIL_AFTER_ROWS if fail else None)
            _flush_checked(producer, errors)
        except BaseException:
            _plain_cache.pop(_conf_key(self.opts), None)
            raise
        if fail:
            _plain_cache.pop(_conf_key(self.opts), None)
            raise InjectedFailure(
                f"injected failure in batch {batch_id} partition {partition_id} attempt 0"
            )
        return SinkCommitMessage(
            partition_id, batch_id, query_id, None, n, "", False, self.opts.semantics
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Seal the batch. Runs on the driver in a fresh instance and may run twice for one
        batch after a restart: the seal is a plain offset commit of a fixed value, harmless
        to repeat. The query id comes from the executors' messages."""
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        kill = self.opts.kill_in_commit
        if (
            kill is not None
            and kill[1] == batchId
            and fault_points.kill(kill[0], "spark.sink.commit")
        ):
            time.sleep(60)  # the driver is gone; Spark tears this worker down
        if not self.opts.exactly_once:
            log.info("batch %d written at-least-once by %d tasks", batchId, len(done))
            return
        query_ids = {m.query_id for m in done}
        if not query_ids:
            log.info("batch %d had no writer tasks: nothing to seal", batchId)
            return
        if len(query_ids) != 1:
            raise RuntimeError(f"batch {batchId} commit messages name several queries {query_ids}")
        seal = Seal(
            batchId, len(done), sum(m.records for m in done), sum(1 for m in done if m.skipped)
        )
        group = seal_group(self.opts.sink_id, query_ids.pop())
        consumer = _seal_client(self.opts, group)
        try:
            tp = marker_partition(self.opts)
            consumer.commit(
                offsets=[TopicPartition(tp.topic, tp.partition, seal.offset, seal.metadata())],
                asynchronous=False,
            )
        except BaseException:
            _seal_cache.pop((_conf_key(self.opts), group), None)
            consumer.close()
            raise
        log.info("batch %d sealed: %s", batchId, seal)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: a partition that committed keeps its records and its marker, so the
        retried batch skips it; partitions that failed left only aborted transactions."""
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.warning(
            "batch %d aborted by Spark; %d partitions already committed (a replay skips them)",
            batchId,
            len(done),
        )


# == Batch ====================================================================================


class KafkaBatchWriter(DataSourceArrowWriter):
    """`df.write`: one transaction per task (atomic per task, not per job: a failed job may
    leave some tasks' output committed). Ids are unique per job and attempt, so attempts never
    fence each other; a crashed attempt's transaction ends at transaction.timeout.ms."""

    def __init__(self, options: dict[str, str], schema: StructType, overwrite: bool) -> None:
        self.opts = SinkOptions.parse(options)
        self.schema = schema
        self.job = uuid.uuid4().hex  # chosen on the driver, pickled to every task
        batch_encoder(schema, self.opts.topic)

    def write(self, iterator: Iterator[Any]) -> SinkCommitMessage:
        ctx = _task_context()
        partition_id = ctx.partitionId()
        attempt = ctx.attemptNumber()
        encode = batch_encoder(self.schema, self.opts.topic)
        produced = [0]
        if not self.opts.exactly_once:
            errors: list[KafkaError] = []
            producer = _plain_producer(self.opts, errors)
            produced[0] = produce_batches(producer, encode, iterator, None)
            _flush_checked(producer, errors)
            txn_id = None
        else:
            txn_id = f"{self.opts.sink_id}-batch-{self.job}-{partition_id}-{attempt}"
            txn_producer = transactional_producer(self.opts, txn_id)

            def body() -> None:
                produced[0] = produce_batches(txn_producer, encode, iterator, None)

            _run_transaction(txn_producer, body)
        return SinkCommitMessage(
            partition_id, -1, self.job, txn_id, produced[0], "", False, self.opts.semantics
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.info("batch write %s: %d records by %d tasks", self.job, sum(m.records for m in done),
                 len(done))  # fmt: skip

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.warning("batch write %s failed; %d tasks had committed their transaction", self.job,
                    len(done))  # fmt: skip
