"""DescribeLogDirs (issue 11 part 5) on the real broker: kafka-python's describe_log_dirs()
reads it (a third-party client, which skips oncelog's tagged fields), sizes are the bytes of
the partition's segments on disk, and `oncelog topics describe` shows each partition's size
and, for a compacted topic, a dirty ratio that drops and a LastCleaned time once the cleaner
has run (first with the cleaner off, then restarted with it on)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kafka import KafkaAdminClient

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until

pytestmark = pytest.mark.integration

OVERRIDES = {
    "transaction.state.log.num.partitions": "1",
    "offsets.topic.num.partitions": "1",
    "log.cleaner.enable": "false",
    "log.cleaner.backoff.ms": "200",
}
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": "2048",
    "min.cleanable.dirty.ratio": "0.01",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("logdirs") / "data", OVERRIDES).start()
    try:
        create_topic(proc.bootstrap, "compacted", 1, COMPACTED)
        create_topic(proc.bootstrap, "plain", 2)
        producer = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 0})
        for i in range(300):  # 10 keys, 30 values each: most of it superseded
            producer.produce("compacted", key=f"k{i % 10}", value=f"v{i}".ljust(40, "."))
            producer.produce("plain", key=f"k{i}", value=b"x" * 20, partition=i % 2)
            if i % 20 == 0:
                producer.flush(10)
        assert producer.flush(10) == 0
        yield proc
    finally:
        proc.kill()


def on_disk(data_dir: Path, partition: str) -> int:
    return sum(f.stat().st_size for f in (data_dir / partition).glob("*.log"))


def describe(broker: BrokerProcess, topic: str) -> list[dict[str, str]]:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", "topics", "describe", topic, "-b", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0 and not result.stderr, result.stderr
    rows = [line.split("\t") for line in result.stdout.splitlines() if line.startswith("\t")]
    return [dict(cell.split(": ", 1) for cell in row[1:]) for row in rows]


def test_kafka_python_describes_the_log_dirs(broker: BrokerProcess) -> None:
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        (answer,) = admin.describe_log_dirs()
        some = admin.describe_log_dirs({"plain": [1], "absent": [0]})
    finally:
        admin.close()
    (log_dir,) = answer["log_dirs"]
    assert log_dir["error_code"] == 0
    assert log_dir["log_dir"] == os.path.abspath(broker.data_dir)
    assert log_dir["total_bytes"] >= log_dir["usable_bytes"] > 0
    sizes = {
        (t["name"], p["partition_index"]): p["partition_size"]
        for t in log_dir["topics"]
        for p in t["partitions"]
    }
    assert {"compacted", "plain", "__consumer_offsets"} <= {name for name, _ in sizes}
    for partition in (0, 1):
        assert sizes["plain", partition] == on_disk(broker.data_dir, f"plain-{partition}") > 0
    assert all(
        p["offset_lag"] == 0 and p["is_future_key"] is False
        for t in log_dir["topics"]
        for p in t["partitions"]
    )
    # Only what was asked for; an unknown topic is simply absent, as in Kafka.
    (topics,) = [d["topics"] for d in some[0]["log_dirs"]]
    assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in topics] == [
        ("plain", [1])
    ]


def test_topics_describe_shows_size_dirty_ratio_and_last_clean(broker: BrokerProcess) -> None:
    (plain0, plain1) = describe(broker, "plain")
    assert plain0["Size"] == str(on_disk(broker.data_dir, "plain-0"))
    assert "DirtyRatio" not in plain0 and "LastCleaned" not in plain1

    (before,) = describe(broker, "compacted")
    assert before["Size"] == str(on_disk(broker.data_dir, "compacted-0"))
    assert before["LastCleaned"] == "-"
    assert float(before["DirtyRatio"]) > 0.5  # cleaner off: every closed segment is dirty

    started_ms = time.time() * 1000
    broker.overrides["log.cleaner.enable"] = "true"
    broker.restart()

    def cleaned() -> bool:
        return describe(broker, "compacted")[0]["LastCleaned"] != "-"

    wait_until(cleaned, 30, "the cleaner to clean the compacted topic")
    (after,) = describe(broker, "compacted")
    assert float(after["DirtyRatio"]) < float(before["DirtyRatio"])
    assert int(after["Size"]) < int(before["Size"])
    assert datetime.fromisoformat(after["LastCleaned"]).timestamp() * 1000 >= started_ms
