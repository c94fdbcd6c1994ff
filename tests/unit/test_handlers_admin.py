"""The admin APIs' handlers on the in-process broker: topics created, described, grown,
configured and deleted as Metadata and DescribeConfigs then show them; the single node's
answers to elections and reassignments; ApiVersions, DescribeCluster, DescribeLogDirs."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.alter_configs.v2.response import AlterConfigsResponse
from kio.schema.alter_partition_reassignments.v0.response import (
    AlterPartitionReassignmentsResponse,
)
from kio.schema.api_versions.v3.response import ApiVersionsResponse
from kio.schema.create_partitions.v3.response import CreatePartitionsResponse
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.delete_topics.v5.response import DeleteTopicsResponse
from kio.schema.describe_cluster.v1.response import DescribeClusterResponse
from kio.schema.describe_configs.v4.response import DescribeConfigsResponse
from kio.schema.describe_log_dirs.v4.response import DescribeLogDirsResponse
from kio.schema.elect_leaders.v2.response import ElectLeadersResponse
from kio.schema.incremental_alter_configs.v1.response import IncrementalAlterConfigsResponse
from kio.schema.list_partition_reassignments.v0.response import (
    ListPartitionReassignmentsResponse,
)
from kio.schema.metadata.v12.response import MetadataResponse

from oncelog.errors import ErrorCode
from oncelog.protocol.registry import SUPPORTED_VERSIONS, ApiKey
from tests.harness.in_process import InProcessBroker, build_broker, covers

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
SET = 0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = build_broker(tmp_path)
    yield b
    b.close()


def create(broker: InProcessBroker, name: str, partitions: int = 1, **configs: str) -> object:
    return broker.ask(
        CreateTopicsResponse,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "timeout": timedelta(seconds=5),
            "validate_only": False,
        },
    )


def metadata(broker: InProcessBroker, *names: str) -> MetadataResponse:
    return broker.ask(
        MetadataResponse,
        {
            "topics": [{"name": n, "topic_id": None} for n in names],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )


def topic_config(broker: InProcessBroker, topic: str, key: str) -> str | None:
    answer = broker.ask(
        DescribeConfigsResponse,
        {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": topic,
                    "configuration_keys": [key],
                }
            ]
        },
    )
    (result,) = answer.results
    assert result.error_code == ErrorCode.none, result
    (entry,) = result.configs
    return entry.value


@covers(ApiKey.CREATE_TOPICS, ApiKey.METADATA)
def test_a_created_topic_is_in_metadata(broker: InProcessBroker) -> None:
    answer = create(broker, "orders", 3)
    assert isinstance(answer, CreateTopicsResponse)
    (topic,) = answer.topics
    assert (topic.error_code, topic.num_partitions) == (ErrorCode.none, 3)
    (described,) = metadata(broker, "orders").topics
    assert described.error_code == ErrorCode.none
    assert sorted(p.partition_index for p in described.partitions) == [0, 1, 2]
    assert {p.leader_id for p in described.partitions} == {1}


@covers(ApiKey.CREATE_TOPICS)
def test_create_topics_refuses_a_topic_that_exists(broker: InProcessBroker) -> None:
    create(broker, "orders")
    answer = create(broker, "orders")
    assert isinstance(answer, CreateTopicsResponse)
    assert answer.topics[0].error_code == ErrorCode.topic_already_exists


@covers(ApiKey.METADATA)
def test_metadata_of_an_unknown_topic(broker: InProcessBroker) -> None:
    (topic,) = metadata(broker, "nowhere").topics
    assert topic.error_code == ErrorCode.unknown_topic_or_partition
    assert [b.node_id for b in metadata(broker).brokers] == [1]


@covers(ApiKey.DELETE_TOPICS)
def test_a_deleted_topic_leaves_metadata(broker: InProcessBroker) -> None:
    create(broker, "orders")
    answer = broker.ask(
        DeleteTopicsResponse,
        {"topic_names": ["orders", "nowhere"], "timeout": timedelta(seconds=5)},
    )
    codes = {r.name: r.error_code for r in answer.responses}
    assert codes == {"orders": ErrorCode.none, "nowhere": ErrorCode.unknown_topic_or_partition}
    assert metadata(broker, "orders").topics[0].error_code == (ErrorCode.unknown_topic_or_partition)


@covers(ApiKey.CREATE_PARTITIONS)
def test_create_partitions_grows_a_topic(broker: InProcessBroker) -> None:
    create(broker, "orders", 1)
    answer = broker.ask(
        CreatePartitionsResponse,
        {
            "topics": [{"name": "orders", "count": 4, "assignments": None}],
            "timeout": timedelta(seconds=5),
            "validate_only": False,
        },
    )
    assert answer.results[0].error_code == ErrorCode.none, answer
    assert len(metadata(broker, "orders").topics[0].partitions) == 4
    shrink = broker.ask(
        CreatePartitionsResponse,
        {
            "topics": [{"name": "orders", "count": 2, "assignments": None}],
            "timeout": timedelta(seconds=5),
            "validate_only": False,
        },
    )
    assert shrink.results[0].error_code == ErrorCode.invalid_partitions


@covers(ApiKey.DESCRIBE_CONFIGS)
def test_describe_configs_of_a_topic_override_and_an_unknown_topic(
    broker: InProcessBroker,
) -> None:
    create(broker, "orders", 1, **{"retention.ms": "1234"})
    assert topic_config(broker, "orders", "retention.ms") == "1234"
    answer = broker.ask(
        DescribeConfigsResponse,
        {"resources": [{"resource_type": TOPIC_RESOURCE, "resource_name": "nowhere"}]},
    )
    assert answer.results[0].error_code == ErrorCode.unknown_topic_or_partition


@covers(ApiKey.ALTER_CONFIGS)
def test_alter_configs_sets_a_topic_config(broker: InProcessBroker) -> None:
    create(broker, "orders")
    answer = broker.ask(
        AlterConfigsResponse,
        {
            "resources": [
                {
                    "resource_type": TOPIC_RESOURCE,
                    "resource_name": "orders",
                    "configs": [{"name": "cleanup.policy", "value": "compact"}],
                }
            ],
            "validate_only": False,
        },
    )
    assert answer.responses[0].error_code == ErrorCode.none, answer
    assert topic_config(broker, "orders", "cleanup.policy") == "compact"


@covers(ApiKey.INCREMENTAL_ALTER_CONFIGS)
def test_incremental_alter_configs_sets_one_key_and_refuses_an_unknown_one(
    broker: InProcessBroker,
) -> None:
    create(broker, "orders")

    def alter(name: str, value: str) -> IncrementalAlterConfigsResponse:
        return broker.ask(
            IncrementalAlterConfigsResponse,
            {
                "resources": [
                    {
                        "resource_type": TOPIC_RESOURCE,
                        "resource_name": "orders",
                        "configs": [{"name": name, "config_operation": SET, "value": value}],
                    }
                ],
                "validate_only": False,
            },
        )

    assert alter("retention.ms", "5000").responses[0].error_code == ErrorCode.none
    assert topic_config(broker, "orders", "retention.ms") == "5000"
    assert alter("no.such.key", "1").responses[0].error_code == ErrorCode.invalid_config


@covers(ApiKey.API_VERSIONS)
def test_api_versions_advertises_the_registry(broker: InProcessBroker) -> None:
    answer = broker.ask(
        ApiVersionsResponse, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert answer.error_code == ErrorCode.none
    advertised = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert advertised == {int(k): v for k, v in SUPPORTED_VERSIONS.items()}


@covers(ApiKey.DESCRIBE_CLUSTER)
def test_describe_cluster_names_this_broker(broker: InProcessBroker) -> None:
    answer = broker.ask(
        DescribeClusterResponse,
        {"include_cluster_authorized_operations": False, "endpoint_type": 1},
    )
    assert answer.error_code == ErrorCode.none
    assert (answer.controller_id, [b.broker_id for b in answer.brokers]) == (1, [1])
    controllers = broker.ask(
        DescribeClusterResponse,
        {"include_cluster_authorized_operations": False, "endpoint_type": 2},
    )
    assert controllers.error_code == ErrorCode.unsupported_endpoint_type


@covers(ApiKey.DESCRIBE_LOG_DIRS)
def test_describe_log_dirs_lists_a_topic_partitions(broker: InProcessBroker) -> None:
    create(broker, "orders", 2)
    answer = broker.ask(
        DescribeLogDirsResponse,
        {"topics": [{"topic": "orders", "partitions": [0, 1]}]},
    )
    assert answer.error_code == ErrorCode.none
    (log_dir,) = answer.results
    assert log_dir.error_code == ErrorCode.none
    assert [(t.name, sorted(p.partition_index for p in t.partitions)) for t in log_dir.topics] == [
        ("orders", [0, 1])
    ]


@covers(ApiKey.ELECT_LEADERS)
def test_elect_leaders_on_one_node_is_not_needed(broker: InProcessBroker) -> None:
    create(broker, "orders")
    answer = broker.ask(
        ElectLeadersResponse,
        {
            "election_type": 0,
            "topic_partitions": [
                {"topic": "orders", "partitions": [0]},
                {"topic": "nowhere", "partitions": [0]},
            ],
            "timeout": timedelta(seconds=5),
        },
    )
    assert answer.error_code == ErrorCode.none
    codes = {
        (t.topic, p.partition_id): p.error_code
        for t in answer.replica_election_results
        for p in t.partition_result
    }
    assert codes == {
        ("orders", 0): ErrorCode.election_not_needed,
        ("nowhere", 0): ErrorCode.unknown_topic_or_partition,
    }


@covers(ApiKey.ALTER_PARTITION_REASSIGNMENTS)
def test_alter_partition_reassignments_on_one_node(broker: InProcessBroker) -> None:
    create(broker, "orders")
    answer = broker.ask(
        AlterPartitionReassignmentsResponse,
        {
            "timeout": timedelta(seconds=5),
            "topics": [
                {
                    "name": "orders",
                    "partitions": [
                        {"partition_index": 0, "replicas": [1]},
                        {"partition_index": 1, "replicas": None},
                    ],
                }
            ],
        },
    )
    assert answer.error_code == ErrorCode.none
    codes = {p.partition_index: p.error_code for p in answer.responses[0].partitions}
    assert codes == {0: ErrorCode.none, 1: ErrorCode.unknown_topic_or_partition}


@covers(ApiKey.LIST_PARTITION_REASSIGNMENTS)
def test_list_partition_reassignments_on_one_node_is_empty(broker: InProcessBroker) -> None:
    create(broker, "orders")
    answer = broker.ask(
        ListPartitionReassignmentsResponse, {"timeout": timedelta(seconds=5), "topics": None}
    )
    assert (answer.error_code, answer.topics) == (ErrorCode.none, ())
