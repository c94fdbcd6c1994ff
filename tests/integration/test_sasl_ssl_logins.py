"""Logins over TLS (SASL_SSL) with each client and each mechanism: confluent-kafka,
kafka-python and aiokafka log in with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 and produce with
the right password; with a wrong one the broker answers SASL_AUTHENTICATION_FAILED (58) with
Kafka's message and closes, and the client reports the failure."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.helpers import create_ssl_context
from confluent_kafka import KafkaError, Producer
from kafka import KafkaProducer
from kafka.errors import KafkaError as PyKafkaError

from tests.integration.secure_broker import Certs, SecureBroker, make_certs, plain_jaas, wait_for

pytestmark = pytest.mark.integration

MECHANISMS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
PASSWORD = "alice-pw"
TOPIC = "logins"


def refusal(mechanism: str) -> str:
    """Kafka's SaslAuthenticate error message for a wrong password."""
    if mechanism == "PLAIN":
        return "Authentication failed: Invalid username or password"
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureBroker]:
    data = tmp_path_factory.mktemp("sasl-ssl") / "data"
    format_args = [sys.executable, "-m", "oncelog", "storage", "format", "--data-dir", str(data)]
    for mechanism in MECHANISMS[1:]:
        format_args += ["--add-scram", f"{mechanism}=[name=alice,password={PASSWORD}]"]
    subprocess.run(format_args, check=True, capture_output=True, timeout=60)
    proc = SecureBroker(
        data,
        {
            "listeners": "SASL_SSL://127.0.0.1:0",
            "inter.broker.listener.name": "SASL_SSL",
            "ssl.keystore.location": str(certs.broker_keystore),
            "sasl.enabled.mechanisms": ",".join(MECHANISMS),
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_jaas(
                {"alice": PASSWORD}, ("alice", PASSWORD)
            ),
            "offsets.topic.num.partitions": "1",
        },
    ).start()
    yield proc
    proc.kill()


def refusals(broker: SecureBroker, mechanism: str) -> int:
    return Path(broker.log_path).read_text(errors="replace").count(refusal(mechanism))


def confluent(broker: SecureBroker, certs: Certs, mechanism: str, password: str) -> str | None:
    """Produce one message; None, or the authentication error librdkafka reported."""
    errors: list[KafkaError] = []
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap_of("SASL_SSL"),
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca),
            "sasl.mechanism": mechanism,
            "sasl.username": "alice",
            "sasl.password": password,
            "message.timeout.ms": 3000,
            "error_cb": errors.append,
        }
    )
    delivered: list[KafkaError | None] = []
    producer.produce(TOPIC, b"c", on_delivery=lambda err, _msg: delivered.append(err))
    producer.flush(10)
    failed = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    if failed:
        return str(failed[0].str())
    assert delivered == [None], (delivered, errors)
    return None


def kafka_python(broker: SecureBroker, certs: Certs, mechanism: str, password: str) -> str | None:
    try:
        producer = KafkaProducer(
            bootstrap_servers=broker.bootstrap_of("SASL_SSL"),
            security_protocol="SASL_SSL",
            ssl_cafile=str(certs.ca),
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=password,
            max_block_ms=3000,
            bootstrap_timeout_ms=3000,
        )
    except PyKafkaError as exc:
        return str(exc)
    try:
        producer.send(TOPIC, b"k").get(timeout=10)
    finally:
        producer.close()
    return None


def aiokafka(broker: SecureBroker, certs: Certs, mechanism: str, password: str) -> str | None:
    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_of("SASL_SSL"),
            security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=str(certs.ca)),
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=password,
        )
        try:
            await producer.start()
            await producer.send_and_wait(TOPIC, b"a")
        finally:
            await producer.stop()

    try:
        asyncio.run(run())
    except AioKafkaError as exc:
        return str(exc)
    return None


CLIENTS = {"confluent-kafka": confluent, "kafka-python": kafka_python, "aiokafka": aiokafka}


@pytest.mark.parametrize("mechanism", MECHANISMS)
@pytest.mark.parametrize("client", list(CLIENTS))
def test_login_over_tls(
    broker: SecureBroker,
    certs: Certs,
    client: str,
    mechanism: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    login = CLIENTS[client]
    assert login(broker, certs, mechanism, PASSWORD) is None

    before = refusals(broker, mechanism)
    with caplog.at_level(logging.ERROR):
        failure = login(broker, certs, mechanism, "wrong")
    assert failure is not None, f"{client} logged in with a wrong password"
    # The broker refused with Kafka's message (SaslAuthenticate error 58, then closed).
    # (logged when the connection closes, connection.failed.authentication.delay.ms later)
    wait_for(lambda: refusals(broker, mechanism) > before, 5, "the broker's refusal")
    if client == "confluent-kafka":
        assert refusal(mechanism) in failure, failure
    else:  # kafka-python and aiokafka raise a bootstrap failure and log the cause
        assert "SaslAuthenticationFailed" in failure + caplog.text, (failure, caplog.text)
