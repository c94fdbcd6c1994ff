"""ACLs for SASL users, with confluent-kafka, kafka-python and aiokafka.

`alice` may Write and Read topics `a-*`, Write transactional ids `tx-a*` and Read groups
`g-a*` (PREFIXED ACLs, what a transactional producer and its consumer need, as in Kafka).
Each client runs a transaction there, and gets TOPIC_, TRANSACTIONAL_ID_ and
GROUP_AUTHORIZATION_FAILED on `b-*`, `tx-b*` and `g-b*`; Metadata does not show it `b-*`.
The super user `admin` then checks that nothing the refused requests sent was stored.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from tests.integration.secure_broker import SecureBroker, plain_jaas

USERS = {"admin": "admin-secret", "alice": "alice-pw", "carol": "carol-pw"}
TIMEOUT = 30.0
PREFIXED = ResourcePatternType.PREFIXED


def allow(rtype: ResourceType, prefix: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, prefix, PREFIXED, "User:alice", "*", op, AclPermissionType.ALLOW)


GRANTS = [
    allow(ResourceType.TOPIC, "a-", AclOperation.WRITE),
    allow(ResourceType.TOPIC, "a-", AclOperation.READ),
    allow(ResourceType.TRANSACTIONAL_ID, "tx-a", AclOperation.WRITE),
    allow(ResourceType.GROUP, "g-a", AclOperation.READ),
]


def conf(broker: SecureBroker, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base: Path = tmp_path_factory.mktemp("acls-sasl")
    proc = SecureBroker(
        base / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
            "offsets.topic.num.partitions": "2",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
    ).start()
    try:
        admin = AdminClient(conf(proc, "admin"))
        for future in admin.create_acls(GRANTS, request_timeout=TIMEOUT).values():
            assert future.result() is None
        del admin  # not left reconnecting after the broker stops
        yield proc
    finally:
        proc.kill()


def make_topics(broker: SecureBroker, *names: str) -> None:
    admin = AdminClient(conf(broker, "admin"))
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(TIMEOUT)


def log_end(broker: SecureBroker, topic: str) -> int:
    """The sum of the partitions' end offsets, read by the super user."""
    consumer = Consumer({**conf(broker, "admin"), "group.id": "inspector"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT)[1]
            for p in (0, 1)
        )
    finally:
        consumer.close()


def group_ids(broker: SecureBroker) -> set[str]:
    admin = AdminClient(conf(broker, "admin"))
    listed = admin.list_consumer_groups(request_timeout=TIMEOUT).result()
    return {g.group_id for g in listed.valid}


def names(client: str) -> tuple[str, str]:
    suffix = f"{client}-{uuid.uuid4().hex[:6]}"
    return f"a-{suffix}", f"b-{suffix}"


def test_confluent(broker: SecureBroker) -> None:
    good, bad = names("ck")
    make_topics(broker, good, bad)
    alice = conf(broker, "alice")

    producer = Producer({**alice, "transactional.id": f"tx-a-{good}"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(8):
        producer.produce(good, value=b"v%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT)

    producer.begin_transaction()
    reports: list[KafkaError | None] = []
    producer.produce(bad, value=b"x", partition=0, on_delivery=lambda e, _m: reports.append(e))
    with pytest.raises(KafkaException) as refused:
        producer.commit_transaction(TIMEOUT)
    codes = {refused.value.args[0].code()} | {e.code() for e in reports if e is not None}
    assert KafkaError.TOPIC_AUTHORIZATION_FAILED in codes, codes

    other = Producer({**alice, "transactional.id": f"tx-b-{good}"})
    with pytest.raises(KafkaException) as denied:
        other.init_transactions(TIMEOUT)
    assert denied.value.args[0].code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    consumer = Consumer({**alice, "group.id": f"g-b-{good}", "auto.offset.reset": "earliest"})
    consumer.subscribe([good])
    try:
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is not None
        assert message.error().code() == KafkaError.GROUP_AUTHORIZATION_FAILED
    finally:
        consumer.close()

    listing = AdminClient(alice).list_topics(timeout=TIMEOUT).topics
    assert good in listing and bad not in listing
    admin_listing = AdminClient(conf(broker, "admin")).list_topics(timeout=TIMEOUT).topics
    assert bad in admin_listing

    assert log_end(broker, good) == 8 + 2
    assert log_end(broker, bad) == 0
    assert f"g-b-{good}" not in group_ids(broker)


def test_kafka_python(broker: SecureBroker) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.errors import (
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
    )

    good, bad = names("kp")
    make_topics(broker, good, bad)
    alice = {
        "bootstrap_servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }
    producer = KafkaProducer(**alice, transactional_id=f"tx-a-{good}")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(6):
        producer.send(good, value=b"kp%d" % i, partition=i % 2)
    producer.commit_transaction()
    producer.close()

    plain = KafkaProducer(**alice, max_block_ms=5000)
    with pytest.raises(TopicAuthorizationFailedError):
        plain.send(bad, value=b"nope", partition=0).get(timeout=TIMEOUT)
    plain.close(timeout=5)

    other = KafkaProducer(**alice, transactional_id=f"tx-b-{good}")
    with pytest.raises(TransactionalIdAuthorizationFailedError):
        other.init_transactions()
    other.close(timeout=5)

    consumer = KafkaConsumer(**alice, group_id=f"g-b-{good}", auto_offset_reset="earliest")
    consumer.subscribe([good])
    with pytest.raises(GroupAuthorizationFailedError):
        consumer.poll(timeout_ms=10_000)
    consumer.close()

    assert log_end(broker, good) == 6 + 2
    assert log_end(broker, bad) == 0
    assert f"g-b-{good}" not in group_ids(broker)


def test_aiokafka(broker: SecureBroker) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.errors import (
        GroupAuthorizationFailedError,
        TopicAuthorizationFailedError,
        TransactionalIdAuthorizationFailed,
    )

    good, bad = names("aio")
    make_topics(broker, good, bad)
    alice = {
        "bootstrap_servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": USERS["alice"],
    }

    async def run() -> None:
        producer = AIOKafkaProducer(**alice, transactional_id=f"tx-a-{good}")
        await producer.start()
        try:
            async with producer.transaction():
                for i in range(4):
                    await producer.send_and_wait(good, b"ai%d" % i, partition=i % 2)
        finally:
            await producer.stop()

        other = AIOKafkaProducer(**alice, transactional_id=f"tx-b-{good}")
        with pytest.raises(TransactionalIdAuthorizationFailed):
            await other.start()
        await other.stop()

        plain = AIOKafkaProducer(**alice)
        await plain.start()
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                await plain.send_and_wait(bad, b"nope", partition=1)
        finally:
            await plain.stop()

        consumer = AIOKafkaConsumer(
            good, **alice, group_id=f"g-b-{good}", auto_offset_reset="earliest"
        )
        try:
            with pytest.raises(GroupAuthorizationFailedError):
                await consumer.start()  # it joins the group at once
                await asyncio.wait_for(consumer.getone(), TIMEOUT)
        finally:
            await consumer.stop()

    asyncio.run(run())
    assert log_end(broker, good) == 4 + 2
    assert log_end(broker, bad) == 0
    assert f"g-b-{good}" not in group_ids(broker)


def test_plaintext_anonymous_sees_nothing(broker: SecureBroker) -> None:
    good, _ = names("anon")
    make_topics(broker, good)
    anonymous = AdminClient({"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")})
    assert good not in anonymous.list_topics(timeout=TIMEOUT).topics
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_of("PLAINTEXT"), "message.timeout.ms": 10_000}
    )
    errors: list[KafkaError | None] = []
    producer.produce(good, value=b"x", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(TIMEOUT)
    assert [e.code() for e in errors if e is not None] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert log_end(broker, good) == 0


def test_authorized_operations(broker: SecureBroker) -> None:
    from confluent_kafka import TopicCollection

    good, _ = names("ops")
    make_topics(broker, good)
    alice = AdminClient(conf(broker, "alice"))
    admin = AdminClient(conf(broker, "admin"))

    described = alice.describe_topics(
        TopicCollection([good]), include_authorized_operations=True, request_timeout=TIMEOUT
    )
    topic = described[good].result()
    # Read and Write on the topic, and the Describe they imply.
    assert set(topic.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.DESCRIBE
    }  # fmt: skip

    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT)
    assert set(cluster.result().authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
        AclOperation.DESCRIBE,
    }  # fmt: skip
    # alice may not Describe the cluster: Kafka answers no operations at all.
    mine = alice.describe_cluster(include_authorized_operations=True, request_timeout=TIMEOUT)
    assert not mine.result().authorized_operations

    # A group alice may Read (Describe implied): its operations as DescribeGroups reports.
    group = f"g-a-{good}"
    consumer = Consumer({**conf(broker, "alice"), "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(good, 0, 0)], asynchronous=False)
    finally:
        consumer.close()
    groups = alice.describe_consumer_groups(
        [group], include_authorized_operations=True, request_timeout=TIMEOUT
    )
    assert set(groups[group].result().authorized_operations) == {
        AclOperation.READ, AclOperation.DESCRIBE
    }  # fmt: skip


def test_idempotent_producer_needs_write_somewhere(broker: SecureBroker) -> None:
    """InitProducerId without a transactional id: IdempotentWrite on the cluster or Write on
    some topic (Kafka >= 2.8). carol may only Describe the topic: CLUSTER_AUTHORIZATION_FAILED."""
    good, _ = names("idem")
    make_topics(broker, good)
    describe = AclBinding(
        ResourceType.TOPIC, good, ResourcePatternType.LITERAL, "User:carol", "*",
        AclOperation.DESCRIBE, AclPermissionType.ALLOW,
    )  # fmt: skip
    admin = AdminClient(conf(broker, "admin"))
    for future in admin.create_acls([describe], request_timeout=TIMEOUT).values():
        assert future.result() is None
    del admin
    fatal: list[KafkaError] = []
    producer = Producer(
        {
            **conf(broker, "carol"),
            "enable.idempotence": True,
            "message.timeout.ms": 10_000,
            "error_cb": fatal.append,
        }
    )
    reports: list[KafkaError | None] = []
    producer.produce(good, value=b"x", partition=0, on_delivery=lambda e, _m: reports.append(e))
    codes = set()
    try:
        producer.flush(TIMEOUT)
    except Exception as exc:  # confluent-kafka raises the fatal error from flush (wrapped)
        raised = exc if isinstance(exc, KafkaException) else exc.__cause__
        assert isinstance(raised, KafkaException), exc
        codes.add(raised.args[0].code())
    codes |= {e.code() for e in fatal} | {e.code() for e in reports if e is not None}
    assert KafkaError.CLUSTER_AUTHORIZATION_FAILED in codes, codes
    assert log_end(broker, good) == 0

    # alice may Write topics a-*: her idempotent producer gets its id and writes.
    alice = Producer({**conf(broker, "alice"), "enable.idempotence": True})
    alice.produce(good, value=b"y", partition=0)
    assert alice.flush(TIMEOUT) == 0
    assert log_end(broker, good) == 1
    # The fatal error's traceback keeps this frame, and its clients, alive in a cycle the
    # collector cannot see (it passes through confluent-kafka's C objects): closed, they do
    # not reconnect to the stopped broker for the rest of the session.
    producer.close()
    alice.close()
