"""Config changes on a three-broker cluster with etcd: an altered topic config reaches every
broker (each answers DescribeConfigs with it and the leader enforces it), a dynamic broker
default set through one broker applies on all, and both survive a broker's restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

from oncelog.client.admin import Admin
from oncelog.client.configs import BROKER, SET, TOPIC, alter_configs, describe_configs
from tests.cluster_process import Cluster

TIMEOUT = 20


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("configs")) as c:
        yield c


def described(cluster: Cluster, node_id: int, resource_type: int, name: str) -> dict[str, str]:
    """What broker `node_id` itself answers (key -> "value source")."""
    with Admin(cluster.brokers[node_id].bootstrap) as admin:
        conn = admin.node(node_id)
        body = {
            "resources": [
                {"resource_type": resource_type, "resource_name": name, "configuration_keys": None}
            ],
            "include_synonyms": False,
            "include_documentation": False,
        }
        [result] = conn.call(32, (1, 4), body).results
        assert result.error_code == 0, result.error_message
        return {c.name: f"{c.value} {c.config_source}" for c in result.configs}


def produce_one(cluster: Cluster, topic: str, size: int) -> KafkaError | None:
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "log_level": 0})
    results: list[KafkaError | None] = []
    producer.produce(topic, b"x" * size, on_delivery=lambda e, _m: results.append(e))
    assert producer.flush(TIMEOUT) == 0
    return results[0]


@pytest.mark.timeout(120)
def test_altered_topic_config_reaches_every_broker_and_survives_a_restart(
    cluster: Cluster,
) -> None:
    topic = "cluster-alter"
    cluster.create_topic(topic, partitions=1, rf=3)
    assert produce_one(cluster, topic, 5000) is None
    admin = cluster.admin()
    resource = ConfigResource(
        "TOPIC",
        topic,
        incremental_configs=[
            ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([resource])[resource].result(TIMEOUT)
    # DYNAMIC_TOPIC_CONFIG is source 1.
    cluster.wait_for(
        lambda: all(
            described(cluster, n, TOPIC, topic)["max.message.bytes"] == "2000 1"
            for n in cluster.brokers
        ),
        TIMEOUT,
        "every broker to see the new max.message.bytes",
    )
    refused = produce_one(cluster, topic, 5000)
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE

    # A dynamic cluster default, sent to broker 2, applies on every broker (source 3).
    with Admin(cluster.brokers[2].bootstrap) as raw:
        alter_configs(raw, BROKER, "", [("log.retention.ms", SET, "3600000")])
    cluster.wait_for(
        lambda: all(
            described(cluster, n, TOPIC, topic)["retention.ms"] == "3600000 3"
            and described(cluster, n, BROKER, str(n))["log.retention.ms"] == "3600000 3"
            for n in cluster.brokers
        ),
        TIMEOUT,
        "every broker to apply the dynamic default",
    )

    cluster.brokers[3].stop()
    cluster.brokers[3].start()
    assert described(cluster, 3, TOPIC, topic)["max.message.bytes"] == "2000 1"
    cluster.wait_for(
        lambda: described(cluster, 3, TOPIC, topic)["retention.ms"] == "3600000 3",
        TIMEOUT,
        "the restarted broker to read the dynamic default from etcd",
    )
    with Admin(cluster.brokers[1].bootstrap) as raw:
        shown = describe_configs(raw, BROKER, "")
    assert [(c.name, c.value, c.source) for c in shown] == [
        ("log.retention.ms", "3600000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    ]
