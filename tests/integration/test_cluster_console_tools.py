"""The console tools on a three-broker cluster: Kafka's message.format.version strings through
the cluster's config path (cluster_configs), and `topics describe` still showing the sizes the
live brokers know right after one broker dies. One etcd, three real brokers."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer

from tests.cluster_process import Cluster
from tests.integration.helpers import run_tool
from tests.integration.test_message_format_version import LEGACY_ALTER, check_versions


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("console-cluster")) as c:
        yield c


run = run_tool


def sizes(out: str) -> dict[int, str]:
    """`topics describe`'s Size of each partition line."""
    found = {}
    for line in out.splitlines():
        cells = dict(c.split(": ", 1) for c in line.split("\t") if ": " in c)
        if "Partition" in cells:
            found[int(cells["Partition"])] = cells["Size"]
    return found


@LEGACY_ALTER
def test_kafkas_format_versions_on_a_cluster(cluster: Cluster) -> None:
    check_versions(cluster.bootstrap, "cluster-fmt")


def test_describe_shows_the_live_leaders_sizes_after_a_broker_dies(cluster: Cluster) -> None:
    """Run last: it kills the controller (the hardest case: librdkafka's DescribeTopics and
    DescribeConfigs wait for a controller), which leads one of the three partitions."""
    cluster.create_topic("sized", assignment=[[1], [2], [3]])
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for partition in range(3):
        for _ in range(5):
            producer.produce("sized", value=b"x" * 100, partition=partition)
    assert producer.flush(15) == 0
    controller = cluster.admin().list_topics(timeout=10).controller_id
    assert controller in (1, 2, 3)
    others = [n for n in (1, 2, 3) if n != controller]
    via = cluster.bootstrap_of(others)
    code, out, err = run(via, "topics", "describe", "sized")
    assert code == 0, err
    assert all(size.isdigit() and int(size) > 500 for size in sizes(out).values()), out

    cluster.brokers[controller].kill()
    started = time.monotonic()
    code, out, err = run(via, "topics", "describe", "sized")
    assert time.monotonic() - started < 20
    assert code == 0, err
    shown = sizes(out)
    for node_id in others:  # partition n - 1 is led by broker n
        assert shown[node_id - 1].isdigit(), out
    assert shown[controller - 1] == "-", out  # nobody else has the dead broker's partition
