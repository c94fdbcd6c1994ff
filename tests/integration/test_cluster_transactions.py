"""Transactions in a three-broker cluster: partitions led by different brokers commit and
abort atomically for read_committed readers, and a coordinator SIGKILLed between Prepare*
and the markers leaves the transaction for its successor to complete."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from oncelog.client.connection import Connection
from oncelog.coordinator.group.records import partition_for
from oncelog.errors import ErrorCode
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, build_batch
from oncelog.protocol.records.record import encode_record
from tests.cluster_process import Cluster

TOPIC = "txn-data"
STATE_PARTITIONS = 6
INTERNAL = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "6",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    "transaction.state.log.min.isr": "2",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}


def transactional(cluster: Cluster, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": 60_000,
        }
    )
    producer.init_transactions(60)
    return producer


def read_committed(cluster: Cluster, expected: int, partitions: int = 3) -> list[str]:
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "txn-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([KafkaTopicPartition(TOPIC, p, 0) for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            for msg in consumer.consume(1000, 0.5):
                if msg.error() is None:
                    values.append(msg.value().decode())
            if len(values) >= expected:
                # anything more would come right behind: look once more
                for msg in consumer.consume(1000, 1.0):
                    if msg.error() is None:
                        values.append(msg.value().decode())
                break
    finally:
        consumer.close()
    return values


@pytest.mark.timeout(120)
def test_transactions_over_partitions_led_by_different_brokers_are_atomic(
    tmp_path: Path,
) -> None:
    with Cluster(tmp_path, overrides=INTERNAL) as cluster:
        cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        leaders = {leader for leader, _, _ in cluster.partitions(TOPIC).values()}
        assert len(leaders) == 3, "the three partitions should have three leaders"
        producer = transactional(cluster, "spanning")
        for n in range(6):
            producer.begin_transaction()
            for i in range(30):
                producer.produce(TOPIC, f"{n}-{i}".encode(), partition=i % 3)
            if n % 2 == 0:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        values = read_committed(cluster, 90)
        assert sorted(values) == sorted(f"{n}-{i}" for n in (0, 2, 4) for i in range(30))
        cluster.check_replicas_identical(TOPIC)


def txn_id_led_by(cluster: Cluster, node_id: int) -> str:
    """A transactional id whose `__transaction_state` partition `node_id` leads."""
    leaders = {p: state[0] for p, state in cluster.partitions("__transaction_state").items()}
    for n in range(10_000):
        candidate = f"crash-{n}"
        if leaders.get(partition_for(candidate, STATE_PARTITIONS)) == node_id:
            return candidate
    raise AssertionError(f"broker {node_id} leads no partition of __transaction_state")


@pytest.mark.timeout(180)
def test_a_coordinator_killed_between_prepare_and_markers_is_completed_by_its_successor(
    tmp_path: Path,
) -> None:
    crash = {1: {"oncelog.testing.crash.after.prepare": "true"}}
    with Cluster(tmp_path, overrides=INTERNAL, broker_overrides=crash) as cluster:
        cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        # A first transactional producer makes the cluster create __transaction_state.
        transactional(cluster, "warm-up")
        cluster.wait_isr_full("__transaction_state")
        txn_id = txn_id_led_by(cluster, 1)
        producer = transactional(cluster, txn_id)
        producer.begin_transaction()
        for i in range(30):
            producer.produce(TOPIC, f"c-{i}".encode(), partition=i % 3)
        try:
            # Broker 1 dies right after PrepareCommit is replicated, before any marker: the
            # client retries EndTxn on the new coordinator, which finishes the commit.
            producer.commit_transaction(90)
        except KafkaException as exc:
            assert exc.args[0].retriable() or not exc.args[0].fatal(), exc
            producer.commit_transaction(90)
        cluster.wait_for(lambda: not cluster.brokers[1].alive(), 10, "broker 1's crash")
        assert sorted(read_committed(cluster, 30)) == sorted(f"c-{i}" for i in range(30))
        # Restarted without the fault, broker 1 truncates to the new leaders' history.
        cluster.brokers[1].overrides.pop("oncelog.testing.crash.after.prepare")
        cluster.brokers[1].start()
        cluster.check_replicas_identical(TOPIC)


class Trail(logging.Handler):
    """What a copier did and what its consumer's librdkafka warned of (offset resets), so a
    failed check says how a duplicate came about."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []
        self.logger = logging.getLogger(f"copier-trail-{id(self)}")
        self.logger.addHandler(self)
        self.logger.propagate = False

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "offset" in message.lower():  # not the reconnects a broker kill brings
            self.note(f"librdkafka: {message}")

    def note(self, line: str) -> None:
        self.lines.append(f"{time.monotonic():.3f} {line}")

    def __str__(self) -> str:
        return "\n".join(self.lines[-60:])


def _offsets(parts: list[KafkaTopicPartition]) -> str:
    return ", ".join(f"{p.partition}@{p.offset}" for p in parts)


def copy_exactly_once(
    cluster: Cluster, source: str, sink: str, total: int, deadline: float, trail: Trail
) -> None:
    """A consume-transform-produce copier (send_offsets_to_transaction) that starts over
    from the group's committed offsets after any failed transaction, as a Kafka Streams
    task does."""
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "copier",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10_000,
            "logger": trail.logger,
        }
    )
    consumer.subscribe(
        [source],
        on_assign=lambda _c, parts: trail.note(f"assigned {_offsets(parts)}"),
        on_revoke=lambda _c, parts: trail.note(f"revoked {_offsets(parts)}"),
    )
    producer = transactional(cluster, "copier-txn")
    copied = 0
    try:
        while time.monotonic() < deadline:
            batch = [m for m in consumer.consume(200, 1.0) if m.error() is None]
            if not batch:
                if _all_copied(consumer, source, total, deadline):
                    return
                continue
            for m in batch:
                if m.offset() == 0:
                    trail.note(f"read partition {m.partition()} from offset 0")
            try:
                producer.begin_transaction()
                for msg in batch:
                    producer.produce(sink, msg.value().upper(), key=msg.value())
                positions = consumer.position(consumer.assignment())
                group = consumer.consumer_group_metadata()
                producer.send_offsets_to_transaction(positions, group, 30)
                producer.commit_transaction(30)
                copied += len(batch)
            except KafkaException as exc:
                error = exc.args[0]
                trail.note(f"transaction failed: {error}")
                if error.fatal():
                    raise
                if error.txn_requires_abort():
                    producer.abort_transaction(30)
                # Start over from what the group committed: nothing is lost or doubled.
                committed = _committed(consumer, deadline)
                trail.note(f"starting over from {_offsets(committed)}")
                for tp in committed:
                    start = tp if tp.offset >= 0 else KafkaTopicPartition(tp.topic, tp.partition, 0)
                    consumer.seek(start)
        raise AssertionError(f"the copier did not finish in time ({copied} copied)")
    finally:
        consumer.close()


def _committed(consumer: Consumer, deadline: float) -> list[KafkaTopicPartition]:
    """The group's committed offsets of the assignment, asked again while any partition
    comes with an error: such a partition's offset is not "none committed" (-1001), and
    starting it over from 0 would copy it twice."""
    while True:
        try:
            committed = consumer.committed(consumer.assignment(), timeout=30)
        except KafkaException as exc:
            if exc.args[0].fatal() or time.monotonic() > deadline:
                raise
            continue
        if not any(tp.error is not None for tp in committed):
            return list(committed)
        if time.monotonic() > deadline:
            raise AssertionError(f"committed offsets with errors: {committed}")
        time.sleep(0.2)


def _all_copied(consumer: Consumer, source: str, total: int, deadline: float) -> bool:
    if len(consumer.assignment()) < 3:
        return False
    return sum(max(tp.offset, 0) for tp in _committed(consumer, deadline)) >= total


@pytest.mark.timeout(240)
def test_a_copier_copies_exactly_once_across_broker_kills(tmp_path: Path) -> None:
    with Cluster(tmp_path, overrides=INTERNAL) as cluster:
        cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        cluster.create_topic("txn-copy", 3, 3, {"min.insync.replicas": "2"})
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "enable.idempotence": True})
        total = 3000
        for i in range(total):
            producer.produce(TOPIC, f"m{i}".encode(), partition=i % 3)
        assert producer.flush(30) == 0
        # The source holds each record once (an idempotent producer), so any duplicate the
        # check finds was made by the copy.
        assert sum(cluster.high_watermarks(TOPIC).values()) == total
        # The copier starts from committed offsets (0), not from auto.offset.reset. For a
        # logical offset librdkafka asks ListOffsets, and a leader move during that lookup
        # sends a second request; a late answer to the first then puts the partition, already
        # fetching, back to the lookup, and it fetches from the beginning again under the same
        # version: every record is delivered twice (seen here as one whole source partition
        # copied twice; the records' app position never went back, so the copier's commits
        # stayed right). That client race is not the broker's EOS, which this test checks.
        starter = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "copier"})
        starter.commit(
            offsets=[KafkaTopicPartition(TOPIC, p, 0) for p in range(3)], asynchronous=False
        )
        starter.close()

        stop = threading.Event()
        kills: list[int] = []
        trail = Trail()

        def killer() -> None:
            victim = 1
            while not stop.wait(3.0):
                cluster.brokers[victim].kill()
                kills.append(victim)
                trail.note(f"killed broker {victim}")
                time.sleep(1.0)
                cluster.brokers[victim].start()
                trail.note(f"restarted broker {victim}")
                victim = victim % 3 + 1

        thread = threading.Thread(target=killer)
        thread.start()
        try:
            copy_exactly_once(cluster, TOPIC, "txn-copy", total, time.monotonic() + 150, trail)
        finally:
            stop.set()
            thread.join()
        assert kills, "no broker was killed"
        consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": "copy-check",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([KafkaTopicPartition("txn-copy", p, 0) for p in range(3)])
        copied: list[str] = []
        #: key -> (partition, offset) of each copy read: the same place twice is a re-read,
        #: two places a second copy.
        where: dict[str, list[tuple[int, int]]] = {}
        idle = time.monotonic() + 20
        while time.monotonic() < idle and len(copied) < total:
            for msg in consumer.consume(5000, 1.0):
                if msg.error() is None:
                    copied.append(msg.key().decode())
                    where.setdefault(copied[-1], []).append((msg.partition(), msg.offset()))
        consumer.close()
        twice = sorted((places, key) for key, places in where.items() if len(places) > 1)
        assert not twice, f"{len(twice)} keys read twice, e.g. {twice[:10]}; the copier:\n{trail}"
        assert sorted(copied) == sorted(f"m{i}" for i in range(total))
        cluster.check_replicas_identical("txn-copy")


@pytest.mark.timeout(120)
def test_a_zombie_is_fenced_after_its_coordinator_moved(tmp_path: Path) -> None:
    with Cluster(tmp_path, overrides=INTERNAL) as cluster:
        cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        transactional(cluster, "warm-up")
        cluster.wait_isr_full("__transaction_state")
        txn_id = txn_id_led_by(cluster, 2)
        zombie = transactional(cluster, txn_id)
        zombie.begin_transaction()
        for i in range(10):
            zombie.produce(TOPIC, f"zombie-{i}".encode(), partition=i % 3)
        zombie.flush(30)
        cluster.brokers[2].kill()  # the coordinator moves to another replica
        successor = transactional(cluster, txn_id)  # bumps the epoch, aborts the zombie's
        successor.begin_transaction()
        for i in range(10):
            successor.produce(TOPIC, f"new-{i}".encode(), partition=i % 3)
        successor.commit_transaction(60)
        with pytest.raises(KafkaException) as raised:
            zombie.commit_transaction(30)
        assert raised.value.args[0].fatal() or "fenced" in str(raised.value).lower()
        values = read_committed(cluster, 10)
        assert sorted(values) == sorted(f"new-{i}" for i in range(10))
        cluster.brokers[2].start()
        cluster.check_replicas_identical(TOPIC)


def transactional_batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        base_offset=0,
        records=encode_record(offset_delta=0, key=None, value=b"late"),
        record_count=1,
        last_offset_delta=0,
        base_timestamp=now,
        max_timestamp=now,
        attributes=TRANSACTIONAL_FLAG,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=sequence,
    )


@pytest.mark.timeout(120)
def test_transactional_data_for_a_partition_outside_the_transaction_is_refused(
    tmp_path: Path,
) -> None:
    """KIP-890 across brokers: the leader of a partition asks the transaction's coordinator
    (another broker) before it takes a transaction's first batch; one the producer never
    added is refused with INVALID_TXN_STATE and nothing is written."""
    with Cluster(tmp_path, overrides=INTERNAL) as cluster:
        cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        transactional(cluster, "warm-up")
        cluster.wait_isr_full("__transaction_state")
        txn_id = txn_id_led_by(cluster, 1)
        leaders = {p: state[0] for p, state in cluster.partitions(TOPIC).items()}
        # Both led by brokers other than the coordinator: the write the producer added goes
        # through the remote check as much as the one it did not.
        added, elsewhere = sorted(p for p, leader in leaders.items() if leader != 1)[:2]
        producer = transactional(cluster, txn_id)
        producer.begin_transaction()
        producer.produce(TOPIC, b"in-txn", partition=added)
        producer.flush(30)
        # The producer's id and epoch, as the coordinator gave them.
        with Connection("127.0.0.1", cluster.brokers[1].port) as conn:
            described = conn.call(
                65, (0, 0), {"transactional_ids": [txn_id]}
            ).transaction_states[0]
        pid, epoch = described.producer_id, described.producer_epoch
        leader = cluster.brokers[leaders[elsewhere]]
        body = {
            "transactional_id": txn_id,
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [
                {
                    "name": TOPIC,
                    "partition_data": [
                        {"index": elsewhere, "records": transactional_batch(pid, epoch, 0)}
                    ],
                }
            ],
        }
        with Connection("127.0.0.1", leader.port) as conn:
            response = conn.call(0, (9, 9), body)
        code = response.responses[0].partition_responses[0].error_code
        assert code == ErrorCode.invalid_txn_state
        producer.commit_transaction(30)
        assert read_committed(cluster, 1) == ["in-txn"]
        cluster.check_replicas_identical(TOPIC)


@pytest.mark.timeout(150)
def test_transactions_on_partitions_the_coordinator_does_not_host(tmp_path: Path) -> None:
    """RF below the broker count: an RF=1 topic with one partition on each broker and an RF=2
    topic on the two brokers that are not the coordinator. Kafka's coordinator checks a
    partition against the cluster's metadata, not against the logs it holds itself."""
    with Cluster(tmp_path, overrides=INTERNAL) as cluster:
        cluster.create_topic("txn-rf1", assignment=[[1], [2], [3]])
        cluster.create_topic("txn-rf2", assignment=[[2, 3], [3, 2]])
        transactional(cluster, "warm-up")
        cluster.wait_isr_full("__transaction_state")
        txn_id = txn_id_led_by(cluster, 1)
        producer = transactional(cluster, txn_id)
        for n in range(4):
            producer.begin_transaction()
            for p in range(3):
                producer.produce("txn-rf1", f"{n}-rf1-{p}".encode(), partition=p)
            for p in range(2):
                producer.produce("txn-rf2", f"{n}-rf2-{p}".encode(), partition=p)
            if n % 2 == 0:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
        expected = {
            "txn-rf1": sorted(f"{n}-rf1-{p}" for n in (0, 2) for p in range(3)),
            "txn-rf2": sorted(f"{n}-rf2-{p}" for n in (0, 2) for p in range(2)),
        }
        for topic, values in expected.items():
            consumer = Consumer(
                {
                    "bootstrap.servers": cluster.bootstrap,
                    "group.id": f"check-{topic}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
            consumer.assign(
                [KafkaTopicPartition(topic, p, 0) for p in range(3 if topic == "txn-rf1" else 2)]
            )
            got: list[str] = []
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and len(got) < len(values):
                got += [m.value().decode() for m in consumer.consume(100, 0.5) if not m.error()]
            got += [m.value().decode() for m in consumer.consume(100, 1.0) if not m.error()]
            consumer.close()
            assert sorted(got) == values, topic
        cluster.check_replicas_identical("txn-rf2")
