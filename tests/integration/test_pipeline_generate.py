"""`oncelog pipeline generate --skip-existing`: a run repeated after a kill completes its input
and never writes an event twice (what `scripts/run-pipeline` relies on; no Spark needed).
"""

from __future__ import annotations

from collections import Counter

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from oncelog.cli.main import main
from oncelog.cli.pipeline import INDEX_HEADER, event_of
from tests.broker_process import BrokerProcess

TOPIC = "events"


def generate(broker: BrokerProcess, first: int, count: int, *extra: str) -> None:
    args = ["pipeline", "generate", "--bootstrap-server", broker.bootstrap, "--topic", TOPIC,
            "--first", str(first), "--count", str(count), "--start-ms", "1700000000000",
            *extra]  # fmt: skip
    assert main(args) == 0


def committed_indices(broker: BrokerProcess) -> Counter[int]:
    """How often each event index is in the topic, read_committed; checks each event's data."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "test-generate",
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    partitions = consumer.list_topics(TOPIC, timeout=10).topics[TOPIC].partitions
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in partitions])
    pending, seen = set(partitions), Counter[int]()
    while pending:
        msg = consumer.poll(10)
        assert msg is not None, f"partitions {pending} did not reach their end"
        if msg.error():
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            pending.discard(msg.partition())
            continue
        headers = dict(msg.headers() or [])
        i = int(headers[INDEX_HEADER])
        key, value = event_of(i, 5)
        assert (msg.key(), msg.value()) == (key.encode(), value.encode())
        seen[i] += 1
    consumer.close()
    return seen


def test_a_repeated_run_completes_an_interrupted_one(broker: BrokerProcess) -> None:
    generate(broker, 0, 40)  # a run killed after writing 40 of its 100 events
    generate(broker, 0, 100, "--skip-existing")
    generate(broker, 0, 100, "--skip-existing")  # killed after generating, before recording it
    generate(broker, 100, 50, "--skip-existing")
    assert committed_indices(broker) == Counter(range(150))


def test_transactional_run_after_a_killed_one(broker: BrokerProcess) -> None:
    generate(broker, 0, 30, "--transactional")
    # A generator killed inside a transaction: its events are in the log, not committed.
    killed = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": "oncelog-pipeline-generate"}
    )
    killed.init_transactions(30)
    killed.begin_transaction()
    for i in range(30, 45):
        key, value = event_of(i, 5)
        killed.produce(TOPIC, key=key, value=value, headers=[(INDEX_HEADER, str(i).encode())])
    assert killed.flush(30) == 0
    generate(broker, 0, 60, "--transactional", "--skip-existing")
    assert committed_indices(broker) == Counter(range(60))
