"""The console tools say what they mean (issue 10 E): Kafka's columns, errors by name, one-line
errors and no tracebacks, Unix manners on a closed pipe. The real broker, the real CLI."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration.helpers import run_tool

OVERRIDES = {
    "auto.create.topics.enable": "false",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("console") / "data", OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        topics = [
            NewTopic("plain", 2, 1),
            NewTopic("grouped", 2, 1),
            NewTopic(
                "tuned", 1, 1, config={"cleanup.policy": "compact", "segment.bytes": "1048576"}
            ),
        ]
        for future in admin.create_topics(topics).values():
            future.result(10)
        yield proc
    finally:
        proc.kill()


def run(
    broker: BrokerProcess, *args: str, stdin: str = "", timeout: float = 60
) -> tuple[int, str, str]:
    return run_tool(broker.bootstrap, *args, stdin=stdin, timeout=timeout)


def table(out: str) -> list[list[str]]:
    """The rows of an aligned table, header first, split into cells."""
    return [line.split() for line in out.splitlines() if line.strip()]


def test_topics_list_includes_internal_topics_unless_excluded(broker: BrokerProcess) -> None:
    code, out, _ = run(broker, "topics", "list")
    assert code == 0
    assert "__consumer_offsets" in out.split() and "plain" in out.split()
    code, out, _ = run(broker, "topics", "list", "--exclude-internal")
    assert code == 0 and out.split() == ["grouped", "plain", "tuned"]


def test_topics_describe_has_id_replication_factor_and_configs(broker: BrokerProcess) -> None:
    code, out, _ = run(broker, "topics", "describe", "tuned", "plain")
    assert code == 0
    lines = out.splitlines()
    head = dict(cell.split(": ", 1) for cell in lines[0].split("\t"))
    assert head["Topic"] == "tuned" and head["PartitionCount"] == "1"
    assert head["ReplicationFactor"] == "1"
    assert len(head["TopicId"]) == 22 and "+" not in head["TopicId"]  # Kafka's base64url
    assert set(head["Configs"].split(",")) == {"cleanup.policy=compact", "segment.bytes=1048576"}
    assert lines[1].split("\t") == [
        "",
        "Topic: tuned",
        "Partition: 0",
        "Leader: 1",
        "Replicas: 1",
        "Isr: 1",
        f"Size: {(broker.data_dir / 'tuned-0' / ('0' * 20 + '.log')).stat().st_size}",
        "DirtyRatio: 0.00",
        "LastCleaned: -",
    ]
    assert lines[2].startswith("Topic: plain\t") and "PartitionCount: 2" in lines[2]

    code, _, err = run(broker, "topics", "describe", "absent")
    assert code == 1
    assert err.strip() == "Error: UNKNOWN_TOPIC_OR_PARTITION (3): Topic 'absent' does not exist."


def test_groups_describe_like_kafka_consumer_groups(broker: BrokerProcess) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        producer.produce("grouped", value=b"v%d" % i, partition=0)
    assert producer.flush(10) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "lagging",
            "client.id": "lag-client",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe(["grouped"])
        deadline = time.monotonic() + 30
        while len(consumer.assignment()) < 2 and time.monotonic() < deadline:
            consumer.poll(0.2)
        assert len(consumer.assignment()) == 2
        consumer.commit(offsets=[TopicPartition("grouped", 0, 1)], asynchronous=False)

        code, out, _ = run(broker, "groups", "describe", "lagging")
        assert code == 0
        header, *rows = table(out)
        assert header == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        by_partition = {row[2]: row for row in rows}
        assert by_partition["0"][:6] == ["lagging", "grouped", "0", "1", "3", "2"]
        assert by_partition["1"][:6] == ["lagging", "grouped", "1", "-", "0", "-"]
        for row in rows:
            assert row[6].startswith("lag-client-") and row[7] == "/127.0.0.1"
            assert row[8] == "lag-client"

        code, out, _ = run(broker, "groups", "list")
        assert code == 0
        assert ["lagging", "Stable"] in table(out)  # Kafka's state names
    finally:
        consumer.close()

    code, out, err = run(broker, "groups", "describe", "no-such-group")
    assert code != 0 and out == ""
    assert err.strip() == (
        "Error: GROUP_ID_NOT_FOUND (69): Consumer group 'no-such-group' does not exist."
    )


def test_transactions_describe_names_the_error(broker: BrokerProcess) -> None:
    code, _, err = run(broker, "transactions", "describe", "--transactional-id", "unknown-id")
    assert code == 1
    assert err.strip() == (
        "Error: cannot describe transactional id 'unknown-id': TRANSACTIONAL_ID_NOT_FOUND (105)"
    )


def test_consume_into_a_closed_pipe_exits_quietly(broker: BrokerProcess, tmp_path: Path) -> None:
    """`oncelog consume ... | head -1`: the reader is gone before the first message."""
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        producer.produce("plain", value=b"m%d" % i, partition=0)
    assert producer.flush(10) == 0
    errors = tmp_path / "stderr"
    with errors.open("w") as err:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "oncelog",
                "consume",
                "plain",
                "--from-beginning",
                "--timeout-ms",
                "3000",
                "-b",
                broker.bootstrap,
            ],
            stdout=subprocess.PIPE,
            stderr=err,
        )
        assert proc.stdout is not None
        proc.stdout.close()  # like `head` after its line: nobody reads any more
        code = proc.wait(60)
    assert errors.read_text() == ""
    assert code == 141  # as a Unix tool killed by SIGPIPE


def test_consume_with_an_empty_group_id_is_a_usage_error(broker: BrokerProcess) -> None:
    code, out, err = run(
        broker, "consume", "plain", "--property", "group.id=", "--timeout-ms", "100"
    )
    assert code == 2 and out == ""
    assert err.strip() == "Error: group.id must not be empty"


def test_produce_to_a_missing_topic_fails_fast_by_name(broker: BrokerProcess) -> None:
    started = time.monotonic()
    code, _, err = run(broker, "produce", "never-created", stdin="x\n", timeout=30)
    assert code == 1
    assert time.monotonic() - started < 20
    assert "UNKNOWN_TOPIC_OR_PART" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(broker, "produce", "plain", "--partition", "7", stdin="x\n")
    assert code == 1 and "has no partition 7" in err
