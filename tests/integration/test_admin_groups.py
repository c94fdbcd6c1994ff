"""Group admin with real clients: OffsetDelete (kafka-python), OffsetFetch v8+ (librdkafka's
list_consumer_group_offsets and a raw batched request), DescribeGroups v6, and the
`oncelog groups reset-offsets | delete` commands on stopped and active groups."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient
from kafka.admin import KafkaAdminClient
from kafka.errors import GroupSubscribedToTopicError, NoError
from kafka.structs import TopicPartition as KpTopicPartition

from oncelog.client.admin import Admin
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until

TIMEOUT = 20
T0 = 1_700_000_000_000
OVERRIDES = {"group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}


@pytest.fixture
def gbroker(broker_factory: type[BrokerProcess]) -> BrokerProcess:
    return broker_factory(overrides=OVERRIDES).start()


@pytest.fixture
def admin(gbroker: BrokerProcess) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": gbroker.bootstrap})


def produce(bootstrap: str, topic: str, count: int, partition: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=partition, timestamp=T0 + 1000 * i)
    assert producer.flush(TIMEOUT) == 0


def consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )


def consume(c: Consumer, count: int) -> list[tuple[str, int, int]]:
    got: list[tuple[str, int, int]] = []
    deadline = time.monotonic() + TIMEOUT
    while len(got) < count and time.monotonic() < deadline:
        msg = c.poll(0.5)
        if msg is None or msg.error():
            continue
        got.append((msg.topic(), msg.partition(), msg.offset()))
    return got


def committed(admin: AdminClient, group: str) -> dict[tuple[str, int], int]:
    listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = listed[group].result(TIMEOUT)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def group_state(admin: AdminClient, group: str) -> str:
    try:
        description = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    except KafkaException as exc:
        return str(exc.args[0].name())
    return str(description.state.name)


def oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oncelog", *args],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def check_batched_offset_fetch(bootstrap: str, group: str) -> None:
    """OffsetFetch v8 (two groups in one request, one unknown) and v10 (topic ids)."""
    with Admin(bootstrap) as raw:
        body = {
            "groups": [
                {"group_id": group, "member_id": None, "member_epoch": -1, "topics": None},
                {
                    "group_id": "nobody",
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": "od-a", "partition_indexes": [0]}],
                },
            ],
            "require_stable": True,
        }
        response = raw.coordinator(group, 0).call(ApiKey.OFFSET_FETCH, (8, 8), body)
        [mine] = [g for g in response.groups if g.group_id == group]
        assert mine.error_code == ErrorCode.none
        assert [(t.name, [(p.partition_index, p.committed_offset) for p in t.partitions])
                for t in mine.topics] == [("od-a", [(0, 3)])]  # fmt: skip
        if raw.coordinator_id("nobody", 0) == raw.coordinator_id(group, 0):
            [other] = [g for g in response.groups if g.group_id == "nobody"]
            assert other.topics[0].partitions[0].committed_offset == -1

        # v10 names topics by id, both ways; an unknown id answers UNKNOWN_TOPIC_ID.
        [od_a] = [t for t in raw.refresh_metadata(["od-a"]).topics if t.name == "od-a"]
        stranger = uuid.uuid4()
        body = {
            "groups": [
                {
                    "group_id": group,
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [
                        {"topic_id": od_a.topic_id, "partition_indexes": [0, 1]},
                        {"topic_id": stranger, "partition_indexes": [0]},
                    ],
                }
            ],
            "require_stable": False,
        }
        response = raw.coordinator(group, 0).call(ApiKey.OFFSET_FETCH, (10, 10), body)
        answers = {
            (t.topic_id, p.partition_index): (p.committed_offset, p.error_code)
            for t in response.groups[0].topics
            for p in t.partitions
        }
        assert answers == {
            (od_a.topic_id, 0): (3, ErrorCode.none),
            (od_a.topic_id, 1): (-1, ErrorCode.none),
            (stranger, 0): (-1, ErrorCode.unknown_topic_id),
        }


def test_offset_delete_fetch_and_describe_with_real_clients(
    gbroker: BrokerProcess, admin: AdminClient
) -> None:
    create_topic(gbroker.bootstrap, "od-a", 2)
    create_topic(gbroker.bootstrap, "od-b", 1)
    produce(gbroker.bootstrap, "od-a", 3)
    group = "od-group"
    c = consumer(gbroker.bootstrap, group)
    try:
        c.subscribe(["od-a"])
        assert len(consume(c, 3)) == 3
        c.commit(asynchronous=False)
        # The member commits a topic it does not subscribe to as well.
        c.commit(offsets=[KafkaTopicPartition("od-b", 0, 0)], asynchronous=False)
        assert committed(admin, group) == {("od-a", 0): 3, ("od-b", 0): 0}
        description = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
        assert description.state.name == "STABLE"
        assert len(description.members) == 1

        kp = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap)
        try:
            result = kp.delete_group_offsets(
                group, [KpTopicPartition("od-a", 0), KpTopicPartition("od-b", 0)]
            )
            assert result[KpTopicPartition("od-a", 0)] is GroupSubscribedToTopicError
            assert result[KpTopicPartition("od-b", 0)] is NoError
        finally:
            kp.close()
        assert committed(admin, group) == {("od-a", 0): 3}
    finally:
        c.close()
    wait_until(lambda: group_state(admin, group) == "EMPTY", TIMEOUT, "the group to empty")

    check_batched_offset_fetch(gbroker.bootstrap, group)

    # Empty now: every offset may go, and the group with them (DescribeGroups v6 then
    # answers GROUP_ID_NOT_FOUND, which librdkafka reports).
    kp = KafkaAdminClient(bootstrap_servers=gbroker.bootstrap)
    try:
        result = kp.delete_group_offsets(group, [KpTopicPartition("od-a", 0)])
        assert result[KpTopicPartition("od-a", 0)] is NoError
    finally:
        kp.close()
    assert committed(admin, group) == {}
    assert group_state(admin, group) in ("GROUP_ID_NOT_FOUND", "DEAD")


def test_reset_offsets_on_a_stopped_group_and_refused_on_an_active_one(
    gbroker: BrokerProcess, admin: AdminClient
) -> None:
    topic, group = "reset-me", "reset-group"
    create_topic(gbroker.bootstrap, topic, 1)
    produce(gbroker.bootstrap, topic, 10)
    c = consumer(gbroker.bootstrap, group)
    c.subscribe([topic])
    assert len(consume(c, 10)) == 10
    c.commit(asynchronous=False)
    c.close()
    assert committed(admin, group) == {(topic, 0): 10}
    base = ["groups", "reset-offsets", "-b", gbroker.bootstrap, "--group", group]

    # Dry run (the default): the plan is printed, nothing changes.
    done = oncelog(*base, "--topic", topic, "--to-earliest")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "NEW-OFFSET",
        group,
        topic,
        "0",
        "0",
    ]
    assert "--execute option is missing" in done.stderr
    assert committed(admin, group) == {(topic, 0): 10}

    done = oncelog(*base, "--topic", f"{topic}:0", "--to-offset", "4", "--execute")
    assert done.returncode == 0, done.stderr
    assert committed(admin, group) == {(topic, 0): 4}

    # Clamped to the log's bounds, as Kafka's tool does.
    done = oncelog(*base, "--all-topics", "--shift-by", "-100", "--execute")
    assert done.returncode == 0, done.stderr
    assert "Value will be set to 0" in done.stderr
    assert committed(admin, group) == {(topic, 0): 0}
    done = oncelog(*base, "--topic", topic, "--to-latest", "--dry-run")
    assert done.stdout.split()[-1] == "10" and done.stderr == ""
    done = oncelog(*base, "--topic", f"{topic}:0,5", "--to-latest")
    assert (done.returncode, done.stderr) == (
        1,
        f"Error: UNKNOWN_TOPIC_OR_PARTITION (3): Topic '{topic}' has no partition 5.\n",
    )
    done = oncelog(*base, "--topic", topic, "--to-offset", "1000", "--dry-run")
    assert done.stdout.split()[-1] == "10"
    assert "is higher than latest offset" in done.stderr
    # The first record at or after the time (record i has timestamp T0 + 1000 i).
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime((T0 + 6500) // 1000)) + ".500Z"
    done = oncelog(*base, "--topic", topic, "--to-datetime", when, "--execute")
    assert done.returncode == 0, done.stderr
    assert committed(admin, group) == {(topic, 0): 7}

    # A consumer of the group starts where the reset put it.
    c = consumer(gbroker.bootstrap, group)
    try:
        c.subscribe([topic])
        assert [o for _, _, o in consume(c, 3)] == [7, 8, 9]
        assert group_state(admin, group) == "STABLE"
        refused = oncelog(*base, "--topic", topic, "--to-earliest", "--execute")
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            f"Error: Assignments can only be reset if the group '{group}' is inactive, "
            "but the current state is Stable."
        )
    finally:
        c.close()
    assert committed(admin, group) == {(topic, 0): 7}


def test_reset_offsets_usage_and_one_line_errors(gbroker: BrokerProcess) -> None:
    topic = "reset-usage"
    create_topic(gbroker.bootstrap, topic, 1)
    base = ["groups", "reset-offsets", "-b", gbroker.bootstrap, "--group", "usage-group"]
    usage = oncelog(*base, "--topic", topic)
    assert usage.returncode == 2
    usage = oncelog(*base, "--topic", topic, "--to-datetime", "yesterday")
    assert usage.returncode == 2 and usage.stderr.startswith("Error: --to-datetime")
    missing = oncelog(*base, "--topic", "no-such-topic", "--to-earliest")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "Error: UNKNOWN_TOPIC_OR_PARTITION (3): Topic 'no-such-topic' does not exist."
    )


def test_groups_delete_and_delete_offsets(gbroker: BrokerProcess, admin: AdminClient) -> None:
    topic, group = "del-topic", "del-group"
    create_topic(gbroker.bootstrap, topic, 2)
    produce(gbroker.bootstrap, topic, 2, partition=0)
    produce(gbroker.bootstrap, topic, 2, partition=1)
    c = consumer(gbroker.bootstrap, group)
    base = ["groups", "delete", "-b", gbroker.bootstrap, "--group", group]
    try:
        c.subscribe([topic])
        assert len(consume(c, 4)) == 4
        c.commit(asynchronous=False)
        refused = oncelog(*base)
        assert refused.returncode == 1
        assert refused.stderr.startswith(f"Error: Deletion of consumer group '{group}' failed: ")
        assert "NON_EMPTY_GROUP" in refused.stderr
        refused = oncelog(*base, "--delete-offsets", "--topic", topic)
        assert refused.returncode == 1
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in refused.stdout
    finally:
        c.close()
    wait_until(lambda: group_state(admin, group) == "EMPTY", TIMEOUT, "the group to empty")

    done = oncelog(*base, "--delete-offsets", "--topic", f"{topic}:1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["TOPIC", "PARTITION", "STATUS", topic, "1", "Successful"]
    assert committed(admin, group) == {(topic, 0): 2}

    done = oncelog(*base)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"Deletion of requested consumer groups ('{group}') was successful.\n"
    assert committed(admin, group) == {}
    gone = oncelog(*base)
    assert gone.returncode == 1 and "GROUP_ID_NOT_FOUND" in gone.stderr
