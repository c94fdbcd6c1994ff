"""The cluster's admin surface against a real etcd and three broker processes: CreateTopics
with replication, DeleteTopics across the cluster, CreatePartitions, DescribeCluster,
ElectLeaders; the `oncelog topics` / `oncelog cluster` commands (`scripts/run-cluster`:
test_run_cluster_script.py).

One cluster serves the module (a test that stops a broker starts it again); tests use
confluent-kafka's AdminClient as any Kafka user would, and the CLI as a subprocess.
"""

from __future__ import annotations

import base64
import datetime
import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import NewPartitions, NewTopic

from oncelog.client.admin import Admin
from oncelog.protocol.registry import ApiKey
from tests.broker_process import BrokerProcess
from tests.cluster_process import Cluster, free_port

ROOT = Path(__file__).resolve().parents[2]
ONCELOG = [sys.executable, "-m", "oncelog"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # No automatic rebalance: the election test moves leadership back itself.
    with Cluster(
        tmp_path_factory.mktemp("admin"), overrides={"auto.leader.rebalance.enable": "false"}
    ) as c:
        yield c


def assigned(name: str, replicas: list[list[int]]) -> NewTopic:
    """A topic with explicit replicas (confluent-kafka wants the count given with them)."""
    return NewTopic(name, len(replicas), replica_assignment=replicas)


def create(cluster: Cluster, topic: NewTopic) -> None:
    admin = cluster.admin()
    admin.create_topics([topic])[topic.topic].result(15)
    cluster.wait_for(
        lambda: (
            bool(cluster.partitions(topic.topic))
            and all(p[0] >= 0 for p in cluster.partitions(topic.topic).values())
        ),
        15,
        f"leaders of {topic.topic}",
    )


def produce(cluster: Cluster, topic: str, count: int, partition: int = -1) -> None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    errors: list[str] = []

    def delivered(err, _msg):  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))

    for i in range(count):
        producer.produce(topic, str(i).encode(), partition=partition, on_delivery=delivered)
    assert producer.flush(30) == 0
    assert not errors, errors[:3]


def etcd_keys(cluster: Cluster, prefix: str) -> list[str]:
    """The keys under the cluster's `/oncelog/<prefix>`, read through etcd's JSON gateway."""
    full = f"/oncelog/{prefix}".encode()
    end = full[:-1] + bytes([full[-1] + 1])
    body = json.dumps(
        {"key": base64.b64encode(full).decode(), "range_end": base64.b64encode(end).decode()}
    ).encode()
    url = f"http://{cluster.etcd.endpoint}/v3/kv/range"
    with urllib.request.urlopen(urllib.request.Request(url, body), timeout=5) as resp:
        kvs = json.loads(resp.read()).get("kvs", [])
    return [base64.b64decode(kv["key"]).decode() for kv in kvs]


def error_name(future_or_exc: object) -> str:
    exc = future_or_exc
    assert isinstance(exc, KafkaException), exc
    return str(exc.args[0].name())


def cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*ONCELOG, *args], check=False, capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


# -- CreateTopics, DeleteTopics ------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_create_with_replication_and_explicit_assignment(cluster: Cluster) -> None:
    create(cluster, assigned("explicit", [[1, 2, 3], [2, 3, 1], [3, 1, 2]]))
    parts = cluster.partitions("explicit")
    assert {p: r for p, (_, r, _) in parts.items()} == {0: [1, 2, 3], 1: [2, 3, 1], 2: [3, 1, 2]}
    assert {p: leader for p, (leader, _, _) in parts.items()} == {0: 1, 1: 2, 2: 3}

    admin = cluster.admin()
    too_many = admin.create_topics([NewTopic("rf4", 1, 4)])["rf4"]
    with pytest.raises(KafkaException) as info:
        too_many.result(15)
    assert error_name(info.value) == "INVALID_REPLICATION_FACTOR"
    unknown = admin.create_topics([assigned("unknown-broker", [[1, 7]])])
    with pytest.raises(KafkaException):
        unknown["unknown-broker"].result(15)

    # The console tool asks for the replication factor like kafka-topics.sh does.
    done = cli("topics", "create", "by-cli", "--partitions", "2", "--replication-factor", "3",
               "-b", cluster.bootstrap)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Created topic by-cli.\n"
    cluster.wait_isr_full("by-cli", 15)
    assert all(len(r) == 3 for _, r, _ in cluster.partitions("by-cli").values())
    refused = cli("topics", "create", "rf4-cli", "--replication-factor", "4",
                  "-b", cluster.bootstrap)  # fmt: skip
    assert refused.returncode == 1
    assert refused.stderr.startswith("Error: topic 'rf4-cli': INVALID_REPLICATION_FACTOR (38)")
    assert "Traceback" not in refused.stderr
    produce(cluster, "explicit", 300)
    cluster.check_replicas_identical("explicit", 30)


@pytest.mark.timeout(60)
def test_delete_removes_the_topic_on_every_broker(cluster: Cluster) -> None:
    create(cluster, NewTopic("doomed", 3, 3))
    produce(cluster, "doomed", 200)
    dirs = [b.data_dir / f"doomed-{p}" for b in cluster.brokers.values() for p in range(3)]
    assert all(d.is_dir() for d in dirs)
    assert len(etcd_keys(cluster, "partitions/doomed/")) == 3

    admin = cluster.admin()
    admin.delete_topics(["doomed"])["doomed"].result(15)
    assert "doomed" not in admin.list_topics(timeout=10).topics
    assert etcd_keys(cluster, "topics/doomed") == []
    assert etcd_keys(cluster, "partitions/doomed/") == []  # one transaction took them all
    cluster.wait_for(lambda: not any(d.exists() for d in dirs), 15, "partition dirs removed")
    with pytest.raises(KafkaException) as info:
        admin.delete_topics(["doomed"])["doomed"].result(15)
    assert error_name(info.value) == "UNKNOWN_TOPIC_OR_PART"

    # The same name again: new partitions from scratch, no state left from the old topic.
    create(cluster, NewTopic("doomed", 2, 3))
    assert sorted(cluster.partitions("doomed")) == [0, 1]
    produce(cluster, "doomed", 50)
    assert sum(cluster.high_watermarks("doomed").values()) == 50
    cluster.check_replicas_identical("doomed", 30)


@pytest.mark.timeout(60)
def test_internal_topics_cannot_be_deleted(cluster: Cluster) -> None:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": "makes-offsets", "log_level": 0}
    )
    try:
        consumer.subscribe(["explicit"])
        admin = cluster.admin()

        def offsets_topic() -> bool:
            consumer.poll(0.2)  # the group's FindCoordinator creates it
            return "__consumer_offsets" in admin.list_topics(timeout=5).topics

        cluster.wait_for(offsets_topic, 30, "__consumer_offsets")
    finally:
        consumer.close()
    with pytest.raises(KafkaException) as info:
        admin.delete_topics(["__consumer_offsets"])["__consumer_offsets"].result(15)
    assert error_name(info.value) == "INVALID_REQUEST"
    assert "__consumer_offsets" in admin.list_topics(timeout=10).topics


# -- CreatePartitions ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_create_partitions_grows_the_topic(cluster: Cluster) -> None:
    create(cluster, NewTopic("growing", 2, 3))
    produce(cluster, "growing", 100)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions("growing", 4)])["growing"].result(15)
    cluster.wait_isr_full("growing", 15)
    parts = cluster.partitions("growing")
    assert sorted(parts) == [0, 1, 2, 3]
    assert all(len(set(r)) == 3 for _, r, _ in parts.values())
    produce(cluster, "growing", 50, partition=3)
    assert cluster.high_watermarks("growing")[3] == 50

    for count, wanted in ((4, "INVALID_PARTITIONS"), (3, "INVALID_PARTITIONS")):
        with pytest.raises(KafkaException) as info:
            admin.create_partitions([NewPartitions("growing", count)])["growing"].result(15)
        assert error_name(info.value) == wanted
    bad = NewPartitions("growing", 6, [[1, 2, 3]])  # two partitions added, one assignment
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([bad])["growing"].result(15)
    assert error_name(info.value) == "INVALID_REPLICA_ASSIGNMENT"
    with pytest.raises(KafkaException) as info:
        admin.create_partitions([NewPartitions("no-such-topic", 2)])["no-such-topic"].result(15)
    assert error_name(info.value) == "UNKNOWN_TOPIC_OR_PART"
    with pytest.raises(KafkaException) as info:  # a name no topic can have: an answer too
        admin.create_partitions([NewPartitions("no/such", 2)])["no/such"].result(15)
    assert error_name(info.value) == "UNKNOWN_TOPIC_OR_PART"

    manual = NewPartitions("growing", 5, [[3, 1, 2]])
    admin.create_partitions([manual])["growing"].result(15)
    cluster.wait_for(lambda: cluster.partitions("growing")[4][:2] == (3, [3, 1, 2]), 15)
    done = cli("topics", "alter", "growing", "--partitions", "6", "-b", cluster.bootstrap)
    assert done.returncode == 0, done.stderr
    cluster.wait_isr_full("growing", 15)
    assert len(cluster.partitions("growing")) == 6
    cluster.check_replicas_identical("growing", 30)


@pytest.mark.timeout(90)
def test_admin_requests_right_after_create_topics_see_the_topics(cluster: Cluster) -> None:
    """An admin request sees what an acknowledged earlier one wrote, whichever broker gets
    it: CreatePartitions, AlterConfigs and DeleteTopics sent to each broker in turn the
    moment CreateTopics was answered (a broker whose etcd watch lagged answered 'does not
    exist')."""
    admin = cluster.admin()
    names = [f"at-once-{i}" for i in range(9)]
    futures = admin.create_topics([NewTopic(n, 1, 2) for n in names])
    for future in futures.values():
        future.result(15)
    grown = admin.create_partitions([NewPartitions(n, 2) for n in names])
    for future in grown.values():
        future.result(15)
    timeout = datetime.timedelta(seconds=10)
    for i in range(9):
        name, node = f"next-{i}", i % 3 + 1
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
        with Admin(cluster.brokers[node].bootstrap) as raw:
            conn = raw.node(node)
            grow = {"topics": [{"name": name, "count": 3, "assignments": None}]}
            answer = conn.call(
                ApiKey.CREATE_PARTITIONS,
                (0, 3),
                {**grow, "timeout": timeout, "validate_only": False},
            )
            assert int(answer.results[0].error_code) == 0, (node, answer.results[0])
            resource = {
                "resource_type": 2,
                "resource_name": name,
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "60000"}],
            }
            body = {"resources": [resource], "validate_only": False}
            answer = conn.call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (0, 1), body)
            assert int(answer.responses[0].error_code) == 0, (node, answer.responses[0])
    for name in names + [f"next-{i}" for i in range(9)]:
        cluster.wait_for(lambda n=name: len(cluster.partitions(n)) >= 2, 15, f"{name} grown")
    for i in range(3):
        name, node = f"gone-{i}", i + 1
        admin.create_topics([NewTopic(name, 1, 1)])[name].result(15)
        with Admin(cluster.brokers[node].bootstrap) as raw:
            body = {"topic_names": [name], "timeout": timeout}
            answer = raw.node(node).call(ApiKey.DELETE_TOPICS, (1, 5), body)
        assert int(answer.responses[0].error_code) == 0, (node, answer.responses[0])
    # The module's cluster is shared: the tests after this one count partitions.
    left = names + [f"next-{i}" for i in range(9)]
    for future in admin.delete_topics(left).values():
        future.result(15)
    cluster.wait_for(lambda: not set(left) & set(admin.list_topics(timeout=10).topics), 15)


# -- DescribeCluster, ElectLeaders -------------------------------------------------------------


@pytest.mark.timeout(30)
def test_describe_cluster_names_the_controller(cluster: Cluster) -> None:
    admin = cluster.admin()
    described = admin.describe_cluster(request_timeout=10).result(15)
    metadata = admin.list_topics(timeout=10)
    assert sorted(n.id for n in described.nodes) == [1, 2, 3]
    ports = {n.id: n.port for n in described.nodes}
    assert ports == {i: b.port for i, b in cluster.brokers.items()}
    assert described.controller is not None
    assert described.controller.id == metadata.controller_id
    assert described.controller.id in (1, 2, 3)
    assert described.cluster_id == metadata.cluster_id


@pytest.mark.timeout(60)
def test_elect_preferred_leader_after_the_leader_moved(cluster: Cluster) -> None:
    create(cluster, assigned("elect", [[1, 2, 3], [2, 3, 1]]))
    produce(cluster, "elect", 200)
    assert cluster.leader("elect", 0) == 1
    cluster.brokers[1].kill()
    cluster.wait_for(lambda: cluster.leader("elect", 0) in (2, 3), 20, "a new leader of elect-0")
    cluster.brokers[1].start()
    cluster.wait_isr_full("elect", 30)
    assert cluster.leader("elect", 0) != 1  # no automatic rebalance in this cluster

    admin = cluster.admin()
    tp0, tp1 = KafkaTopicPartition("elect", 0), KafkaTopicPartition("elect", 1)
    missing = KafkaTopicPartition("elect", 9)
    results = admin.elect_leaders(ElectionType.PREFERRED, [tp0, tp1, missing]).result(15)
    errors = {(tp.topic, tp.partition): e for tp, e in results.items()}
    assert errors[("elect", 0)] is None
    assert errors[("elect", 1)] is not None
    assert errors[("elect", 1)].name() == "ELECTION_NOT_NEEDED"
    assert errors[("elect", 9)].name() == "UNKNOWN_TOPIC_OR_PART"
    cluster.wait_for(lambda: cluster.leader("elect", 0) == 1, 10, "broker 1 leading elect-0")

    # Unclean: every partition has a live leader.
    results = admin.elect_leaders(ElectionType.UNCLEAN, [tp0]).result(15)
    assert next(iter(results.values())).name() == "ELECTION_NOT_NEEDED"

    # Only the controller elects; the others say NOT_CONTROLLER (41).
    controller = admin.list_topics(timeout=10).controller_id
    other = next(n for n in cluster.brokers if n != controller)
    body = {
        "election_type": 0,
        "topic_partitions": [{"topic": "elect", "partitions": [0]}],
        "timeout": datetime.timedelta(seconds=10),
    }
    with Admin(cluster.brokers[other].bootstrap) as raw:
        answer = raw.node(other).call(ApiKey.ELECT_LEADERS, (2, 2), body)
    assert int(answer.error_code) == 41
    assert int(answer.replica_election_results[0].partition_result[0].error_code) == 41

    done = cli("cluster", "elect-leaders", "--topic", "elect", "-b", cluster.bootstrap)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "Valid replica already elected for partitions elect-0, elect-1\n"
    cluster.check_replicas_identical("elect", 30)


# -- the console tools with a broker down ------------------------------------------------------


@pytest.mark.timeout(90)
def test_describe_commands_with_a_broker_stopped(cluster: Cluster) -> None:
    create(cluster, assigned("watched", [[1, 2, 3], [3, 1, 2]]))
    create(cluster, assigned("lonely", [[3]]))
    produce(cluster, "watched", 100)
    b = cluster.bootstrap
    out = cli("topics", "describe", "watched", "-b", b)
    assert out.returncode == 0, out.stderr
    assert "\tTopic: watched\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2,3\tSize: " in (
        out.stdout
    )
    assert "Offline" not in out.stdout

    cluster.brokers[3].stop()
    try:
        cluster.wait_for(
            lambda: all(3 not in isr for _, _, isr in cluster.partitions("watched").values()),
            20,
            "broker 3 out of the ISRs",
        )
        out = cli("topics", "describe", "watched", "lonely", "-b", b)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith("Topic: watched\tTopicId: ")
        assert lines[1].startswith(
            "\tTopic: watched\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2\tOffline: 3\t"
        )
        assert lines[2].startswith(
            "\tTopic: watched\tPartition: 1\tLeader: 1\tReplicas: 3,1,2\tIsr: 1,2\tOffline: 3\t"
        )
        assert "\tTopic: lonely\tPartition: 0\tLeader: none\tReplicas: 3\tIsr: 3\tOffline: 3" in (
            out.stdout
        )

        under = cli("topics", "describe", "--under-replicated-partitions", "-b", b)
        assert under.returncode == 0, under.stderr
        assert [line for line in under.stdout.splitlines() if "watched" in line] == [
            "\tTopic: watched\tPartition: 0\tLeader: 1\tReplicas: 1,2,3\tIsr: 1,2\tOffline: 3",
            "\tTopic: watched\tPartition: 1\tLeader: 1\tReplicas: 3,1,2\tIsr: 1,2\tOffline: 3",
        ]
        assert "lonely" not in under.stdout
        assert all(line.startswith("\tTopic: ") for line in under.stdout.splitlines())
        unavailable = cli("topics", "describe", "--unavailable-partitions", "-b", b)
        assert unavailable.stdout.splitlines() == [
            "\tTopic: lonely\tPartition: 0\tLeader: none\tReplicas: 3\tIsr: 3\tOffline: 3"
        ]

        described = cli("cluster", "describe", "-b", b)
        assert described.returncode == 0, described.stderr
        text = described.stdout
        controller = cluster.admin().list_topics(timeout=10).controller_id
        cluster_id = cluster.admin().list_topics(timeout=10).cluster_id
        assert text.startswith(f"Cluster ID: {cluster_id}\n")
        assert f"Controller: {controller}\t" in text
        assert "Brokers: 2\n" in text
        assert f"\tBroker: 1\tHost: {cluster.brokers[1].bootstrap}\tRack: -\n" in text
        assert "\tBroker: 3\t" not in text
        under_part = text.split("Offline partitions:")[0]
        assert "\tTopic: watched\tPartition: 1\tLeader: 1\tReplicas: 3,1,2\tIsr: 1,2" in under_part
        offline = text.split("Offline partitions: ")[1]
        assert offline.startswith("1\n")
        assert "\tTopic: lonely\tPartition: 0\tLeader: none" in offline
    finally:
        cluster.brokers[3].start()
    cluster.wait_isr_full("watched", 30)
    cluster.wait_for(lambda: cluster.leader("lonely", 0) == 3, 20, "lonely back online")
    cluster.check_replicas_identical("watched", 30)


@pytest.mark.timeout(30)
def test_cluster_describe_fails_in_one_line_without_a_broker() -> None:
    port = free_port()
    done = cli("cluster", "describe", "-b", f"127.0.0.1:{port}")  # ~10 s: the tool's timeout
    assert done.returncode == 1
    assert done.stdout == ""
    # Which comes first, our timeout or librdkafka's (_TIMED_OUT), varies.
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("Error: ")
    assert "answered within 10 s" in done.stderr or "_TIMED_OUT" in done.stderr


# -- a single node answers the same APIs -----------------------------------------------------


@pytest.mark.timeout(60)
def test_single_node_admin(tmp_path: Path) -> None:
    # Deleted files wait log.segment.delete.delay.ms (60 s by default) before they go.
    broker = BrokerProcess(tmp_path / "single", {"log.segment.delete.delay.ms": "2000"}).start()
    try:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        admin.create_topics([NewTopic("solo", 2, 1)])["solo"].result(15)
        described = admin.describe_cluster(request_timeout=10).result(15)
        assert [n.id for n in described.nodes] == [1]
        assert described.controller.id == 1
        admin.create_partitions([NewPartitions("solo", 3)])["solo"].result(15)
        assert sorted(admin.list_topics("solo", timeout=10).topics["solo"].partitions) == [0, 1, 2]
        assert (tmp_path / "single" / "solo-2").is_dir()
        with pytest.raises(KafkaException) as info:
            admin.create_partitions([NewPartitions("solo", 3)])["solo"].result(15)
        assert error_name(info.value) == "INVALID_PARTITIONS"
        with pytest.raises(KafkaException) as info:
            admin.create_partitions([NewPartitions("solo", 4, [[2]])])["solo"].result(15)
        assert error_name(info.value) == "INVALID_REPLICA_ASSIGNMENT"
        tp = KafkaTopicPartition("solo", 0)
        results = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(15)
        assert next(iter(results.values())).name() == "ELECTION_NOT_NEEDED"
        admin.delete_topics(["solo"])["solo"].result(15)
        data = tmp_path / "single"
        assert not (data / "solo-0").exists()
        # Renamed at once to solo-N.<uuid>-delete; a worker removes those once the delay
        # has passed (the broker's 1 s job: within about 3 s).
        renamed = sorted(p.name for p in data.iterdir() if p.name.startswith("solo-"))
        assert len(renamed) == 3 and all(n.endswith("-delete") for n in renamed), renamed
        deadline = time.monotonic() + 12
        while any(p.name.startswith("solo-") for p in data.iterdir()):
            assert time.monotonic() < deadline, sorted(p.name for p in data.iterdir())
            time.sleep(0.1)
    finally:
        broker.stop()
