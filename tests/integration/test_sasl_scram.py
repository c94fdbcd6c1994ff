"""SCRAM-SHA-256 and SCRAM-SHA-512 with confluent-kafka, kafka-python and aiokafka against
credentials made by `oncelog storage format --add-scram` and `oncelog users`; the credentials
survive a restart and are stored salted (no password in the metadata image)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError as AioKafkaError
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka import KafkaConsumer, KafkaProducer
from kafka.errors import KafkaError as PyKafkaError

from tests.integration.helpers import first_values
from tests.integration.secure_broker import SecureBroker

LISTENER = "SASL_PLAINTEXT"
REFUSED = "Authentication failed during authentication due to invalid credentials"


def oncelog(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oncelog", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base: Path = tmp_path_factory.mktemp("sasl-scram")
    data = base / "data"
    formatted = oncelog(
        "storage", "format", "--data-dir", str(data),
        "--add-scram", "SCRAM-SHA-256=[name=admin,password=admin-secret]",
        "--add-scram", "SCRAM-SHA-512=[name=admin,password=admin-secret,iterations=8192]",
    )  # fmt: skip
    assert formatted.returncode == 0, formatted.stderr
    proc = SecureBroker(
        data,
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "offsets.topic.num.partitions": "2",
        },
    ).start()
    yield proc
    proc.kill()


def conf(broker: SecureBroker, mechanism: str, user: str, password: str) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap_of(LISTENER),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }


def login_fails(settings: dict[str, object]) -> list[KafkaError]:
    errors: list[KafkaError] = []
    admin = AdminClient({**settings, "error_cb": errors.append})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=3)
    admin.poll(1)
    return errors


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_scram_produce_consume(broker: SecureBroker, mechanism: str) -> None:
    topic = f"scram-{uuid.uuid4().hex[:8]}"
    settings = conf(broker, mechanism, "admin", "admin-secret")
    producer = Producer({**settings, "enable.idempotence": True})
    for i in range(10):
        producer.produce(topic, value=b"s%d" % i)
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == 10:
                break
    finally:
        consumer.close()
    assert got == [b"s%d" % i for i in range(10)]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_confluent_scram_wrong_password(broker: SecureBroker, mechanism: str) -> None:
    errors = login_fails(conf(broker, mechanism, "admin", "not-it"))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    assert any(REFUSED in e.str() and mechanism in e.str() for e in errors), errors


def test_mechanism_without_a_credential_is_refused(broker: SecureBroker) -> None:
    """nobody has no credential at all; alice (added below) none for SHA-512."""
    errors = login_fails(conf(broker, "SCRAM-SHA-256", "nobody", "x"))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_users_cli_adds_describes_and_deletes(broker: SecureBroker, tmp_path: Path) -> None:
    admin_config = tmp_path / "admin.properties"
    admin_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.username=admin\nsasl.password=admin-secret\n"
    )
    common = ["-b", broker.bootstrap_of(LISTENER), "--command-config", str(admin_config)]
    added = oncelog(
        "users", "alter", *common,
        "--add-scram", "SCRAM-SHA-256=[name=carol,password=carol-pw,iterations=4096]",
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert "carol" in added.stdout
    described = oncelog("users", "describe", *common)
    assert described.returncode == 0, described.stderr
    rows = [line.split() for line in described.stdout.splitlines()[1:]]
    assert ["admin", "SCRAM-SHA-256", "4096"] in rows
    assert ["admin", "SCRAM-SHA-512", "8192"] in rows
    assert ["carol", "SCRAM-SHA-256", "4096"] in rows
    AdminClient(conf(broker, "SCRAM-SHA-256", "carol", "carol-pw")).list_topics(timeout=10)
    deleted = oncelog("users", "alter", *common, "--delete-scram", "SCRAM-SHA-256=[name=carol]")
    assert deleted.returncode == 0, deleted.stderr
    errors = login_fails(conf(broker, "SCRAM-SHA-256", "carol", "carol-pw"))
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    again = oncelog("users", "alter", *common, "--delete-scram", "SCRAM-SHA-256=[name=carol]")
    assert again.returncode == 1
    assert "RESOURCE_NOT_FOUND" in again.stderr
    missing = oncelog("users", "describe", *common, "--user", "carol")
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        "Error: RESOURCE_NOT_FOUND (91): Attempt to describe a user credential that does "
        "not exist: carol"
    )
    usage = oncelog("users", "alter", *common, "--add-scram", "SCRAM-SHA-1=[name=x,password=y]")
    assert usage.returncode == 2
    assert usage.stderr.strip() == "Error: The add-scram mechanism SCRAM-SHA-1 is not supported."


def test_alter_refusals_are_kafkas(broker: SecureBroker) -> None:
    admin = AdminClient(conf(broker, "SCRAM-SHA-256", "admin", "admin-secret"))
    few = UserScramCredentialUpsertion(
        "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 1000), b"pw"
    )
    gone = UserScramCredentialDeletion("erin", ScramMechanism.SCRAM_SHA_512)
    futures = admin.alter_user_scram_credentials([few, gone])
    with pytest.raises(KafkaException) as too_few:
        futures["dave"].result()
    assert too_few.value.args[0].code() == KafkaError.UNACCEPTABLE_CREDENTIAL
    assert "Too few iterations" in too_few.value.args[0].str()
    with pytest.raises(KafkaException) as not_found:
        futures["erin"].result()
    assert not_found.value.args[0].code() == KafkaError.RESOURCE_NOT_FOUND


def test_kafka_python_scram(broker: SecureBroker) -> None:
    topic = f"kp-scram-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": broker.bootstrap_of(LISTENER),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "admin",
    }
    producer = KafkaProducer(**common, sasl_plain_password="admin-secret")
    for i in range(3):
        producer.send(topic, b"k%d" % i).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic,
        **common,
        sasl_plain_password="admin-secret",
        auto_offset_reset="earliest",
        consumer_timeout_ms=15000,
    )
    got = first_values(consumer, 3)
    assert got == [b"k%d" % i for i in range(3)]
    refused = broker.log_tail(100000).count(REFUSED)
    with pytest.raises(PyKafkaError):
        bad = KafkaProducer(
            **common, sasl_plain_password="wrong", max_block_ms=4000, bootstrap_timeout_ms=4000
        )
        bad.send(topic, b"x").get(timeout=4)
    assert broker.log_tail(100000).count(REFUSED) > refused


def test_aiokafka_scram(broker: SecureBroker, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"aio-scram-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": broker.bootstrap_of(LISTENER),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "SCRAM-SHA-256",
        "sasl_plain_username": "admin",
    }

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**common, sasl_plain_password="admin-secret")
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, **common, sasl_plain_password="admin-secret", auto_offset_reset="earliest"
        )
        await consumer.start()
        got: list[bytes] = []
        try:
            while len(got) < 3:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 20)
                for records in batch.values():
                    got.extend(r.value for r in records)
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(run()) == [b"a%d" % i for i in range(3)]

    async def bad() -> None:
        producer = AIOKafkaProducer(**common, sasl_plain_password="wrong")
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(AioKafkaError):
        asyncio.run(bad())
    assert REFUSED in caplog.text


def test_credentials_survive_a_restart_and_are_salted(broker: SecureBroker) -> None:
    image = (broker.data_dir / "oncelog-metadata.json").read_bytes().decode("latin-1")
    assert "admin-secret" not in image
    assert '"stored_key"' in image
    broker.restart()
    AdminClient(conf(broker, "SCRAM-SHA-512", "admin", "admin-secret")).list_topics(timeout=10)


def test_storage_format_refusals(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    ok = oncelog("storage", "format", "--data-dir", str(data), "-S",
                 "SCRAM-SHA-256=[name=a,password=b]")  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    again = oncelog("storage", "format", "--data-dir", str(data))
    assert again.returncode == 1
    assert again.stderr.startswith("Error: Log directory") and "already formatted" in again.stderr
    ignored = oncelog("storage", "format", "--data-dir", str(data), "--ignore-formatted")
    assert ignored.returncode == 0
    bad = oncelog("storage", "format", "--data-dir", str(tmp_path / "x"), "-S",
                  "SCRAM-SHA-256=[name=a,password=b,iterations=10]")  # fmt: skip
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "Error: The 'iterations' value must be >= 4096 for add-scram using SCRAM-SHA-256"
    )
    assert not (tmp_path / "x").exists()
