"""AlterConfigs / IncrementalAlterConfigs / DescribeConfigs with real admin clients: topic
overrides and dynamic broker configs validated, persisted across a restart and acting on
the partition logs (segment rolling, message size), with Kafka's sources and errors."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpConfigResourceType
from kafka.admin import KafkaAdminClient

from oncelog.client.admin import Admin
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic

TIMEOUT = 15


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": broker.bootstrap})


def incremental(
    admin: AdminClient, kind: str, name: str, ops: list[tuple[str, str | None, AlterConfigOpType]],
    *, validate_only: bool = False,
) -> None:  # fmt: skip
    entries = [ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    futures = admin.incremental_alter_configs([resource], validate_only=validate_only)
    futures[resource].result(TIMEOUT)


def describe(admin: AdminClient, kind: str, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(kind, name)
    result: dict[str, ConfigEntry] = admin.describe_configs([resource])[resource].result(TIMEOUT)
    return result


def error_of(call: object) -> KafkaError:
    assert callable(call)
    with pytest.raises(KafkaException) as info:
        call()
    err = info.value.args[0]
    assert isinstance(err, KafkaError)
    return err


def produce(bootstrap: str, topic: str, values: list[bytes]) -> list[KafkaError | None]:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    results: list[KafkaError | None] = []
    for value in values:
        producer.produce(topic, value, on_delivery=lambda e, _m: results.append(e))
        producer.flush(TIMEOUT)
    assert producer.flush(TIMEOUT) == 0
    return results


def configs_cli(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "oncelog", "configs", "-b", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done


def segment_files(broker: BrokerProcess, topic: str) -> int:
    return len(list((broker.data_dir / f"{topic}-0").glob("*.log")))


SET, DELETE, APPEND, SUBTRACT = (
    AlterConfigOpType.SET,
    AlterConfigOpType.DELETE,
    AlterConfigOpType.APPEND,
    AlterConfigOpType.SUBTRACT,
)


def test_incremental_topic_configs_act_on_the_log_and_survive_a_restart(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    topic = "alter-me"
    create_topic(broker.bootstrap, topic, 1)
    big = b"x" * 5000
    assert produce(broker.bootstrap, topic, [big]) == [None]

    incremental(
        admin,
        "TOPIC",
        topic,
        [("max.message.bytes", "2000", SET), ("segment.bytes", "1024", SET)],
    )
    configs = describe(admin, "TOPIC", topic)
    assert configs["max.message.bytes"].value == "2000"
    assert configs["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert configs["segment.bytes"].value == "1024"
    # The running log refuses what the new limit refuses, and rolls at the new size.
    [refused] = produce(broker.bootstrap, topic, [big])
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE
    before = segment_files(broker, topic)
    assert produce(broker.bootstrap, topic, [b"y" * 600] * 6) == [None] * 6
    assert segment_files(broker, topic) >= before + 2

    broker.restart()
    configs = describe(admin, "TOPIC", topic)
    assert configs["max.message.bytes"].value == "2000"
    assert configs["segment.bytes"].value == "1024"
    [refused] = produce(broker.bootstrap, topic, [big])
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE

    # DELETE goes back to the broker default.
    incremental(admin, "TOPIC", topic, [("max.message.bytes", None, DELETE)])
    configs = describe(admin, "TOPIC", topic)
    assert configs["max.message.bytes"].value == "1048588"
    assert configs["max.message.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert produce(broker.bootstrap, topic, [big]) == [None]


def test_list_operations_validate_only_and_errors(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    topic = "alter-lists"
    create_topic(broker.bootstrap, topic, 1)
    incremental(admin, "TOPIC", topic, [("cleanup.policy", "compact", APPEND)])
    assert describe(admin, "TOPIC", topic)["cleanup.policy"].value == "delete,compact"
    incremental(admin, "TOPIC", topic, [("cleanup.policy", "delete", SUBTRACT)])
    assert describe(admin, "TOPIC", topic)["cleanup.policy"].value == "compact"

    incremental(admin, "TOPIC", topic, [("retention.ms", "1000", SET)], validate_only=True)
    assert describe(admin, "TOPIC", topic)["retention.ms"].value == "604800000"

    bad = error_of(lambda: incremental(admin, "TOPIC", topic, [("retention.ms", "abc", SET)]))
    assert bad.code() == KafkaError.INVALID_CONFIG
    bad = error_of(lambda: incremental(admin, "TOPIC", topic, [("no.such.key", "1", SET)]))
    assert bad.code() == KafkaError.INVALID_CONFIG
    assert "Unknown topic config name: no.such.key" in bad.str()
    bad = error_of(lambda: incremental(admin, "TOPIC", topic, [("retention.ms", "5", APPEND)]))
    assert bad.code() == KafkaError.INVALID_CONFIG
    assert "append is not allowed" in bad.str()
    bad = error_of(lambda: incremental(admin, "TOPIC", "missing", [("retention.ms", "5", SET)]))
    assert bad.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    # Kafka's cross-key rule sees the other overrides.
    bad = error_of(
        lambda: incremental(
            admin,
            "TOPIC",
            topic,
            [("min.compaction.lag.ms", "10", SET), ("max.compaction.lag.ms", "5", SET)],
        )
    )
    assert bad.code() == KafkaError.INVALID_CONFIG
    assert describe(admin, "TOPIC", topic)["cleanup.policy"].value == "compact"


def test_dynamic_broker_configs_apply_persist_and_refuse_static_keys(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    topic = "dyn-broker"
    create_topic(broker.bootstrap, topic, 1)
    # The cluster default (resource name ""): librdkafka and kafka-python refuse that name
    # client-side, so this goes through `oncelog configs --entity-default`, as an operator
    # would set it with kafka-configs.sh.
    done = configs_cli(
        broker,
        "--alter",
        "--entity-type",
        "brokers",
        "--entity-default",
        "--add-config",
        "message.max.bytes=3000",
    )
    assert done.stdout == "Completed updating default config for brokers in the cluster.\n"
    shown = configs_cli(broker, "--describe", "--entity-type", "brokers", "--entity-default")
    assert shown.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  message.max.bytes=3000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:message.max.bytes=3000}",
    ]
    topic_configs = describe(admin, "TOPIC", topic)
    assert topic_configs["max.message.bytes"].value == "3000"
    assert (
        topic_configs["max.message.bytes"].source
        == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    )
    [refused] = produce(broker.bootstrap, topic, [b"z" * 5000])
    assert refused is not None and refused.code() == KafkaError.MSG_SIZE_TOO_LARGE

    # This broker's own value wins over the default.
    incremental(admin, "BROKER", "1", [("message.max.bytes", "100000", SET)])
    broker_configs = describe(admin, "BROKER", "1")
    assert broker_configs["message.max.bytes"].value == "100000"
    assert broker_configs["message.max.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    assert not broker_configs["message.max.bytes"].is_read_only
    assert broker_configs["log.dirs"].is_read_only
    assert produce(broker.bootstrap, topic, [b"z" * 5000]) == [None]

    bad = error_of(lambda: incremental(admin, "BROKER", "1", [("log.dirs", "/elsewhere", SET)]))
    assert bad.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(log.dirs)" in bad.str()
    # Another broker's id, sent to this one (clients route by id, so raw): Kafka's refusal.
    with Admin(broker.bootstrap) as raw:
        body = {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "7",
                    "configs": [{"name": "message.max.bytes", "config_operation": 0, "value": "9"}],
                }
            ],
            "validate_only": False,
        }
        [answer] = raw.node(1).call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (1, 1), body).responses
    assert answer.error_code == ErrorCode.invalid_request
    assert answer.error_message == "Unexpected broker id, expected 1, but received 7"
    bad = error_of(lambda: incremental(admin, "BROKER", "1", [("log.retention.ms", "0", SET)]))
    assert bad.code() == KafkaError.INVALID_REQUEST

    broker.restart()
    broker_configs = describe(admin, "BROKER", "1")
    assert broker_configs["message.max.bytes"].value == "100000"
    topic_configs = describe(admin, "TOPIC", topic)
    assert topic_configs["max.message.bytes"].value == "100000"
    assert topic_configs["max.message.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    incremental(admin, "BROKER", "1", [("message.max.bytes", None, DELETE)])
    assert describe(admin, "TOPIC", topic)["max.message.bytes"].value == "3000"


# The legacy AlterConfigs is what this test is about; confluent-kafka warns on its use.
@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_every_override(
    broker: BrokerProcess, admin: AdminClient
) -> None:
    topic = "alter-legacy"
    create_topic(broker.bootstrap, topic, 1, {"retention.ms": "60000", "segment.bytes": "4096"})
    resource = ConfigResource("TOPIC", topic, set_config={"retention.bytes": "123456"})
    admin.alter_configs([resource])[resource].result(TIMEOUT)
    configs = describe(admin, "TOPIC", topic)
    assert configs["retention.bytes"].value == "123456"
    assert configs["retention.ms"].value == "604800000"  # no longer overridden
    assert configs["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        kp.alter_configs(
            [KpConfigResource(KpConfigResourceType.TOPIC, topic, {"retention.ms": "7000"})]
        )
    finally:
        kp.close()
    configs = describe(admin, "TOPIC", topic)
    assert configs["retention.ms"].value == "7000"
    # kafka-python re-sends the overrides it found (DescribeConfigs first), so they stay.
    assert configs["retention.bytes"].value == "123456"


def test_configs_command_like_kafka_configs(broker: BrokerProcess, admin: AdminClient) -> None:
    topic = "cli-configs"
    create_topic(broker.bootstrap, topic, 1)
    done = configs_cli(
        broker,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--add-config",
        "retention.ms=5000,cleanup.policy=[compact,delete]",
    )
    assert done.stdout == f"Completed updating config for topic {topic}.\n"
    shown = configs_cli(broker, "--describe", "--entity-type", "topics", "--entity-name", topic)
    assert shown.stdout.splitlines() == [
        f"Dynamic configs for topic {topic} are:",
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}",
        "  retention.ms=5000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=5000, "
        "DEFAULT_CONFIG:log.retention.hours=168}",
    ]
    configs_cli(
        broker, "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--delete-config", "retention.ms",
    )  # fmt: skip
    assert describe(admin, "TOPIC", topic)["retention.ms"].value == "604800000"
    every = configs_cli(
        broker, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"
    )
    assert every.stdout.startswith("All configs for broker 1 are:\n")
    assert (
        "  log.segment.bytes=1073741824 sensitive=false "
        "synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}\n"
    ) in every.stdout

    def refused(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oncelog", "configs", "-b", broker.bootstrap, *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    bad = refused(
        "--alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "retention.ms=forever",
    )  # fmt: skip
    assert bad.returncode == 1
    assert bad.stderr.splitlines() == [
        f"Error: INVALID_CONFIG (40): cannot alter '{topic}': "
        "Invalid value 'forever' for configuration retention.ms"
    ]
    static = refused(
        "--alter", "--entity-type", "brokers", "--entity-name", "1", "--add-config", "log.dirs=/x"
    )
    assert static.returncode == 1
    assert "Cannot update these configs dynamically: Set(log.dirs)" in static.stderr
    usage = refused("--alter", "--entity-type", "topics", "--entity-name", topic)
    assert usage.returncode == 2
    assert usage.stderr == "Error: --alter needs --add-config or --delete-config\n"
    usage = refused("--alter", "--entity-type", "topics", "--entity-default", "--add-config", "a=b")
    assert usage.returncode == 2


def test_bad_alter_requests_get_kafkas_typed_errors(broker: BrokerProcess) -> None:
    create_topic(broker.bootstrap, "bad-alter", 1)

    def resource(kind: int, name: str, *configs: tuple[str, int, str | None]) -> dict[str, object]:
        return {
            "resource_type": kind,
            "resource_name": name,
            "configs": [{"name": k, "config_operation": op, "value": v} for k, op, v in configs],
        }

    requests = [
        resource(99, "x", ("a", 0, "1")),
        # Checked before the topic is looked up, so these need not exist.
        resource(2, "t1", ("retention.ms", 7, "1")),
        resource(2, "t2", ("retention.ms", 0, None)),
        resource(2, "t3", ("retention.ms", 0, "1"), ("retention.ms", 1, None)),
        resource(4, "abc", ("message.max.bytes", 0, "1")),
        resource(2, "no/such topic", ("retention.ms", 0, "1")),
        resource(2, "bad-alter", ("cleanup.policy", 2, "sometimes")),
        resource(8, "1", ("kafka.server", 0, "DEBUG")),
    ]
    with Admin(broker.bootstrap) as raw:
        body = {"resources": requests, "validate_only": False}
        answers = raw.node(1).call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (1, 1), body).responses
        twice = {"resources": [requests[1], requests[1]], "validate_only": False}
        doubled = raw.node(1).call(ApiKey.INCREMENTAL_ALTER_CONFIGS, (1, 1), twice).responses
    assert [(a.error_code, a.error_message) for a in answers] == [
        (ErrorCode.invalid_request, "Unknown resource type 99"),
        (ErrorCode.invalid_request, "Unknown operations type 7"),
        (ErrorCode.invalid_request, "Null value not supported for : retention.ms"),
        (ErrorCode.invalid_request, "Error due to duplicate config keys"),
        (ErrorCode.invalid_request, "Node id must be an integer, but it is: abc"),
        (ErrorCode.unknown_topic_or_partition, "Topic no/such topic does not exist"),
        (
            ErrorCode.invalid_config,
            "Invalid value sometimes for configuration cleanup.policy: "
            "String must be one of: compact, delete",
        ),
        (ErrorCode.invalid_request, "Unknown resource type 8"),
    ]
    assert [a.error_message for a in doubled] == ["Each resource must appear at most once."] * 2
    assert broker.alive()
