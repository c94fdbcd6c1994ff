"""Transactions end to end with real clients against the real broker process.

read_committed never shows aborted or open data and ListOffsets answers the LSO; fencing by
a second producer and by the transaction timeout; a broker killed between Prepare* and the
markers completes the transaction on restart; consume-transform-produce with offsets in the
transaction stays exactly-once across a SIGKILL of the copier; zombie TxnOffsetCommit.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until

pytestmark = pytest.mark.integration

OVERRIDES = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "100",
    "num.partitions": "1",
}
FENCING_ERRORS = {
    KafkaError._FENCED,
    KafkaError.PRODUCER_FENCED,
    KafkaError.INVALID_PRODUCER_EPOCH,
}


@pytest.fixture
def tbroker(broker_factory: type[BrokerProcess]) -> BrokerProcess:
    return broker_factory(overrides=OVERRIDES).start()


def tx_producer(bootstrap: str, txn_id: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "linger.ms": 5,
    }
    conf.update(extra)
    producer = Producer(conf)
    producer.init_transactions(30)
    return producer


def consumer(bootstrap: str, isolation: str, group: str = "reader") -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )


def read_values(
    bootstrap: str, topic: str, partitions: int, isolation: str, quiet: float = 1.5
) -> list[bytes]:
    """Everything a reader with `isolation` gets, until nothing new arrives for `quiet` s."""
    c = consumer(bootstrap, isolation)
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    last = time.monotonic()
    deadline = last + 30
    while time.monotonic() - last < quiet and time.monotonic() < deadline:
        for m in c.consume(500, 0.2):
            if m.error() is None:
                out.append(m.value())
                last = time.monotonic()
    c.close()
    return out


def high_offset(bootstrap: str, topic: str, isolation: str, partition: int = 0) -> int:
    """ListOffsets(latest) with `isolation`: the LSO for read_committed, else the HW."""
    c = consumer(bootstrap, isolation)
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), 10, False)[1])
    finally:
        c.close()


def error_code(exc: KafkaException) -> int:
    return int(exc.args[0].code())


# -- visibility and the LSO ------------------------------------------------------------------


def test_confluent_commit_abort_open_and_lso(tbroker: BrokerProcess) -> None:
    bs = tbroker.bootstrap
    create_topic(bs, "tx-vis", 1)
    p = tx_producer(bs, "vis-1")
    p.begin_transaction()
    p.produce("tx-vis", b"c1")
    p.produce("tx-vis", b"c2")
    p.commit_transaction(30)  # c1=0 c2=1 COMMIT=2
    p.begin_transaction()
    p.produce("tx-vis", b"a1")
    assert p.flush(30) == 0  # abort_transaction would drop it unsent
    p.abort_transaction(30)  # a1=3 ABORT=4
    opener = tx_producer(bs, "vis-2")
    opener.begin_transaction()
    opener.produce("tx-vis", b"o1")  # o1=5, open
    assert opener.flush(30) == 0

    assert read_values(bs, "tx-vis", 1, "read_committed") == [b"c1", b"c2"]
    assert read_values(bs, "tx-vis", 1, "read_uncommitted") == [b"c1", b"c2", b"a1", b"o1"]
    assert high_offset(bs, "tx-vis", "read_committed") == 5
    assert high_offset(bs, "tx-vis", "read_uncommitted") == 6

    opener.commit_transaction(30)  # COMMIT=6
    assert high_offset(bs, "tx-vis", "read_committed") == 7
    assert read_values(bs, "tx-vis", 1, "read_committed") == [b"c1", b"c2", b"o1"]


def test_aiokafka_producer_and_read_committed_consumers(tbroker: BrokerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATP
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    bs = tbroker.bootstrap
    create_topic(bs, "tx-aio", 2)

    async def produce() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-1")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(10):
                    await producer.send("tx-aio", f"c{i}".encode(), partition=i % 2)
            await producer.begin_transaction()
            for i in range(5):
                await producer.send_and_wait("tx-aio", f"a{i}".encode(), partition=i % 2)
            await producer.abort_transaction()
            async with producer.transaction():
                await producer.send("tx-aio", b"last", partition=0)
        finally:
            await producer.stop()

    async def consume() -> list[bytes]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bs, isolation_level="read_committed", enable_auto_commit=False
        )
        await c.start()
        try:
            tps = [ATP("tx-aio", 0), ATP("tx-aio", 1)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            out: list[bytes] = []
            deadline = time.monotonic() + 20
            while len(out) < 11 and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=300)
                out += [m.value for msgs in batch.values() for m in msgs if m.value]
            await asyncio.sleep(0.5)
            batch = await c.getmany(timeout_ms=300)
            out += [m.value for msgs in batch.values() for m in msgs if m.value]
            return out
        finally:
            await c.stop()

    asyncio.run(produce())
    expected = sorted([f"c{i}".encode() for i in range(10)] + [b"last"])
    assert sorted(asyncio.run(consume())) == expected

    kc = KafkaConsumer(
        bootstrap_servers=bs,
        isolation_level="read_committed",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        kc.assign([KTP("tx-aio", 0), KTP("tx-aio", 1)])
        kc.seek_to_beginning()
        assert sorted(m.value for m in kc) == expected
    finally:
        kc.close()
    assert sorted(read_values(bs, "tx-aio", 2, "read_uncommitted")) == sorted(
        expected + [f"a{i}".encode() for i in range(5)]
    )


# -- fencing ---------------------------------------------------------------------------------


def test_second_producer_fences_the_first(tbroker: BrokerProcess) -> None:
    bs = tbroker.bootstrap
    create_topic(bs, "tx-fence", 1)
    first = tx_producer(bs, "fence-1")
    first.begin_transaction()
    first.produce("tx-fence", b"zombie")
    assert first.flush(30) == 0
    second = tx_producer(bs, "fence-1")  # aborts the first's open transaction
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(30)
    assert error_code(raised.value) in FENCING_ERRORS
    del raised  # its traceback holds this frame, and with it the clients, until a GC
    second.begin_transaction()
    second.produce("tx-fence", b"live")
    second.commit_transaction(30)
    assert read_values(bs, "tx-fence", 1, "read_committed") == [b"live"]


def test_aiokafka_producer_is_fenced(tbroker: BrokerProcess) -> None:
    """aiokafka speaks v0 of the transactional APIs: it must get INVALID_PRODUCER_EPOCH."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import ProducerFenced

    bs = tbroker.bootstrap
    create_topic(bs, "tx-aio-fence", 1)

    async def run() -> None:
        first = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-fence")
        await first.start()
        second = AIOKafkaProducer(bootstrap_servers=bs, transactional_id="aio-fence")
        try:
            await first.begin_transaction()
            await first.send_and_wait("tx-aio-fence", b"zombie")
            await second.start()
            with pytest.raises(ProducerFenced):
                await first.commit_transaction()
            async with second.transaction():
                await second.send_and_wait("tx-aio-fence", b"live")
        finally:
            await first.stop()
            await second.stop()

    asyncio.run(run())
    assert read_values(bs, "tx-aio-fence", 1, "read_committed") == [b"live"]


def test_transaction_timeout_aborts_and_fences(broker_factory: type[BrokerProcess]) -> None:
    overrides = {**OVERRIDES, "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
    broker = broker_factory(overrides=overrides).start()
    bs = broker.bootstrap
    create_topic(bs, "tx-timeout", 1)
    stalled = tx_producer(bs, "timeout-1", **{"transaction.timeout.ms": 3000})
    stalled.begin_transaction()
    stalled.produce("tx-timeout", b"stalled")
    assert stalled.flush(30) == 0
    assert high_offset(bs, "tx-timeout", "read_committed") == 0
    wait_until(
        lambda: high_offset(bs, "tx-timeout", "read_committed") == 2,
        15,
        "the timed-out transaction to be aborted (data + ABORT marker)",
    )
    other = tx_producer(bs, "timeout-2")
    other.begin_transaction()
    other.produce("tx-timeout", b"after")
    other.commit_transaction(30)
    assert read_values(bs, "tx-timeout", 1, "read_committed") == [b"after"]
    with pytest.raises(KafkaException) as raised:
        stalled.commit_transaction(30)
    code = error_code(raised.value)
    assert code in FENCING_ERRORS, raised.value
    assert code != KafkaError.INVALID_TXN_STATE
    del raised  # its traceback holds this frame, and with it the clients, until a GC


# -- crash between Prepare* and the markers --------------------------------------------------


def test_broker_killed_after_prepare_completes_on_restart(
    broker_factory: type[BrokerProcess],
) -> None:
    crash = "oncelog.testing.crash.after.prepare"
    broker = broker_factory(overrides={**OVERRIDES, crash: "true"}).start()
    bs = broker.bootstrap
    create_topic(bs, "tx-crash", 2)
    p = tx_producer(bs, "crash-1", **{"message.timeout.ms": 60000})
    p.begin_transaction()
    for i in range(20):
        p.produce("tx-crash", f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    with pytest.raises(KafkaException):
        p.commit_transaction(3)  # the broker dies after persisting PrepareCommit
    assert broker.proc is not None
    assert broker.proc.wait(10) == 137
    del broker.overrides[crash]
    broker.start()
    expected = sorted(f"v{i}".encode() for i in range(20))
    assert sorted(read_values(bs, "tx-crash", 2, "read_committed")) == expected
    p.commit_transaction(30)  # the client's retry finds the transaction committed
    assert sorted(read_values(bs, "tx-crash", 2, "read_committed")) == expected
    for partition in (0, 1):
        lso = high_offset(bs, "tx-crash", "read_committed", partition)
        assert lso == high_offset(bs, "tx-crash", "read_uncommitted", partition) == 11


# -- consume-transform-produce ---------------------------------------------------------------

COPIER = """
import sys, time
from confluent_kafka import Consumer, Producer, TopicPartition
bootstrap, src, dst = sys.argv[1], sys.argv[2], sys.argv[3]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "copier",
                     "isolation.level": "read_committed", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                     "heartbeat.interval.ms": 500})
producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "copier-1",
                     "linger.ms": 5})
producer.init_transactions(30)
consumer.subscribe([src])
while True:
    msgs = [m for m in consumer.consume(10, 0.5) if m.error() is None]
    if not msgs:
        continue
    producer.begin_transaction()
    ends = {}
    for m in msgs:
        producer.produce(dst, key=m.key(), value=m.value())
        ends[m.partition()] = max(ends.get(m.partition(), 0), m.offset() + 1)
    time.sleep(0.1)
    offsets = [TopicPartition(src, p, o) for p, o in ends.items()]
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
    producer.commit_transaction(30)
    print("committed", len(msgs), flush=True)
"""


@pytest.fixture
def copier_script(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "copier.py"
    path.write_text(COPIER)
    yield path


def _committed(
    bs: str,
    topic: str,
    partitions: int,
    group: str,
    isolation: str = "read_committed",
    timeout: float = 10,
) -> list[int]:
    """The group's committed offsets; read_committed asks with require_stable, which
    librdkafka retries while offsets of an open transaction are pending."""
    c = consumer(bs, isolation, group)
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=timeout)
        return [tp.offset for tp in got]
    finally:
        c.close()


def test_copier_killed_midway_copies_exactly_once(
    tbroker: BrokerProcess, copier_script: Path
) -> None:
    bs = tbroker.bootstrap
    create_topic(bs, "ctp-in", 2)
    create_topic(bs, "ctp-out", 2)
    plain = Producer({"bootstrap.servers": bs, "linger.ms": 5})
    values = [f"m{i:04d}".encode() for i in range(300)]
    for i, v in enumerate(values):
        plain.produce("ctp-in", v, partition=i % 2)
    assert plain.flush(30) == 0

    def start() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(copier_script), bs, "ctp-in", "ctp-out"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    first = start()
    try:
        assert first.stdout is not None
        for _ in range(5):
            assert first.stdout.readline().startswith("committed")
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    second = start()
    try:
        wait_until(
            lambda: _committed(bs, "ctp-in", 2, "copier") == [150, 150],
            60,
            "the restarted copier to commit every input offset",
        )
        assert second.poll() is None
    finally:
        second.kill()
        second.wait()
    out = read_values(bs, "ctp-out", 2, "read_committed")
    assert sorted(out) == values  # every input exactly once


# -- groups ----------------------------------------------------------------------------------


def test_zombie_txn_offset_commit_with_old_generation_is_refused(tbroker: BrokerProcess) -> None:
    bs = tbroker.bootstrap
    create_topic(bs, "tx-zombie", 2)
    group = "zombie-txn"

    def member() -> Consumer:
        c = consumer(bs, "read_committed", group)
        c.subscribe(["tx-zombie"])
        return c

    a = member()
    wait_until(lambda: bool(a.poll(0.1) or a.assignment()), 20, "the first member's assignment")
    stale = a.consumer_group_metadata()
    b = member()
    wait_until(
        lambda: (
            (a.poll(0.1), b.poll(0.1)) is not None
            and len(a.assignment()) == 1
            and len(b.assignment()) == 1
        ),
        30,
        "the rebalance to the second generation",
    )
    p = tx_producer(bs, "zombie-1")
    p.begin_transaction()
    with pytest.raises(KafkaException) as raised:
        p.send_offsets_to_transaction([TopicPartition("tx-zombie", 0, 5)], stale, 30)
    assert error_code(raised.value) == KafkaError.ILLEGAL_GENERATION, raised.value
    del raised  # its traceback holds this frame, and with it the clients, until a GC
    a.close()
    b.close()
    assert _committed(bs, "tx-zombie", 2, group) == [-1001, -1001]


def test_transactional_offsets_survive_broker_sigkill(tbroker: BrokerProcess) -> None:
    """Replay at startup: a committed transaction's offsets stay committed, an open one's
    stay pending (invisible) until its COMMIT marker, which a later replay also honours."""
    bs = tbroker.bootstrap
    create_topic(bs, "tx-offs", 1)
    group = "offs-group"
    outsider = consumer(bs, "read_uncommitted", group)  # never joins: generation -1
    cgm = outsider.consumer_group_metadata()
    outsider.close()
    p = tx_producer(bs, "offs-1")
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("tx-offs", 0, 5)], cgm, 30)
    p.commit_transaction(30)
    assert _committed(bs, "tx-offs", 1, group) == [5]
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition("tx-offs", 0, 9)], cgm, 30)
    tbroker.restart(kill=True)
    assert _committed(bs, "tx-offs", 1, group, "read_uncommitted") == [5]
    with pytest.raises(KafkaException):  # require_stable: UNSTABLE_OFFSET_COMMIT until decided
        _committed(bs, "tx-offs", 1, group, timeout=2)
    p.commit_transaction(30)
    assert _committed(bs, "tx-offs", 1, group) == [9]
    tbroker.restart(kill=True)
    assert _committed(bs, "tx-offs", 1, group) == [9]
