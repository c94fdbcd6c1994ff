"""A 3-broker cluster whose only listener is SASL_PLAINTEXT: the brokers' own connections
(replica fetchers, transaction markers, KIP-890 verification) log in to each other with
SASL/PLAIN from the listener's JAAS config, so replication, acks=all and transactions work;
SCRAM credentials altered through one broker are seen by every broker (etcd)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from oncelog.config import BrokerConfig
from oncelog.server.inter_broker import (
    BrokerChannel,
    ChannelSecurity,
    PeerUnavailable,
    inter_broker_security,
)
from tests.integration.secure_broker import SecureBroker, SecureCluster, plain_jaas, wait_for

LISTENER = "SASL_PLAINTEXT"
USERS = {"broker": "broker-secret", "admin": "admin-secret"}
METADATA_BODY = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


class SaslCluster(SecureCluster):
    def __init__(self, base: Path) -> None:
        super().__init__(
            base,
            {
                "listeners": f"{LISTENER}://127.0.0.1:0",
                "inter.broker.listener.name": LISTENER,
                "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(
                    USERS, login=("broker", USERS["broker"])
                ),
                "transaction.state.log.num.partitions": "3",
                "offsets.topic.num.partitions": "3",
            },
        )

    def conf(self, nodes: tuple[int, ...] = (1, 2, 3), **login: str) -> dict[str, object]:
        user = login.get("user", "admin")
        return {
            "bootstrap.servers": self.bootstrap_of(LISTENER, nodes),
            "security.protocol": LISTENER,
            "sasl.mechanism": login.get("mechanism", "PLAIN"),
            "sasl.username": user,
            "sasl.password": login.get("password", USERS.get(user, "")),
        }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslCluster]:
    running = SaslCluster(tmp_path_factory.mktemp("sasl-cluster"))
    running.start()
    try:
        running.wait_brokers_known(lambda node: running.conf(nodes=(node,)))
        yield running
    finally:
        running.close()


def test_replication_over_sasl(cluster: SaslCluster) -> None:
    admin = AdminClient(cluster.conf())
    wait_for(lambda: len(admin.list_topics(timeout=10).brokers) == 3, 30, "3 brokers")
    ports = {b.port for b in admin.list_topics(timeout=10).brokers.values()}
    assert ports == {b.ports[LISTENER] for b in cluster.brokers.values()}
    topic = f"rep-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        future.result(30)

    def isr_full() -> bool:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        return len(meta.partitions) == 3 and all(
            len(p.isrs) == 3 for p in meta.partitions.values()
        )

    wait_for(isr_full, 60, "every replica in sync")
    producer = Producer({**cluster.conf(), "acks": "all", "enable.idempotence": True})
    for i in range(30):
        producer.produce(topic, key=b"%d" % i, value=b"v%d" % i)
    assert producer.flush(60) == 0
    # acks=all needed every follower to fetch over its SASL login; still all in sync
    wait_for(isr_full, 30, "every replica in sync after producing")
    for broker in cluster.brokers.values():
        assert "Unexpected Kafka request" not in broker.log_tail(400)
        assert "SASL login refused" not in broker.log_tail(400)


def test_transactions_over_sasl(cluster: SaslCluster) -> None:
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(cluster.conf())
    for future in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        future.result(30)
    producer = Producer({**cluster.conf(), "transactional.id": f"t-{topic}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(9):
        producer.produce(topic, value=b"c%d" % i, partition=i % 3)
    producer.commit_transaction(60)
    consumer = Consumer(
        {
            **cluster.conf(),
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    consumer.subscribe([topic])
    got: set[bytes] = set()
    try:
        deadline = time.monotonic() + 60
        while len(got) < 9 and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.add(msg.value())
    finally:
        consumer.close()
    assert got == {b"c%d" % i for i in range(9)}


def test_scram_credentials_reach_every_broker(cluster: SaslCluster) -> None:
    admin = AdminClient(cluster.conf(nodes=(1,)))
    upsert = UserScramCredentialUpsertion(
        "frank", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"frank-pw"
    )
    admin.alter_user_scram_credentials([upsert])["frank"].result(30)
    for node in (2, 3):

        def logs_in(node: int = node) -> bool:
            settings = cluster.conf(
                nodes=(node,), user="frank", password="frank-pw", mechanism="SCRAM-SHA-256"
            )
            try:
                AdminClient(settings).list_topics(timeout=3)
            except KafkaException:
                return False
            return True

        wait_for(logs_in, 30, f"broker {node} to know frank")


def test_a_broker_with_a_wrong_inter_broker_password_cannot_fetch(tmp_path: Path) -> None:
    """The listener refuses the login of a peer whose JAAS password is wrong."""
    jaas = plain_jaas(USERS, login=("broker", "not-the-password"))
    settings = {
        "listeners": f"{LISTENER}://127.0.0.1:0",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
    }
    security = inter_broker_security(BrokerConfig(settings))
    assert security is not None and security.mechanism == "PLAIN"
    proc = SecureBroker(
        tmp_path / "data",
        {**settings, "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS)},
    ).start()
    try:
        async def call(sec: ChannelSecurity | None) -> Any:
            channel = BrokerChannel(1, "127.0.0.1", proc.ports[LISTENER], 10, "t", sec)
            try:
                return await channel.call(3, 12, METADATA_BODY)
            finally:
                channel.close()

        with pytest.raises(PeerUnavailable, match="Invalid username or password"):
            asyncio.run(call(security))
        good = inter_broker_security(
            BrokerConfig(
                {
                    **settings,
                    "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(
                        USERS, login=("broker", USERS["broker"])
                    ),
                }
            )
        )
        answer = asyncio.run(call(good))
        assert [b.port for b in answer.brokers] == [proc.ports[LISTENER]]
    finally:
        proc.kill()
