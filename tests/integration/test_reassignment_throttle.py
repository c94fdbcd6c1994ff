"""`oncelog reassign-partitions --throttle` on a real cluster (three brokers, etcd), checked
with confluent-kafka's DescribeConfigs: `--execute --throttle` sets the brokers' rates and the
topics' throttled replica lists as `kafka-reassign-partitions.sh` sets them, `--additional`
changes the rate of a move in progress, the throttled move completes with all its data,
`--verify` of a finished move and `--cancel` remove the throttles (`--preserve-throttles`
keeps them), and a rate that is not a number is one line, exit 2.

Durations are bounded from below only: at 10 kB/s a 2 MB copy cannot be over at once."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType

from tests.cluster_process import Cluster
from tests.integration.test_reassignment import tool

pytestmark = pytest.mark.integration

RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
WARNING = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure "
    "the throttle is removed."
)
#: 2 MB: at 10 kB/s its copy takes minutes, at 200 kB/s seconds.
COUNT, MESSAGE = 2000, b"t" * 1000
SLOW = 10_000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(
        tmp_path_factory.mktemp("reassign-throttle"),
        overrides={"auto.leader.rebalance.enable": "false"},
    ) as c:
        yield c


def dynamic(cluster: Cluster, rtype: ResourceType, name: str) -> dict[str, str]:
    """The throttle configs set on one broker or topic itself (not defaults)."""
    own = (
        ConfigSource.DYNAMIC_TOPIC_CONFIG
        if rtype == ResourceType.TOPIC
        else ConfigSource.DYNAMIC_BROKER_CONFIG
    )
    resource = ConfigResource(rtype, name)
    admin = cluster.admin()  # kept alive until the future resolves
    entries = admin.describe_configs([resource])[resource].result(30)
    return {
        k: e.value
        for k, e in entries.items()
        if k in RATES + REPLICAS and e.source == own.value and e.value is not None
    }


def broker_rates(cluster: Cluster) -> dict[int, dict[str, str]]:
    return {n: dynamic(cluster, ResourceType.BROKER, str(n)) for n in cluster.brokers}


def plan_file(path: Path, topic: str, moves: dict[int, list[int]]) -> str:
    partitions = [{"topic": topic, "partition": p, "replicas": r} for p, r in moves.items()]
    path.write_text(json.dumps({"version": 1, "partitions": partitions}))
    return str(path)


def produce(cluster: Cluster, topic: str, partition: int = 0) -> None:
    acked: list[bool] = []
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    for _ in range(COUNT):
        producer.produce(
            topic, MESSAGE, partition=partition, on_delivery=lambda e, m: acked.append(e is None)
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert sum(acked) == COUNT


def in_progress(cluster: Cluster, plan: str, topic: str, partition: int = 0) -> bool:
    """The tool's --verify says so (and leaves the throttles alone)."""
    out = tool(cluster, "--verify", "--reassignment-json-file", plan, "--preserve-throttles").stdout
    return f"Reassignment of partition {topic}-{partition} is still in progress." in out


@pytest.mark.timeout(180)
def test_a_throttled_move_sets_kafkas_throttles_which_verify_clears(
    cluster: Cluster, tmp_path: Path
) -> None:
    topic = "throttled"
    # Partition 0 moves from broker 1 to broker 2; partition 1 stays on broker 2.
    cluster.create_topic(topic, assignment=[[1], [2]])
    produce(cluster, topic, 0)
    plan = plan_file(tmp_path / "plan.json", topic, {0: [2], 1: [2]})

    started = tool(cluster, "--execute", "--reassignment-json-file", plan, "--throttle", str(SLOW))
    assert started.returncode == 0, started.stderr
    lines = started.stdout.splitlines()
    assert lines[-3:] == [
        WARNING,
        f"The inter-broker throttle limit was set to {SLOW} B/s",
        f"Successfully started partition reassignments for {topic}-0,{topic}-1",
    ]
    # Kafka's lists: the current replicas lead, the added ones follow; partition 1 does not
    # move but is listed with its replica, as Kafka lists it.
    assert dynamic(cluster, ResourceType.TOPIC, topic) == {
        REPLICAS[0]: "0:1,1:2",
        REPLICAS[1]: "0:2",
    }
    rate = {RATES[0]: str(SLOW), RATES[1]: str(SLOW)}
    assert broker_rates(cluster) == {1: rate, 2: rate, 3: {}}  # broker 3 holds no replica

    # At 10 kB/s the 2 MB are far from copied: the move is open, verify keeps the throttles.
    assert in_progress(cluster, plan, topic)
    assert broker_rates(cluster)[1] == rate
    again = tool(cluster, "--execute", "--reassignment-json-file", plan)
    assert again.returncode == 1
    assert again.stderr.startswith("Error: Cannot execute because there is an existing")

    # --additional resubmits the move with a higher rate, still a throttle: it finishes.
    fast = 200_000
    faster = tool(
        cluster,
        "--execute",
        "--additional",
        "--reassignment-json-file",
        plan,
        "--throttle",
        str(fast),
    )
    assert faster.returncode == 0, faster.stderr
    assert f"The inter-broker throttle limit was set to {fast} B/s" in faster.stdout
    rate = {RATES[0]: str(fast), RATES[1]: str(fast)}
    assert broker_rates(cluster) == {1: rate, 2: rate, 3: {}}
    assert dynamic(cluster, ResourceType.TOPIC, topic) == {
        REPLICAS[0]: "0:1,1:2",
        REPLICAS[1]: "0:2",
    }
    cluster.wait_for(lambda: not in_progress(cluster, plan, topic), 90, "the move's end")
    assert cluster.partitions(topic)[0][1] == [2]
    assert cluster.high_watermarks(topic)[0] == COUNT
    cluster.check_replicas_identical(topic)  # broker 2 holds every batch up to the end

    kept = tool(cluster, "--verify", "--reassignment-json-file", plan, "--preserve-throttles")
    assert kept.returncode == 0, kept.stderr
    assert "Clearing" not in kept.stdout
    assert broker_rates(cluster)[2] == rate
    assert dynamic(cluster, ResourceType.TOPIC, topic)

    verified = tool(cluster, "--verify", "--reassignment-json-file", plan)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines() == [
        "Status of partition reassignment:",
        f"Reassignment of partition {topic}-0 is completed.",
        f"Reassignment of partition {topic}-1 is completed.",
        "Clearing broker-level throttles on brokers 1,2,3",
        f"Clearing topic-level throttles on topic {topic}",
    ]
    assert broker_rates(cluster) == {1: {}, 2: {}, 3: {}}
    assert dynamic(cluster, ResourceType.TOPIC, topic) == {}


@pytest.mark.timeout(120)
def test_cancel_clears_the_throttles_unless_preserved(cluster: Cluster, tmp_path: Path) -> None:
    topic = "cancelled"
    cluster.create_topic(topic, assignment=[[3]])
    produce(cluster, topic)
    plan = plan_file(tmp_path / "plan.json", topic, {0: [1, 3]})
    for preserve in (True, False):
        started = tool(
            cluster, "--execute", "--reassignment-json-file", plan, "--throttle", str(SLOW)
        )
        assert started.returncode == 0, started.stderr
        assert dynamic(cluster, ResourceType.TOPIC, topic) == {
            REPLICAS[0]: "0:3",
            REPLICAS[1]: "0:1",
        }
        assert in_progress(cluster, plan, topic)
        extra = ["--preserve-throttles"] if preserve else []
        cancelled = tool(cluster, "--cancel", "--reassignment-json-file", plan, *extra)
        assert cancelled.returncode == 0, cancelled.stderr
        said = cancelled.stdout.splitlines()
        assert said[0] == f"Successfully cancelled partition reassignment for: {topic}-0"
        rate = {RATES[0]: str(SLOW), RATES[1]: str(SLOW)}
        if preserve:
            assert said == said[:1]
            assert broker_rates(cluster) == {1: rate, 2: {}, 3: rate}
        else:
            assert said[1:] == [
                "Clearing broker-level throttles on brokers 1,2,3",
                f"Clearing topic-level throttles on topic {topic}",
            ]
            assert broker_rates(cluster) == {1: {}, 2: {}, 3: {}}
            assert dynamic(cluster, ResourceType.TOPIC, topic) == {}
        cluster.wait_for(lambda: not in_progress(cluster, plan, topic), 30, "no move")
    assert cluster.partitions(topic)[0][1] == [3]


def test_a_rate_that_is_not_a_number_is_one_line_exit_2(cluster: Cluster, tmp_path: Path) -> None:
    plan = plan_file(tmp_path / "plan.json", "anything", {0: [1]})
    bad = tool(cluster, "--execute", "--reassignment-json-file", plan, "--throttle", "fast")
    assert bad.returncode == 2
    assert bad.stderr.startswith("Error: ") and bad.stderr.count("\n") == 1
    assert "--throttle" in bad.stderr and bad.stdout == ""
    misplaced = tool(cluster, "--verify", "--reassignment-json-file", plan, "--throttle", "1000")
    assert misplaced.returncode == 2
    assert misplaced.stderr == 'Error: Option "[throttle]" can\'t be used with action "[verify]"\n'
