"""message.format.version takes Kafka's version strings, trimmed as Kafka trims them
(0.10.0.0, 0.10.0-IV1, 0.11.0.2, 2.8.1), through CreateTopics and AlterConfigs from a real
client, and is kept as written. One broker here; test_cluster_console_tools.py does the same
on a cluster (cluster_configs)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from tests.broker_process import BrokerProcess

VERSIONS = ("0.10.0.0", "0.10.0-IV1", "0.11.0.2", "2.8.1")
#: AlterConfigs (API 33), as the user's tool sent it; confluent-kafka calls it deprecated.
LEGACY_ALTER = pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("format-version") / "data").start()
    try:
        yield proc
    finally:
        proc.kill()


def check_versions(bootstrap: str, prefix: str) -> None:
    """Create a topic with each version, alter another to each; refuse one Kafka refuses."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = [
        NewTopic(f"{prefix}-{i}", 1, -1, config={"message.format.version": v})
        for i, v in enumerate(VERSIONS)
    ]
    for future in admin.create_topics(created, operation_timeout=10).values():
        future.result(20)
    for i, version in enumerate(VERSIONS):
        resource = ConfigResource("topic", f"{prefix}-{i}")
        (future,) = admin.describe_configs([resource]).values()
        assert future.result(10)["message.format.version"].value == version

    admin.create_topics([NewTopic(f"{prefix}-altered", 1, -1)])[f"{prefix}-altered"].result(20)
    for version in VERSIONS:
        resource = ConfigResource(
            "topic", f"{prefix}-altered", set_config={"message.format.version": version}
        )
        (future,) = admin.alter_configs([resource]).values()
        future.result(10)
        (future,) = admin.describe_configs([ConfigResource("topic", f"{prefix}-altered")]).values()
        assert future.result(10)["message.format.version"].value == version

    bad = ConfigResource("topic", f"{prefix}-altered", set_config={"message.format.version": "2.9"})
    (future,) = admin.alter_configs([bad]).values()
    with pytest.raises(KafkaException) as caught:
        future.result(10)
    assert caught.value.args[0].name() == "INVALID_CONFIG"
    assert "Version 2.9 is not a valid version" in caught.value.args[0].str()


@LEGACY_ALTER
def test_kafkas_versions_through_a_real_client(broker: BrokerProcess) -> None:
    check_versions(broker.bootstrap, "fmt")
