"""The exactly-once averages example (examples/eos_averages.py) stays exactly once through crashes.

The loop is SIGKILLed at random points and restarted, and the broker is SIGKILLed once in the
middle; afterwards the output, read with read_committed, must hold exactly one result per
input event, in order per key, with the right final averages.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "eos_averages.py"
OVERRIDES = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "100",
}
KEYS = [f"k{i}" for i in range(7)]
EVENTS = 3000


def start_loop(broker: BrokerProcess, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(EXAMPLE),
            "--bootstrap",
            broker.bootstrap,
            "--input",
            "events",
            "--output",
            "averages",
            "--group-instance-id",
            "averages-1",
            "--session-timeout-ms",
            "6000",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(log, "ab"),
    )


def read_output(broker: BrokerProcess) -> list[tuple[str, dict[str, float]]]:
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "averages-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition("averages", p, 0) for p in range(2)])
    out: list[tuple[str, dict[str, float]]] = []
    idle = time.monotonic()
    while time.monotonic() - idle < 3:
        for msg in consumer.consume(500, 0.3):
            if msg.error() is None:
                out.append((msg.key().decode(), json.loads(msg.value())))
                idle = time.monotonic()
    consumer.close()
    return out


@pytest.mark.slow
def test_averages_exactly_once_through_crashes(
    broker_factory: type[BrokerProcess], tmp_path: Path
) -> None:
    broker = broker_factory(overrides=OVERRIDES).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic("events", 3, 1), NewTopic("averages", 2, 1)]
    ).values():
        future.result(10)
    rng = random.Random(4)
    values: dict[str, list[int]] = defaultdict(list)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})

    def produce(n: int) -> None:
        for _ in range(n):
            key, value = rng.choice(KEYS), rng.randint(0, 1000)
            values[key].append(value)
            producer.produce("events", key=key, value=str(value))
        assert producer.flush(30) == 0

    log = tmp_path / "loop.log"
    loop = start_loop(broker, log)
    for round_no in range(6):
        produce(EVENTS // 6)
        time.sleep(rng.uniform(0.3, 1.5))
        loop.send_signal(signal.SIGKILL)
        loop.wait()
        if round_no == 3:
            broker.restart(kill=True)
        loop = start_loop(broker, log)
    try:
        deadline = time.monotonic() + 120
        results = read_output(broker)
        while len(results) < EVENTS and time.monotonic() < deadline:
            assert loop.poll() is None, log.read_text()[-2000:]
            time.sleep(2)
            results = read_output(broker)
    finally:
        loop.send_signal(signal.SIGKILL)
        loop.wait()
    per_key: dict[str, list[dict[str, float]]] = defaultdict(list)
    for key, result in results:
        per_key[key].append(result)
    assert set(per_key) == set(values)
    for key, inputs in values.items():
        got = per_key[key]
        assert [r["count"] for r in got] == list(range(1, len(inputs) + 1)), key
        assert got[-1]["sum"] == pytest.approx(sum(inputs))
        assert got[-1]["avg"] == pytest.approx(sum(inputs) / len(inputs))
    assert len(results) == EVENTS


def test_events_that_are_not_key_number_are_skipped(
    broker_factory: type[BrokerProcess], tmp_path: Path
) -> None:
    """What a user may have in the topic already (unkeyed lines, words) is skipped with a line
    each, not a traceback, and the numbers around it are counted once."""
    broker = broker_factory(overrides=OVERRIDES).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.create_topics(
        [NewTopic("events", 1, 1), NewTopic("averages", 2, 1)]
    ).values():
        future.result(10)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in [(None, "1"), ("a", "one"), ("a", "1"), ("b", "10"), ("a", "3")]:
        producer.produce("events", key=key, value=value)
    assert producer.flush(30) == 0
    done = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--bootstrap",
            broker.bootstrap,
            "--max-idle-s",
            "3",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.count("not key -> number") == 2, done.stderr
    last = {key: result for key, result in read_output(broker)}
    assert last == {
        "a": {"count": 2, "sum": 4.0, "avg": 2.0},
        "b": {"count": 1, "sum": 10.0, "avg": 10.0},
    }
