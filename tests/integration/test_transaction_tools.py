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


#: `oncelog transactions abort` of partition stuck-0; the start offset follows.
ABORT_STUCK_0 = ("transactions", "abort", "--topic", "stuck", "--partition", "0", "--start-offset")


def run(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", *args, "-b", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def oncelog(broker: BrokerProcess, *args: str) -> str:
    result = run(broker, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def rows(out: str) -> list[list[str]]:
    """The data rows of an aligned table (Kafka's layout), split into cells."""
    return [line.split() for line in out.splitlines()[1:]]


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
    assert listing.split()[:4] == [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ]
    assert ["stuck-1", "1", "0", "Ongoing"] in rows(listing)
    producers = oncelog(
        broker, "transactions", "describe-producers", "--topic", "stuck", "--partition", "0"
    )
    assert producers.split()[5] == "CurrentTransactionStartOffset"
    assert rows(producers)[0][-1] == "0"  # transaction open from offset 0

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
    found = rows(hanging)
    assert len(found) == 1 and found[0][:2] == ["stuck", "0"] and found[0][5] == "0"
    assert hanging.split()[6:8] == ["LastTimestamp", "Duration"]
    assert found[0][6].startswith("20") and found[0][6].endswith("Z")  # ISO-8601 UTC
    assert found[0][7].endswith("s")  # about 1.2 s: "1.3s"

    wrong = run(broker, *ABORT_STUCK_0, "5")
    assert wrong.returncode == 1
    assert wrong.stderr.strip() == (
        "Error: no open transaction on stuck-0 starts at offset 5; open: producer 0 at offset 0"
    )

    out = oncelog(broker, *ABORT_STUCK_0, "0")
    assert out.strip() == (
        "Aborted the transaction of producer 0 (epoch 0) open on stuck-0 since offset 0."
    )
    none_left = run(broker, *ABORT_STUCK_0, "0")
    assert none_left.returncode == 1
    assert none_left.stderr.strip() == "Error: no open transaction on stuck-0"
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
        assert header.split() == [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTime",
            "TransactionDuration",
            "TopicPartitions",
        ]
        return line.split()

    empty = row()
    assert empty[:2] == ["1", "described"] and empty[4] == "Empty"
    assert empty[6:] == ["-", "-", "-"]
    producer.begin_transaction()
    producer.produce("stuck", b"x")
    assert producer.flush(10) == 0
    ongoing = row()
    assert ongoing[4] == "Ongoing" and ongoing[6].startswith("20") and ongoing[8] == "stuck-0"
    assert ongoing[7].endswith("s")  # the duration so far, such as "35ms"
    producer.commit_transaction(20)
    done = row()
    assert done[4] == "CompleteCommit" and done[6] == ongoing[6]  # Kafka keeps the start time
