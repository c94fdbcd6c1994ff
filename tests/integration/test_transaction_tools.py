"""`oncelog transactions ...`: a transaction left open by a killed producer is found and
aborted, which releases the LSO so a read_committed consumer proceeds."""

from __future__ import annotations

import subprocess
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.broker_process import BrokerProcess

OVERRIDES = {
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "num.partitions": "1",
}


def oncelog(broker: BrokerProcess, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", *args, "-b", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def committed_values(broker: BrokerProcess) -> list[bytes]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "tools-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("stuck", 0, 0)])
    out: list[bytes] = []
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        out += [m.value() for m in consumer.consume(100, 0.2) if m.error() is None]
    consumer.close()
    return out


def test_find_hanging_and_abort_release_the_lso(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory(overrides=OVERRIDES).start()
    killed = f"""
import os
from confluent_kafka import Producer
p = Producer({{"bootstrap.servers": "{broker.bootstrap}", "transactional.id": "stuck-1",
              "transaction.timeout.ms": 900000}})
p.init_transactions(20)
p.begin_transaction()
p.produce("stuck", b"in-doubt")
p.flush(20)
os._exit(9)
"""
    subprocess.run([sys.executable, "-c", killed], timeout=60, check=False)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    plain.produce("stuck", b"after")
    assert plain.flush(10) == 0

    assert committed_values(broker) == []  # the open transaction pins the LSO at 0
    listing = oncelog(broker, "transactions", "list")
    assert "stuck-1\t0\tOngoing" in listing
    producers = oncelog(
        broker, "transactions", "describe-producers", "--topic", "stuck", "--partition", "0"
    )
    assert producers.splitlines()[1].split("\t")[-1] == "0"  # transaction open from offset 0

    time.sleep(1.2)
    assert (
        oncelog(
            broker, "transactions", "find-hanging", "--max-transaction-timeout-ms", "60000"
        ).count("\n")
        == 1
    )
    hanging = oncelog(
        broker, "transactions", "find-hanging", "--max-transaction-timeout-ms", "1000"
    )
    rows = hanging.splitlines()[1:]
    assert len(rows) == 1 and rows[0].startswith("stuck\t0\t")

    out = oncelog(
        broker,
        "transactions",
        "abort",
        "--topic",
        "stuck",
        "--partition",
        "0",
        "--start-offset",
        "0",
    )
    assert "Aborted" in out
    assert committed_values(broker) == [b"after"]
    assert (
        oncelog(
            broker, "transactions", "find-hanging", "--max-transaction-timeout-ms", "1000"
        ).count("\n")
        == 1
    )


def test_describe_in_every_state(broker_factory: type[BrokerProcess]) -> None:
    """Empty (start time -1 on the wire, as Kafka sends it), Ongoing with its partitions, and
    CompleteCommit (which keeps the start time, as in Kafka)."""
    broker = broker_factory(overrides=OVERRIDES).start()
    producer = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "described"})
    producer.init_transactions(20)

    def row() -> list[str]:
        out = oncelog(broker, "transactions", "describe", "--transactional-id", "described")
        header, line = out.splitlines()
        assert header.split("\t")[0] == "TransactionalId"
        return line.split("\t")

    empty = row()
    assert empty[0] == "described" and empty[3] == "Empty" and empty[5] == "-"
    producer.begin_transaction()
    producer.produce("stuck", b"x")
    assert producer.flush(10) == 0
    ongoing = row()
    assert ongoing[3] == "Ongoing" and ongoing[5].startswith("20") and ongoing[6] == "stuck-0"
    producer.commit_transaction(20)
    done = row()
    assert done[3] == "CompleteCommit" and done[5] == ongoing[5]  # Kafka keeps the start time
