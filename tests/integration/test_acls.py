"""The ACL authorizer with real clients (confluent-kafka, kafka-python, aiokafka).

A PLAINTEXT connection is Kafka's `User:ANONYMOUS`. Each test grants that principal ACLs
while it is a super user, restarts the broker without `super.users` (the ACLs persist in the
metadata image), runs clients that may do some things and not others, then restarts as a
super user again to check that nothing the refused requests sent was stored.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic

ANON = "User:ANONYMOUS"
STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TIMEOUT = 30.0


def allow(
    rtype: ResourceType,
    name: str,
    op: AclOperation,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, ANON, "*", op, AclPermissionType.ALLOW)


#: What a transactional producer on topic `a` with id `tx-a` needs (as in Kafka), plus a
#: consumer in group `g-a` that reads `a` and commits offsets in the transaction.
GRANTS = [
    allow(ResourceType.TOPIC, "a", AclOperation.WRITE),
    allow(ResourceType.TOPIC, "a", AclOperation.READ),
    allow(ResourceType.TRANSACTIONAL_ID, "tx-a", AclOperation.WRITE),
    allow(ResourceType.GROUP, "g-a", AclOperation.READ),
]


def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap, "log_level": 0})


def as_super_user(broker: BrokerProcess) -> None:
    broker.overrides["super.users"] = ANON
    broker.restart()


def as_restricted_user(broker: BrokerProcess) -> None:
    broker.overrides["super.users"] = "User:admin"
    broker.restart()


@pytest.fixture
def secured(broker_factory: type[BrokerProcess]) -> Iterator[BrokerProcess]:
    """Topics a and b exist, GRANTS are stored; the client is no longer a super user."""
    broker = broker_factory(
        overrides={"authorizer.class.name": STANDARD, "super.users": ANON}
    ).start()
    create_topic(broker.bootstrap, "a", 2)
    create_topic(broker.bootstrap, "b", 2)
    client = admin(broker)
    for future in client.create_acls(GRANTS, request_timeout=TIMEOUT).values():
        assert future.result() is None
    as_restricted_user(broker)
    yield broker


def end_offsets(broker: BrokerProcess, topic: str, partitions: int = 2) -> list[int]:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "inspect"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def error_code(exc: KafkaException) -> int:
    return int(exc.args[0].code())


def test_confluent_transactions_only_where_allowed(secured: BrokerProcess) -> None:
    bootstrap = secured.bootstrap
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-a"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("a", key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)

    # Another topic in the same transaction: TOPIC_AUTHORIZATION_FAILED, nothing stored.
    producer.begin_transaction()
    failures: list[KafkaError] = []
    producer.produce("b", value=b"x", partition=0, on_delivery=lambda e, _m: failures.append(e))
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(TIMEOUT)
    codes = {error_code(refused.value)} | {e.code() for e in failures if e is not None}
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes

    # Another transactional id: TRANSACTIONAL_ID_AUTHORIZATION_FAILED.
    other = Producer({"bootstrap.servers": bootstrap, "transactional.id": "tx-b"})
    with pytest.raises(KafkaException) as denied:
        other.init_transactions(TIMEOUT)
    assert error_code(denied.value) == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    # A group it may not Read: GROUP_AUTHORIZATION_FAILED.
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g-b", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe(["a"])
    try:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is not None
        assert message.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    # Metadata does not reveal b; asked by name it is TOPIC_AUTHORIZATION_FAILED.
    client = admin(secured)
    listed = client.list_topics(timeout=TIMEOUT)
    assert set(listed.topics) == {"a"}
    named = client.list_topics("b", timeout=TIMEOUT)
    assert named.topics["b"].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    as_super_user(secured)
    assert sum(end_offsets(secured, "a")) == 10 + 2  # ten records, a commit marker each
    assert end_offsets(secured, "b") == [0, 0]
    client = admin(secured)
    groups = client.list_consumer_groups(request_timeout=TIMEOUT).result()
    assert "g-b" not in {g.group_id for g in groups.valid}


def test_kafka_python_refused_where_not_allowed(secured: BrokerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import (
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
    )

    producer = KafkaProducer(bootstrap_servers=secured.bootstrap, transactional_id="tx-a")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(4):
        producer.send("a", value=b"kp%d" % i, partition=i % 2)
    producer.commit_transaction()
    producer.close()

    plain = KafkaProducer(bootstrap_servers=secured.bootstrap, max_block_ms=5000)
    with pytest.raises(TopicAuthorizationFailedError):
        plain.send("b", value=b"nope", partition=0).get(timeout=TIMEOUT)
    plain.close(timeout=5)

    other = KafkaProducer(bootstrap_servers=secured.bootstrap, transactional_id="tx-other")
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        other.init_transactions()
    other.close(timeout=5)

    consumer = KafkaConsumer(
        bootstrap_servers=secured.bootstrap, group_id="g-b", auto_offset_reset="earliest"
    )
    consumer.subscribe(["a"])
    with pytest.raises(GroupAuthorizationFailedError):
        consumer.poll(timeout_ms=10_000)
    consumer.close()

    as_super_user(secured)
    assert sum(end_offsets(secured, "a")) == 4 + 2
    assert end_offsets(secured, "b") == [0, 0]


def test_aiokafka_transactions_and_refusals(secured: BrokerProcess) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import (
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailed,
    )

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=secured.bootstrap, transactional_id="tx-a")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(6):
                    await producer.send_and_wait("a", b"ai%d" % i, partition=i % 2)
        finally:
            await producer.stop()

        other = AIOKafkaProducer(bootstrap_servers=secured.bootstrap, transactional_id="tx-c")
        with pytest.raises(TransactionalIdAuthorizationFailed):
            await other.start()
        await other.stop()

        idem = AIOKafkaProducer(bootstrap_servers=secured.bootstrap, acks="all")
        await idem.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await idem.send_and_wait("b", b"nope", partition=1)
        finally:
            await idem.stop()

    asyncio.run(run())
    as_super_user(secured)
    assert sum(end_offsets(secured, "a")) == 6 + 2
    assert end_offsets(secured, "b") == [0, 0]


def test_acl_admin_requests_persist_and_need_cluster_rights(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory(
        overrides={"authorizer.class.name": STANDARD, "super.users": ANON}
    ).start()
    client = admin(broker)
    bindings = [
        allow(ResourceType.TOPIC, "orders-", AclOperation.READ, ResourcePatternType.PREFIXED),
        AclBinding(
            ResourceType.TOPIC, "orders-secret", ResourcePatternType.LITERAL, ANON, "*",
            AclOperation.READ, AclPermissionType.DENY,
        ),
        allow(ResourceType.GROUP, "*", AclOperation.DESCRIBE),
    ]  # fmt: skip
    for future in client.create_acls(bindings, request_timeout=TIMEOUT).values():
        assert future.result() is None
    everything = AclBindingFilter(
        ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    assert set(client.describe_acls(everything, request_timeout=TIMEOUT).result()) == set(bindings)
    # MATCH: what applies to topic orders-secret (the prefix and the literal deny).
    match = AclBindingFilter(
        ResourceType.TOPIC, "orders-secret", ResourcePatternType.MATCH, None, None,
        AclOperation.ANY, AclPermissionType.ANY,
    )  # fmt: skip
    assert set(client.describe_acls(match, request_timeout=TIMEOUT).result()) == set(bindings[:2])

    broker.restart()  # the ACLs are in the metadata image
    client = admin(broker)
    assert set(client.describe_acls(everything, request_timeout=TIMEOUT).result()) == set(bindings)
    deny_filter = AclBindingFilter(
        ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
        AclPermissionType.DENY,
    )  # fmt: skip
    deleted = next(iter(client.delete_acls([deny_filter], request_timeout=TIMEOUT).values()))
    assert deleted.result() == [bindings[1]]
    left = set(client.describe_acls(everything, request_timeout=TIMEOUT).result())
    assert left == {bindings[0], bindings[2]}

    # Without Alter on the cluster, CreateAcls is CLUSTER_AUTHORIZATION_FAILED.
    as_restricted_user(broker)
    client = admin(broker)
    for future in client.create_acls(
        [allow(ResourceType.TOPIC, "x", AclOperation.ALL)], request_timeout=TIMEOUT
    ).values():
        with pytest.raises(KafkaException) as refused:
            future.result()
        assert error_code(refused.value) == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    as_super_user(broker)
    client = admin(broker)
    left = set(client.describe_acls(everything, request_timeout=TIMEOUT).result())
    assert left == {bindings[0], bindings[2]}


def test_without_authorizer_acl_requests_are_security_disabled(
    broker_factory: type[BrokerProcess],
) -> None:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    broker = broker_factory().start()
    client = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        acl_filter = ACLFilter(
            principal=None,
            host="*",
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                KpResourceType.ANY, None, ACLResourcePatternType.ANY
            ),
        )
        with pytest.raises(SecurityDisabledError):
            client.describe_acls(acl_filter)
    finally:
        client.close()
    # librdkafka reports DescribeAcls' SECURITY_DISABLED as an empty listing; the tool does not.
    listed = subprocess.run(
        [sys.executable, "-m", "oncelog", "acls", "-b", broker.bootstrap, "--list"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert listed.returncode == 1
    (line,) = listed.stderr.strip().splitlines()
    assert line.startswith("Error: SECURITY_DISABLED (54)")


def test_unknown_authorizer_class_is_a_one_line_startup_error(tmp_path: object) -> None:
    result = subprocess.run(
        [
            sys.executable, "-m", "oncelog", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(tmp_path), "--override", "authorizer.class.name=com.example.Mine",
        ],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1, result.stderr
    assert "authorizer.class.name" in errors[0] and "Traceback" not in result.stderr


def test_oncelog_acls_cli(broker_factory: type[BrokerProcess], tmp_path: Path) -> None:
    broker = broker_factory(
        overrides={"authorizer.class.name": STANDARD, "super.users": ANON}
    ).start()

    def acls(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "oncelog", "acls", "-b", broker.bootstrap, *args],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip

    added = acls(
        "--add", "--allow-principal", "User:alice", "--producer", "--topic", "a",
        "--transactional-id", "tx-a",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    listed = acls("--list", "--topic", "a")
    assert listed.returncode == 0, listed.stderr
    assert "ResourcePattern(resourceType=TOPIC, name=a, patternType=LITERAL)" in listed.stdout
    for op in ("WRITE", "DESCRIBE", "CREATE"):
        assert f"(principal=User:alice, host=*, operation={op}, permissionType=ALLOW)" in (
            listed.stdout
        )
    everything = acls("--list").stdout
    assert "name=tx-a" in everything

    removed = acls("--remove", "--topic", "a", "--force")
    assert removed.returncode == 0, removed.stderr
    assert "name=a," not in acls("--list").stdout
    assert "name=tx-a" in acls("--list").stdout

    bad = acls("--add", "--allow-principal", "User:alice", "--group", "g", "--operation", "Write")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "Error: ResourceType GROUP only supports operations READ, DESCRIBE, DELETE, ALL"
    ]

    # --command-config is read as the other admin tools read it.
    settings = tmp_path / "client.properties"
    settings.write_text("# the tool's client\nsecurity.protocol=PLAINTEXT\nclient.id=acl-tool\n")
    configured = acls("--list", "--topic", "a", "--command-config", str(settings))
    assert configured.returncode == 0, configured.stderr
    assert "name=a," not in configured.stdout and configured.stderr == ""
    settings.write_text("security.protocol PLAINTEXT\n")
    refused = acls("--list", "--command-config", str(settings))
    assert (refused.returncode, refused.stderr.strip().splitlines()) == (
        2,
        ["Error: --command-config: not key=value: security.protocol PLAINTEXT"],
    )
    missing = acls("--list", "--command-config", str(tmp_path / "none.properties"))
    assert (missing.returncode, missing.stderr.strip().splitlines()) == (
        2,
        ["Error: cannot read --command-config: No such file or directory"],
    )


def test_bad_acl_requests_get_invalid_request(broker_factory: type[BrokerProcess]) -> None:
    from kio.schema.create_acls.v3.request import AclCreation, CreateAclsRequest
    from kio.schema.describe_acls.v3.request import DescribeAclsRequest
    from kio.static.primitive import i8

    from oncelog.protocol.codec import encode_entity
    from tests.integration.rawclient import RawClient

    broker = broker_factory(
        overrides={"authorizer.class.name": STANDARD, "super.users": ANON}
    ).start()

    def creation(rtype: int, name: str, pattern: int, principal: str, op: int) -> AclCreation:
        return AclCreation(
            resource_type=i8(rtype), resource_name=name, resource_pattern_type=i8(pattern),
            principal=principal, host="*", operation=i8(op), permission_type=i8(3),
        )  # fmt: skip

    creations = (
        creation(99, "t", 3, ANON, 3),  # unknown resource type
        creation(2, "t", 2, ANON, 3),  # MATCH is a filter, not a pattern
        creation(2, "", 3, ANON, 3),  # empty name
        creation(2, "t", 3, "alice", 3),  # principal without a type
        creation(4, "other", 3, ANON, 7),  # the cluster is kafka-cluster
        creation(2, "t", 3, ANON, 1),  # ANY is not an operation
        creation(2, "t", 3, ANON, 3),  # fine
    )
    with RawClient(broker.port) as client:
        answer = client.call(30, 3, encode_entity(CreateAclsRequest(creations=creations)))
        assert [r.error_code for r in answer.results] == [42] * 6 + [0]
        describe = DescribeAclsRequest(
            resource_type_filter=i8(2), resource_name_filter=None, pattern_type_filter=i8(1),
            principal_filter=None, host_filter=None, operation=i8(77), permission_type=i8(1),
        )  # fmt: skip
        answer = client.call(29, 3, encode_entity(describe))
        assert answer.error_code == 42
        everything = DescribeAclsRequest(
            resource_type_filter=i8(1), resource_name_filter=None, pattern_type_filter=i8(1),
            principal_filter=None, host_filter=None, operation=i8(1), permission_type=i8(1),
        )  # fmt: skip
        answer = client.call(29, 3, encode_entity(everything))
        assert answer.error_code == 0
        assert [(r.resource_type, r.resource_name) for r in answer.resources] == [(2, "t")]
    assert broker.alive()


def test_partition_reassignments_need_rights_on_the_cluster(secured: BrokerProcess) -> None:
    """Alter on the cluster to move partitions, Describe to list the moves, as Kafka."""
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import ClusterAuthorizationFailedError

    client = KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        with pytest.raises(ClusterAuthorizationFailedError):
            client.alter_partition_reassignments({KafkaTopicPartition("a", 0): [1]})
        with pytest.raises(ClusterAuthorizationFailedError):
            client.list_partition_reassignments()
    finally:
        client.close()
    as_super_user(secured)
    client = KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        assert client.list_partition_reassignments() == {}
    finally:
        client.close()
