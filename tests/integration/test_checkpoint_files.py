"""The periodic checkpoint writes the offset checkpoint files on the real broker.

c0fcffc moved the writing of `recovery-point-offset-checkpoint` (and the log-start, cleaner
and replication files) out of the periodic checkpoint into a worker, but the server never
called it: the files stayed as the last delete, retention or shutdown left them, so a
SIGKILLed broker recovered from an ever older recovery point. With a 1 s interval, the file
follows the log end of a partition that was written to, before any shutdown.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from oncelog.storage.checkpoint_text import entry_lines
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until

pytestmark = [pytest.mark.integration]

TOPIC = "ckfiles"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"


def recovery_points(broker: BrokerProcess) -> dict[str, int]:
    path = broker.data_dir / RECOVERY_POINT_FILE
    if not path.exists():
        return {}
    out: dict[str, int] = {}
    for line in entry_lines(path.read_text()):
        topic, partition, offset = line.split()
        out[f"{topic}-{partition}"] = int(offset)
    return out


def test_the_periodic_checkpoint_writes_the_recovery_point_file(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory(
        overrides={"log.flush.offset.checkpoint.interval.ms": "1000", "num.partitions": "1"}
    ).start()
    create_topic(broker.bootstrap, TOPIC, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(50):
        producer.produce(TOPIC, f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    wait_until(
        lambda: recovery_points(broker).get(f"{TOPIC}-0") == 50,
        15,
        f"{RECOVERY_POINT_FILE} at the log end (50) of {TOPIC}-0",
    )
    assert broker.alive()
