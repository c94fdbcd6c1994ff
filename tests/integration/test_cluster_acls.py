"""ACLs in a cluster: created through one broker, stored in etcd, enforced by every broker.

Two brokers and a real etcd. With `allow.everyone.if.no.acl.found=true` the PLAINTEXT
principal (User:ANONYMOUS) may do anything that has no ACL, including CreateAcls; a DENY it
creates through broker 1 is then listed by DescribeAcls on each broker (asked directly) and
refuses its produce requests to partitions led by either broker; deleted through broker 2,
it lets them through again everywhere.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from kio.schema.describe_acls.v3.request import DescribeAclsRequest
from kio.static.primitive import i8

from oncelog.protocol.codec import encode_entity
from tests.cluster_process import Cluster
from tests.integration.rawclient import RawClient

DESCRIBE_ACLS = 29
TIMEOUT = 30.0
DENY_WRITE = AclBinding(
    ResourceType.TOPIC, "t", ResourcePatternType.LITERAL, "User:ANONYMOUS", "*",
    AclOperation.WRITE, AclPermissionType.DENY,
)  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    base: Path = tmp_path_factory.mktemp("acls")
    overrides = {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
    }
    with Cluster(base, size=2, overrides=overrides) as c:
        yield c


def acls_on(port: int) -> set[tuple[int, str, str, int, int]]:
    """Every ACL broker `port` enforces, by DescribeAcls sent to it alone."""
    body = encode_entity(
        DescribeAclsRequest(
            resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1),
            principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1),
        )
    )  # fmt: skip
    with RawClient(port) as client:
        answer = client.call(DESCRIBE_ACLS, 3, body)
    assert answer.error_code == 0, answer
    return {
        (r.resource_type, r.resource_name, a.principal, a.operation, a.permission_type)
        for r in answer.resources
        for a in r.acls
    }


def produce_errors(cluster: Cluster) -> dict[int, int | None]:
    """Produce one record to each partition of t; each delivery's error code (None: ok)."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "message.timeout.ms": 10_000})
    outcome: dict[int, int | None] = {}

    def report(err: KafkaError | None, msg: object) -> None:
        outcome[msg.partition()] = None if err is None else err.code()  # type: ignore[attr-defined]

    for partition in (0, 1):
        producer.produce("t", value=b"x", partition=partition, on_delivery=report)
    assert producer.flush(TIMEOUT) == 0
    return outcome


def test_an_acl_created_on_one_broker_is_enforced_by_all(cluster: Cluster) -> None:
    # Partition 0 led by broker 1, partition 1 by broker 2.
    cluster.create_topic("t", assignment=[[1, 2], [2, 1]])
    # Metadata may come from a broker whose view of the new topic lags a moment.
    cluster.wait_for(
        lambda: {cluster.leader("t", 0), cluster.leader("t", 1)} == {1, 2}, 15, "the leaders"
    )
    assert produce_errors(cluster) == {0: None, 1: None}

    admin = cluster.admin(via=[1])
    for future in admin.create_acls([DENY_WRITE], request_timeout=TIMEOUT).values():
        assert future.result() is None
    expected = {(2, "t", "User:ANONYMOUS", 4, 2)}
    cluster.wait_for(
        lambda: all(acls_on(b.port) == expected for b in cluster.brokers.values()),
        15,
        "every broker to have the ACL",
    )
    denied = KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert produce_errors(cluster) == {0: denied, 1: denied}

    admin2 = cluster.admin(via=[2])
    match_all = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    for future in admin2.delete_acls([match_all], request_timeout=TIMEOUT).values():
        assert future.result() == [DENY_WRITE]
    cluster.wait_for(
        lambda: all(acls_on(b.port) == set() for b in cluster.brokers.values()),
        15,
        "every broker to drop the ACL",
    )
    assert produce_errors(cluster) == {0: None, 1: None}

    # A restarted broker reads the ACLs from etcd again.
    for future in admin.create_acls([DENY_WRITE], request_timeout=TIMEOUT).values():
        assert future.result() is None
    cluster.brokers[2].restart()
    cluster.wait_for(lambda: acls_on(cluster.brokers[2].port) == expected, 15, "the ACL")
