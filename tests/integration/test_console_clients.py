"""`oncelog consume` and `oncelog produce` as Kafka's console tools: `--group` subscribes and
commits what was printed, `--partition` / `--offset` read without a group, and a refused
message is one `Error:` line naming the broker's error code. One real broker, the real CLI."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.broker_process import BrokerProcess
from tests.integration.helpers import run_tool

OVERRIDES = {
    "auto.create.topics.enable": "false",
    "offsets.topic.num.partitions": "2",
    "transaction.state.log.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("console-clients") / "data", OVERRIDES).start()
    try:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        topics = [
            NewTopic("ten", 2, 1),
            NewTopic("assigned", 2, 1),
            NewTopic("strict", 1, 1, config={"min.insync.replicas": "2"}),
            NewTopic("compacted", 1, 1, config={"cleanup.policy": "compact"}),
        ]
        for future in admin.create_topics(topics).values():
            future.result(10)
        producer = Producer({"bootstrap.servers": proc.bootstrap})
        for i in range(10):
            producer.produce("ten", value=b"m%d" % i, partition=i % 2)
            producer.produce("assigned", value=b"a%d" % i, partition=0)
        assert producer.flush(10) == 0
        yield proc
    finally:
        proc.kill()


def run(
    broker: BrokerProcess, *args: str, stdin: str = "", timeout: float = 60
) -> tuple[int, str, str]:
    return run_tool(broker.bootstrap, *args, stdin=stdin, timeout=timeout)


def committed(broker: BrokerProcess, group: str) -> dict[str, str]:
    """`groups describe`'s CURRENT-OFFSET by partition."""
    code, out, err = run(broker, "groups", "describe", group)
    assert code == 0, err
    rows = [line.split() for line in out.splitlines()[1:] if line.strip()]
    return {row[2]: row[3] for row in rows}


def test_a_group_commits_what_was_printed_and_the_next_run_continues(
    broker: BrokerProcess,
) -> None:
    consume = ("consume", "ten", "--group", "g", "--from-beginning", "--timeout-ms", "3000")
    code, out, err = run(broker, *consume, "--max-messages", "5")
    assert code == 0, err
    first = out.split()
    assert len(first) == 5
    offsets = committed(broker, "g")  # an Empty group: the partitions it committed
    assert set(offsets) <= {"0", "1"}
    assert sum(int(o) for o in offsets.values() if o != "-") == 5
    code, out, _ = run(broker, "groups", "list")
    assert ["g", "Empty"] in [line.split() for line in out.splitlines()]

    code, out, err = run(broker, *consume)
    assert code == 0, err
    second = out.split()
    assert sorted(first + second) == sorted(f"m{i}" for i in range(10))  # nothing twice
    assert committed(broker, "g") == {"0": "5", "1": "5"}

    # --from-beginning only applies to a group without committed offsets, as in Kafka.
    code, out, err = run(broker, *consume)
    assert code == 0 and out == "", err


def test_group_id_property_is_the_group(broker: BrokerProcess) -> None:
    code, out, err = run(
        broker, "consume", "ten", "--property", "group.id=by-property", "--from-beginning",
        "--timeout-ms", "5000", "--max-messages", "3",
    )  # fmt: skip
    assert code == 0 and len(out.split()) == 3, err
    assert sum(int(o) for o in committed(broker, "by-property").values() if o != "-") == 3


def test_without_a_group_nothing_is_committed(broker: BrokerProcess) -> None:
    code, out, err = run(broker, "consume", "ten", "--from-beginning", "--timeout-ms", "5000")
    assert code == 0, err
    assert sorted(out.split()) == sorted(f"m{i}" for i in range(10))
    code, out, _ = run(broker, "groups", "list")
    (group,) = [w for w in out.split() if w.startswith("console-consumer-")]  # Kafka's name
    assert committed(broker, group) == {}


def test_partition_and_offset_read_without_a_group(broker: BrokerProcess) -> None:
    groups_before = run(broker, "groups", "list")[1]
    base = ("consume", "assigned", "--partition", "0", "--timeout-ms", "1500", "--print-offset")
    code, out, err = run(broker, *base, "--offset", "7")
    assert code == 0, err
    assert out.splitlines() == ["0:7\ta7", "0:8\ta8", "0:9\ta9"]
    code, out, _ = run(broker, *base, "--offset", "earliest", "--max-messages", "2")
    assert out.splitlines() == ["0:0\ta0", "0:1\ta1"]
    code, out, _ = run(broker, *base, "--from-beginning", "--max-messages", "1")
    assert out.splitlines() == ["0:0\ta0"]
    code, out, _ = run(broker, *base, "--offset", "latest")
    assert code == 0 and out == ""
    assert run(broker, "groups", "list")[1] == groups_before  # no group joined


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--group", "g", "--partition", "0"),
            "Options group and partition cannot be specified together.",
        ),
        (("--offset", "3"), "The partition is required when offset is specified."),
        (
            ("--partition", "0", "--offset", "3", "--from-beginning"),
            "Options from-beginning and offset cannot be specified together.",
        ),
        (
            ("--partition", "0", "--offset", "-4"),
            "The provided offset value '-4' is incorrect. Valid values are 'earliest', "
            "'latest', or a non-negative long.",
        ),
        (
            ("--group", "a", "--property", "group.id=b"),
            "The group ids provided in different places (directly using '--group', or via "
            "'--property') do not match. Detected group ids: 'a', 'b'",
        ),
    ],
)
def test_consume_usage_errors_in_kafkas_words(
    broker: BrokerProcess, args: tuple[str, ...], message: str
) -> None:
    code, out, err = run(broker, "consume", "ten", *args, "--timeout-ms", "100")
    assert (code, out, err) == (2, "", f"Error: {message}\n")


def test_consume_of_a_missing_topic_names_the_code(broker: BrokerProcess) -> None:
    code, _, err = run(broker, "consume", "nosuch", "--timeout-ms", "100")
    assert (code, err) == (
        1,
        "Error: UNKNOWN_TOPIC_OR_PARTITION (3): Topic 'nosuch' does not exist.\n",
    )


def test_produce_names_the_brokers_error_at_once(broker: BrokerProcess) -> None:
    """min.insync.replicas=2 on one broker: NOT_ENOUGH_REPLICAS after Kafka's 3 retries, not
    a 30 s wait for a timeout, and no librdkafka log line."""
    started = time.monotonic()
    code, _, err = run(broker, "produce", "strict", stdin="x\n")
    assert time.monotonic() - started < 15
    assert code == 1
    assert err.startswith("Error: NOT_ENOUGH_REPLICAS (19): ")
    assert len(err.splitlines()) == 1, err


def test_produce_without_a_key_to_a_compacted_topic_says_why_once(broker: BrokerProcess) -> None:
    code, _, err = run(broker, "produce", "compacted", stdin="a\nb\nc\n")
    assert code == 1
    assert err == (
        "Error: INVALID_RECORD (87): Compacted topic cannot accept message without key in "
        "topic partition compacted-0 (3 messages)\n"
    )
    code, _, err = run(broker, "produce", "compacted", "--key-separator", ":", stdin="k:v\n")
    assert (code, err) == (0, "")


def test_tool_errors_name_kafkas_code(broker: BrokerProcess, tmp_path: Path) -> None:
    """A missing topic, partition or group, or a refused config: `NAME (code): message`."""
    missing = "UNKNOWN_TOPIC_OR_PARTITION (3)"
    cases = [
        (("topics", "describe", "nosuch"), f"{missing}: Topic 'nosuch' does not exist."),
        (
            ("transactions", "describe-producers", "--topic", "nosuch", "--partition", "0"),
            f"{missing}: Partition nosuch-0 does not exist.",
        ),
        (
            ("transactions", "find-hanging", "--topic", "nosuch"),
            f"{missing}: Topic 'nosuch' does not exist.",
        ),
        (
            ("cluster", "elect-leaders", "--election-type", "preferred", "--topic", "nosuch"),
            f"{missing}: Topic 'nosuch' does not exist.",
        ),
        (
            ("groups", "describe", "nosuch-group"),
            "GROUP_ID_NOT_FOUND (69): Consumer group 'nosuch-group' does not exist.",
        ),
        (
            ("configs", "--alter", "--entity-type", "topics", "--entity-name", "ten",
             "--add-config", "min.insync.replicas=0"),
            "INVALID_CONFIG (40): cannot alter 'ten': Invalid value 0 for configuration "
            "min.insync.replicas: Value must be at least 1",
        ),
        (
            ("configs", "--alter", "--entity-type", "topics", "--entity-name", "nosuch",
             "--add-config", "retention.ms=1"),
            f"{missing}: cannot alter 'nosuch'",
        ),
    ]  # fmt: skip
    moves = tmp_path / "topics.json"
    moves.write_text('{"topics": [{"topic": "nosuch"}], "version": 1}')
    generate = ("reassign-partitions", "--generate", "--topics-to-move-json-file", str(moves))
    cases.append(((*generate, "--broker-list", "1"), f"{missing}: Topic(s) not found: nosuch"))
    for args, message in cases:
        code, _, err = run(broker, *args)
        assert code == 1, (args, err)
        assert err.splitlines()[-1].startswith(f"Error: {message}"), (args, err)
        assert len([line for line in err.splitlines() if line.startswith("Error:")]) == 1, err
