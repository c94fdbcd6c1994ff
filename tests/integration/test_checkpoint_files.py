"""The periodic checkpoint writes the offset checkpoint files on the real broker.

c0fcffc moved the writing of `recovery-point-offset-checkpoint` (and the log-start, cleaner
and replication files) out of the periodic checkpoint into a worker, but the server never
called it: the files stayed as the last delete, retention or shutdown left them, so a
SIGKILLed broker recovered from an ever older recovery point. With a 1 s interval, the file
follows the log end of a partition that was written to, before any shutdown.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import AdminClient

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


LOG_START_FILE = "log-start-offset-checkpoint"


def log_starts(broker: BrokerProcess) -> dict[str, int]:
    path = broker.data_dir / LOG_START_FILE
    if not path.exists():
        return {}
    return {
        f"{topic}-{partition}": int(offset)
        for topic, partition, offset in (line.split() for line in entry_lines(path.read_text()))
    }


def test_delete_records_writes_the_log_start_file_soon_and_it_survives_a_sigkill(
    broker_factory: type[BrokerProcess],
) -> None:
    """DeleteRecords answers at once and the log-start file follows in a worker, long before
    the periodic checkpoint (60 s by default); a SIGKILL after that keeps the new start."""
    broker = broker_factory(overrides={"num.partitions": "1"}).start()
    create_topic(broker.bootstrap, "cut", 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(20):
        producer.produce("cut", f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([CkTopicPartition("cut", 0, 12)]).values():
        assert future.result(30).low_watermark == 12
    wait_until(lambda: log_starts(broker).get("cut-0") == 12, 10, f"{LOG_START_FILE} at 12")
    broker.restart(kill=True)
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ends"})
    try:
        low, high = consumer.get_watermark_offsets(CkTopicPartition("cut", 0), timeout=10)
    finally:
        consumer.close()
    assert (low, high) == (12, 20)
