"""SASL/PLAIN on a SASL_PLAINTEXT listener beside a PLAINTEXT one, with confluent-kafka,
kafka-python and aiokafka: the right password logs in and produces/consumes, a wrong one is
refused with SASL_AUTHENTICATION_FAILED; each listener's Metadata names its own port."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as PyKafkaError

from tests.integration.helpers import first_values
from tests.integration.secure_broker import SecureBroker, plain_jaas

USERS = {"admin": "admin-secret", "alice": "alice-pw"}
REFUSED = "Authentication failed: Invalid username or password"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base: Path = tmp_path_factory.mktemp("sasl-plain")
    proc = SecureBroker(
        base / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
            "offsets.topic.num.partitions": "2",
        },
    ).start()
    yield proc
    proc.kill()


def sasl_conf(broker: SecureBroker, user: str, password: str) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": password,
    }


def test_confluent_plain_login_produce_consume(broker: SecureBroker) -> None:
    topic = f"plain-{uuid.uuid4().hex[:8]}"
    conf = sasl_conf(broker, "alice", "alice-pw")
    producer = Producer({**conf, "enable.idempotence": True})
    for i in range(20):
        producer.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == 20:
                break
    finally:
        consumer.close()
    assert got == [b"v%d" % i for i in range(20)]


def test_confluent_wrong_password_is_sasl_authentication_failed(broker: SecureBroker) -> None:
    errors: list[KafkaError] = []
    admin = AdminClient(
        {**sasl_conf(broker, "alice", "wrong"), "error_cb": errors.append}
    )
    with pytest.raises(Exception):  # noqa: B017 - librdkafka's metadata failure
        admin.list_topics(timeout=3)
    admin.poll(1)
    assert errors, "no error reported"
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any("Invalid username or password" in e.str() for e in errors), errors


def test_unknown_user_is_refused(broker: SecureBroker) -> None:
    errors: list[KafkaError] = []
    admin = AdminClient({**sasl_conf(broker, "mallory", "x"), "error_cb": errors.append})
    with pytest.raises(Exception):  # noqa: B017
        admin.list_topics(timeout=3)
    admin.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_each_listener_answers_with_its_own_endpoint(broker: SecureBroker) -> None:
    plain = AdminClient({"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")})
    sasl = AdminClient(sasl_conf(broker, "admin", "admin-secret"))
    plain_brokers = plain.list_topics(timeout=10).brokers
    sasl_brokers = sasl.list_topics(timeout=10).brokers
    assert plain_brokers[1].port == broker.ports["PLAINTEXT"]
    assert sasl_brokers[1].port == broker.ports["SASL_PLAINTEXT"]
    assert broker.ports["PLAINTEXT"] != broker.ports["SASL_PLAINTEXT"]


def test_kafka_python_plain(broker: SecureBroker) -> None:
    topic = f"kp-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
    }
    producer = KafkaProducer(**common, sasl_plain_username="alice", sasl_plain_password="alice-pw")
    for i in range(5):
        producer.send(topic, b"m%d" % i).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **common,
        sasl_plain_username="alice",
        sasl_plain_password="alice-pw",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
    )
    got = first_values(consumer, 5)
    assert got[:5] == [b"m%d" % i for i in range(5)]
    refused = broker.log_tail(100000).count(REFUSED)
    with pytest.raises(PyKafkaError) as info:
        bad = KafkaProducer(
            **common,
            sasl_plain_username="alice",
            sasl_plain_password="nope",
            max_block_ms=5000,
            bootstrap_timeout_ms=5000,
        )
        bad.send(topic, b"x").get(timeout=5)
    # kafka-python 3 reports only that it could not bootstrap; the broker says why
    assert "bootstrap" in str(info.value) or "Authentication" in repr(info.value)
    assert broker.log_tail(100000).count(REFUSED) > refused


def test_aiokafka_plain(broker: SecureBroker, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"aio-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
    }

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(
            **common, sasl_plain_username="alice", sasl_plain_password="alice-pw"
        )
        await producer.start()
        try:
            for i in range(5):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic,
            **common,
            sasl_plain_username="alice",
            sasl_plain_password="alice-pw",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < 5:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for records in batch.values():
                    got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"a%d" % i for i in range(5)]

    async def bad_login() -> None:
        producer = AIOKafkaProducer(
            **common, sasl_plain_username="alice", sasl_plain_password="bad"
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioKafkaError):
        asyncio.run(bad_login())
    # aiokafka raises "Unable to bootstrap"; it logs the broker's SaslAuthenticate error
    assert REFUSED in caplog.text
