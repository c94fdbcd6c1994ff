"""Partition reassignment on a real cluster (three brokers, etcd): kafka-python's
AlterPartitionReassignments moves a partition while an idempotent acks=all producer writes
to it, nothing acknowledged is lost or duplicated, the new replicas hold the same batches
and the old one deletes its log; a move that cannot finish is listed and cancelled; the
`oncelog reassign-partitions` tool drives the same with Kafka's files and messages."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from kafka import TopicPartition as KTP
from kafka.admin import KafkaAdminClient
from kafka.errors import (
    InvalidReplicationAssignmentError,
    NoReassignmentInProgressError,
    UnknownTopicOrPartitionError,
)

from oncelog.coordinator.group.records import partition_for
from tests.broker_process import BrokerProcess
from tests.cluster_process import Cluster
from tests.integration.test_cluster_faults import Sent, Stream, producer, read_values, send

ONCELOG = [sys.executable, "-m", "oncelog"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # Broker 3 keeps its registration through a pause of several seconds (its lease is
    # long), so a move onto it is accepted and then waits.
    with Cluster(
        tmp_path_factory.mktemp("reassign"),
        overrides={"auto.leader.rebalance.enable": "false"},
        broker_overrides={3: {"broker.session.timeout.ms": "30000"}},
    ) as c:
        yield c


def admin(cluster: Cluster) -> KafkaAdminClient:
    """kafka-python's admin client, which has found the controller already (it asks any
    broker, maybe one a test pauses next)."""
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    client.list_partition_reassignments()
    return client


def moved(cluster: Cluster, topic: str, replicas: list[int]) -> bool:
    """Every running broker's Metadata shows `replicas` (in order) and a full ISR of them."""
    for node in [n for n, b in cluster.brokers.items() if b.alive()]:
        parts = cluster.partitions(topic, via=[node])
        leader, shown, isr = parts.get(0, (-1, [], []))
        if shown != replicas or sorted(isr) != sorted(replicas) or leader not in replicas:
            return False
    return True


def has_log(cluster: Cluster, node: int, topic: str) -> bool:
    return (cluster.brokers[node].data_dir / f"{topic}-0").exists()


def controller(cluster: Cluster) -> int:
    return int(cluster.admin().list_topics(timeout=10).controller_id)


def controller_not_3(cluster: Cluster) -> int:
    """The controller, moved off broker 3 first if needed: tests pause broker 3, and the
    admin requests go to the controller."""
    if controller(cluster) == 3:
        cluster.brokers[3].restart()  # a clean stop hands the controller over at once
        cluster.wait_for(lambda: controller(cluster) in (1, 2), 30, "a controller other than 3")
        cluster.wait_brokers_known()
    return controller(cluster)


def test_a_partition_moves_while_a_producer_writes_and_loses_nothing(cluster: Cluster) -> None:
    topic = "moving"
    cluster.create_topic(topic, assignment=[[1, 2]])
    # Enough already there that broker 3 needs many fetches to catch up.
    earlier = Sent()
    send(producer(cluster.bootstrap, linger_ms=20), topic, range(10**6, 10**6 + 30_000), earlier)
    stream = Stream(cluster.bootstrap, topic, 300).start()
    try:
        stream.wait_acknowledged(300)
        client = admin(cluster)
        try:
            assert client.alter_partition_reassignments({KTP(topic, 0): [2, 3]}) == {
                KTP(topic, 0): None
            }
            cluster.wait_for(lambda: moved(cluster, topic, [2, 3]), 60, "the move to [2, 3]")
            cluster.wait_for(lambda: not client.list_partition_reassignments(), 15, "no move")
        finally:
            client.close()
        before = stream.total_acked
        cluster.wait_for(lambda: stream.total_acked > before + 100, 30, "writes after the move")
    finally:
        stream.stop()
    assert not stream.errors and stream.left == 0
    assert cluster.leader(topic, 0) == 2  # broker 1 led; it left, the first target took over
    values = read_values(cluster.bootstrap, topic)
    assert len(values) == len(set(values)), "a duplicate"
    assert sorted(values) == sorted([*earlier.acked, *stream.acked[0]]), "acked and stored differ"
    cluster.check_replicas_identical(topic)
    cluster.wait_for(lambda: not has_log(cluster, 1, topic), 15, "broker 1 deleting its log")


def test_a_move_that_cannot_finish_is_listed_and_cancelled(cluster: Cluster) -> None:
    topic = "stuck"
    controller_not_3(cluster)
    cluster.create_topic(topic, assignment=[[1, 2]])
    client = admin(cluster)
    cluster.pause(3)
    try:
        assert client.alter_partition_reassignments({KTP(topic, 0): [1, 3]}) == {
            KTP(topic, 0): None
        }
        listed = client.list_partition_reassignments()
        assert listed == {
            KTP(topic, 0): {"replicas": [1, 3, 2], "adding_replicas": [3], "removing_replicas": [2]}
        }
        time.sleep(1)  # broker 3 cannot fetch: the move stays open
        assert KTP(topic, 0) in client.list_partition_reassignments()
        listed_by_tool = tool(cluster, "--list").stdout.splitlines()
        assert listed_by_tool[0] == "Current partition reassignments:"
        assert f"{topic}-0: replicas: 1,3,2. adding: 3. removing: 2." in listed_by_tool
        described = subprocess.run(
            [*ONCELOG, "topics", "describe", topic, "--bootstrap-server", cluster.bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.splitlines()
        assert "ReplicationFactor: 2" in described[0]  # kafka-topics: adding ones do not count
        assert "Replicas: 1,3,2\tIsr: 1,2\tAdding Replicas: 3\tRemoving Replicas: 2" in described[1]
        assert client.alter_partition_reassignments({KTP(topic, 0): None}) == {KTP(topic, 0): None}
        cluster.wait_for(lambda: not client.list_partition_reassignments(), 15, "no move")
        assert cluster.partitions(topic, via=[1])[0][1] == [1, 2]
    finally:
        cluster.resume(3)
        client.close()
    cluster.wait_for(lambda: moved(cluster, topic, [1, 2]), 30, "the replicas back at [1, 2]")
    # Broker 3 was told of the move and of its cancel after waking: it keeps no log.
    cluster.wait_for(lambda: not has_log(cluster, 3, topic), 15, "broker 3 without a log")


def test_a_move_survives_the_controller_being_killed_in_the_middle(cluster: Cluster) -> None:
    """The move is open (its new replica, broker 3, is paused) when the controller, also the
    partition's leader, is SIGKILLed: the next controller ends the move, the producer loses
    and duplicates nothing, and the killed broker deletes its log when it comes back."""
    killed = controller_not_3(cluster)
    other = 3 - killed
    topic = "failover-move"
    cluster.create_topic(topic, assignment=[[killed, other]])
    stream = Stream(cluster.bootstrap, topic, 200).start()
    try:
        stream.wait_acknowledged(200)
        client = admin(cluster)
        try:
            cluster.pause(3)
            try:
                answer = client.alter_partition_reassignments({KTP(topic, 0): [other, 3]})
                assert answer == {KTP(topic, 0): None}
                assert KTP(topic, 0) in client.list_partition_reassignments()
            finally:
                cluster.brokers[killed].kill()
                cluster.resume(3)
        finally:
            client.close()
        cluster.wait_for(lambda: moved(cluster, topic, [other, 3]), 60, "the move's end")
        cluster.brokers[killed].start()
        cluster.wait_for(lambda: not has_log(cluster, killed, topic), 30, "the old log gone")
        before = stream.total_acked
        cluster.wait_for(lambda: stream.total_acked > before + 100, 30, "writes after the move")
    finally:
        stream.stop()
    assert not stream.errors and stream.left == 0
    values = read_values(cluster.bootstrap, topic)
    assert len(values) == len(set(values)), "a duplicate"
    assert sorted(values) == sorted(stream.acked[0]), "acknowledged and stored differ"
    cluster.check_replicas_identical(topic)


def test_moving_a_groups_offsets_partition_moves_its_coordinator(cluster: Cluster) -> None:
    """The group's `__consumer_offsets` partition moves off its leader, the coordinator: the
    new leader loads the group, and the committed offsets are all there."""
    cluster.create_topic("read", assignment=[[1, 2, 3]])
    group = "moved-group"
    commit = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        commit.commit(offsets=[KafkaTopicPartition("read", 0, 7)], asynchronous=False)
    finally:
        commit.close()
    offsets = "__consumer_offsets"
    partition = partition_for(group, len(cluster.partitions(offsets)))
    leader, replicas, _ = cluster.partitions(offsets)[partition]
    target = [r for r in replicas if r != leader] or [n for n in cluster.brokers if n != leader]
    client = admin(cluster)
    try:
        answer = client.alter_partition_reassignments({KTP(offsets, partition): target})
        assert answer == {KTP(offsets, partition): None}
        cluster.wait_for(lambda: not client.list_partition_reassignments(), 30, "no move")
    finally:
        client.close()
    assert cluster.leader(offsets, partition) in target
    reader = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    try:
        committed = reader.committed([KafkaTopicPartition("read", 0)], timeout=30)
    finally:
        reader.close()
    assert committed[0].offset == 7


def test_requests_kafka_refuses_are_refused_per_partition(cluster: Cluster) -> None:
    cluster.create_topic("fixed", assignment=[[1, 2]])
    client = admin(cluster)
    try:
        answers = client.alter_partition_reassignments(
            {
                KTP("fixed", 0): [1, 9],
                KTP("nowhere", 0): [1, 2],
                KTP("no/such name", 0): [1, 2],  # no topic can have this name
            }
        )
        assert answers[KTP("no/such name", 0)] is UnknownTopicOrPartitionError
        assert answers[KTP("fixed", 0)] is InvalidReplicationAssignmentError
        assert answers[KTP("nowhere", 0)] is UnknownTopicOrPartitionError
        cancel = client.alter_partition_reassignments({KTP("fixed", 0): None})
        assert cancel[KTP("fixed", 0)] is NoReassignmentInProgressError
        assert client.alter_partition_reassignments({KTP("fixed", 0): [1, 2]}) == {
            KTP("fixed", 0): None
        }
        assert not client.list_partition_reassignments()
    finally:
        client.close()


def tool(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [*ONCELOG, "reassign-partitions", "--bootstrap-server", cluster.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert "Traceback" not in result.stderr, result.stderr
    return result


def test_the_tool_executes_verifies_and_rolls_back(cluster: Cluster, tmp_path: Path) -> None:
    topic = "tooled"
    cluster.create_topic(topic, assignment=[[2, 3], [3, 1]])
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2]}]}
        )
    )
    done = tool(cluster, "--execute", "--reassignment-json-file", str(plan))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "Current partition replica assignment"
    rollback = json.loads(lines[2])
    assert rollback["partitions"] == [
        {"topic": topic, "partition": 0, "replicas": [2, 3], "log_dirs": ["any", "any"]}
    ]
    assert lines[-1] == f"Successfully started partition reassignment for {topic}-0"

    def completed() -> bool:
        out = tool(cluster, "--verify", "--reassignment-json-file", str(plan)).stdout
        return f"Reassignment of partition {topic}-0 is completed." in out

    cluster.wait_for(completed, 60, "the tool's verify")
    assert tool(cluster, "--list").stdout.strip() == "No partition reassignments found."
    back = tmp_path / "rollback.json"
    back.write_text(lines[2])
    assert tool(cluster, "--execute", "--reassignment-json-file", str(back)).returncode == 0
    cluster.wait_for(lambda: moved(cluster, topic, [2, 3]), 60, "the rollback")

    generated = tool(
        cluster,
        "--generate",
        "--topics-to-move-json-file",
        str(_write(tmp_path / "topics.json", {"version": 1, "topics": [{"topic": topic}]})),
        "--broker-list",
        "1,3",
    )
    assert generated.returncode == 0, generated.stderr
    proposed = json.loads(generated.stdout.splitlines()[-1])["partitions"]
    assert [sorted(p["replicas"]) for p in proposed] == [[1, 3], [1, 3]]


def test_the_tool_says_what_is_wrong_in_one_line(cluster: Cluster, tmp_path: Path) -> None:
    bad = _write(tmp_path / "bad.json", {"version": 1, "partitions": [{"topic": "x"}]})
    result = tool(cluster, "--execute", "--reassignment-json-file", str(bad))
    assert result.returncode == 2 and result.stderr.startswith("Error: ")
    assert result.stderr.count("\n") == 1
    dirs = _write(
        tmp_path / "dirs.json",
        {
            "version": 1,
            "partitions": [
                {"topic": "tooled", "partition": 0, "replicas": [1], "log_dirs": ["/d1"]}
            ],
        },
    )
    result = tool(cluster, "--execute", "--reassignment-json-file", str(dirs))
    assert result.returncode == 2 and "log dirs" in result.stderr
    missing = tool(cluster, "--verify", "--reassignment-json-file", str(tmp_path / "none.json"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1
    unknown = _write(
        tmp_path / "unknown.json",
        {"version": 1, "partitions": [{"topic": "nowhere", "partition": 0, "replicas": [1]}]},
    )
    result = tool(cluster, "--execute", "--reassignment-json-file", str(unknown))
    assert result.returncode == 1 and "nowhere-0" in result.stderr
    cancel = _write(
        tmp_path / "cancel.json",
        {"version": 1, "partitions": [{"topic": "tooled", "partition": 1, "replicas": [1]}]},
    )
    result = tool(cluster, "--cancel", "--reassignment-json-file", str(cancel))
    assert result.returncode == 0
    assert result.stdout == "None of the specified partition reassignments are active.\n"


def _write(path: Path, value: object) -> Path:
    path.write_text(json.dumps(value))
    return path


def test_a_single_node_moves_nothing(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data").start()
    try:
        client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            from kafka.admin import NewTopic

            client.create_topics([NewTopic("solo", 1, 1)])
            answers = client.alter_partition_reassignments(
                {KTP("solo", 0): [1], KTP("solo", 1): [1]}
            )
            assert answers[KTP("solo", 0)] is None
            assert answers[KTP("solo", 1)] is UnknownTopicOrPartitionError
            refused = client.alter_partition_reassignments({KTP("solo", 0): [1, 2]})
            assert refused[KTP("solo", 0)] is InvalidReplicationAssignmentError
            assert client.list_partition_reassignments() == {}
        finally:
            client.close()
    finally:
        broker.kill()
