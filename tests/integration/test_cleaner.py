"""The log cleaner in the real broker, driven by confluent-kafka: a compacted topic with small
segments gets keys, tombstones, an idempotent producer's batches, a committed and an aborted
transaction; once the broker has cleaned it, a reader from offset 0 gets the latest committed
value of each live key (read_committed and read_uncommitted alike), no aborted record, no
tombstone past delete.retention.ms, and the idempotent producer goes on producing."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until

pytestmark = pytest.mark.integration

TOPIC = "compacted"
OVERRIDES = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "log.cleaner.backoff.ms": "200",
}
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
    "delete.retention.ms": "1500",
}

Row = tuple[int, bytes, bytes | None]


def read_all(bootstrap: str, isolation: str, quiet: float = 1.5) -> list[Row]:
    """(offset, key, value) of everything from offset 0, until nothing new for `quiet` s."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "cleaner-reader",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(TOPIC, 0, 0)])
    out: list[Row] = []
    last = time.monotonic()
    try:
        while time.monotonic() - last < quiet:
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
                continue
            key = msg.key()
            assert key is not None
            out.append((msg.offset(), key, msg.value()))
            last = time.monotonic()
    finally:
        c.close()
    return out


def table(rows: list[Row]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for _, key, value in sorted(rows):
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


class Idempotent:
    def __init__(self, bootstrap: str) -> None:
        self.errors: list[object] = []
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 0}
        )

    def send(self, key: bytes, value: bytes | None) -> None:
        self.producer.produce(TOPIC, key=key, value=value, on_delivery=self._report)
        self.producer.flush(10)  # one batch per record: many batches for the cleaner

    def _report(self, err: object, _msg: object) -> None:
        if err is not None:
            self.errors.append(err)


def test_compacted_topic_after_cleaning(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory(overrides=OVERRIDES).start()
    bootstrap = broker.bootstrap
    create_topic(bootstrap, TOPIC, 1, TOPIC_CONFIG)
    model: dict[bytes, bytes | None] = {}
    idem = Idempotent(bootstrap)
    for n in range(60):
        key, value = f"k{n % 6}".encode(), f"p-{n}-".encode() + b"x" * 40
        idem.send(key, value)
        model[key] = value
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cleaner-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(TOPIC, key=b"k1", value=b"committed-1")
    txn.produce(TOPIC, key=b"t7", value=b"committed-7")
    txn.commit_transaction(30)
    model.update({b"k1": b"committed-1", b"t7": b"committed-7"})
    txn.begin_transaction()
    txn.produce(TOPIC, key=b"k2", value=b"aborted-2")
    txn.produce(TOPIC, key=b"t8", value=b"aborted-8")
    txn.flush(10)
    txn.abort_transaction(30)
    idem.send(b"k3", None)  # a tombstone
    model[b"k3"] = None
    for n in range(40):  # fresh keys push the interesting part out of the active segment
        key, value = f"f{n}".encode(), b"f" * 100
        idem.send(key, value)
        model[key] = value
    expected = {k: v for k, v in model.items() if v is not None}

    def cleaned() -> bool:
        rows = read_all(bootstrap, "read_uncommitted", quiet=0.5)
        keys = [key for _, key, _ in rows]
        return (
            table(rows) == expected
            and len(keys) == len(set(keys))  # one record per key
            and not any(value is None for _, _, value in rows)  # the tombstone went too
        )

    wait_until(cleaned, 60, "the broker to clean the compacted topic")
    for isolation in ("read_committed", "read_uncommitted"):
        rows = read_all(bootstrap, isolation)
        assert table(rows) == expected, isolation
        assert not any(value.startswith(b"aborted") for _, _, value in rows if value)
    assert "Cleaned compacted-0" in broker.log_path.read_text()

    # The idempotent producer's old batches were cleaned away; it goes on in sequence.
    for n in range(5):
        idem.send(b"k0", f"after-{n}".encode())
    assert idem.errors == []
    assert table(read_all(bootstrap, "read_committed"))[b"k0"] == b"after-4"
    txn.begin_transaction()
    txn.produce(TOPIC, key=b"k4", value=b"committed-again")
    txn.commit_transaction(30)

    # A restart (SIGKILL) reads the cleaned log back the same.
    broker.restart(kill=True)
    rows = read_all(broker.bootstrap, "read_committed")
    assert table(rows) == {**expected, b"k0": b"after-4", b"k4": b"committed-again"}
