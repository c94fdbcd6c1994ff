"""TLS listeners (SSL and SASL_SSL) with PEM key and trust stores made by `openssl` in the
test: confluent-kafka, kafka-python and aiokafka produce and consume over them; client
certificates when `ssl.client.auth=required`, and the certificate's subject as the principal;
TLS garbage on the port closes that connection only; a bad TLS setting stops the start."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.helpers import create_ssl_context
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer, KafkaProducer

from oncelog.config import BrokerConfig
from oncelog.server.inter_broker import (
    BrokerChannel,
    ChannelSecurity,
    PeerUnavailable,
    inter_broker_security,
)
from tests.integration.helpers import first_values
from tests.integration.rawclient import API_VERSIONS, api_versions_body, request
from tests.integration.secure_broker import (
    SCRAM_MODULE,
    Certs,
    SecureBroker,
    SecureCluster,
    make_certs,
    wait_for,
)

LISTENERS = "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0"
SCRAM = "SCRAM-SHA-512"
METADATA_BODY = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_topic_authorized_operations": False,
}


def format_dir(data: Path, *users: str) -> None:
    args = [sys.executable, "-m", "oncelog", "storage", "format", "--data-dir", str(data)]
    for user in users:
        args += ["--add-scram", f"{SCRAM}=[name={user},password={user}-pw]"]
    subprocess.run(args, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, certs: Certs) -> Iterator[SecureBroker]:
    data = tmp_path_factory.mktemp("tls") / "data"
    format_dir(data, "alice")
    proc = SecureBroker(
        data,
        {
            "listeners": LISTENERS,
            "ssl.keystore.location": str(certs.broker_keystore),
            "ssl.truststore.location": str(certs.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": SCRAM,
            "offsets.topic.num.partitions": "2",
        },
    ).start()
    yield proc
    proc.kill()


def ssl_conf(broker: SecureBroker, certs: Certs) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(certs.ca),
        "ssl.certificate.location": str(certs.client_cert),
        "ssl.key.location": str(certs.client_key),
    }


def sasl_ssl_conf(broker: SecureBroker, certs: Certs, password: str) -> dict[str, object]:
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_SSL"),
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(certs.ca),
        "sasl.mechanism": SCRAM,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def round_trip(
    settings: dict[str, object], topic: str, count: int = 10, pad: int = 0
) -> list[bytes]:
    producer = Producer({**settings, "enable.idempotence": True})
    for i in range(count):
        producer.produce(topic, value=b"t%d" % i + b"." * pad)
    assert producer.flush(30) == 0
    consumer = Consumer({**settings, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    try:
        for _ in range(300 + count):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == count:
                break
    finally:
        consumer.close()
    return got


def test_confluent_over_ssl_with_a_client_certificate(broker: SecureBroker, certs: Certs) -> None:
    topic = f"ssl-{uuid.uuid4().hex[:8]}"
    assert round_trip(ssl_conf(broker, certs), topic) == [b"t%d" % i for i in range(10)]
    brokers = AdminClient(ssl_conf(broker, certs)).list_topics(timeout=10).brokers
    assert brokers[1].port == broker.ports["SSL"]


def test_large_fetches_over_ssl(broker: SecureBroker, certs: Certs) -> None:
    """Answers large enough to be sent from the segment file on plain TCP are read into
    memory for TLS (no sendfile through a TLS transport)."""
    topic = f"ssl-big-{uuid.uuid4().hex[:8]}"
    got = round_trip(ssl_conf(broker, certs), topic, count=600, pad=1024)
    assert got == [b"t%d" % i + b"." * 1024 for i in range(600)]


def test_ssl_client_auth_required_refuses_a_client_without_certificate(
    broker: SecureBroker, certs: Certs
) -> None:
    settings = ssl_conf(broker, certs)
    del settings["ssl.certificate.location"], settings["ssl.key.location"]
    with pytest.raises(KafkaException):
        AdminClient(settings).list_topics(timeout=3)


def test_confluent_over_sasl_ssl(broker: SecureBroker, certs: Certs) -> None:
    topic = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    got = round_trip(sasl_ssl_conf(broker, certs, "alice-pw"), topic)
    assert got == [b"t%d" % i for i in range(10)]
    errors: list[KafkaError] = []
    bad = AdminClient({**sasl_ssl_conf(broker, certs, "wrong"), "error_cb": errors.append})
    with pytest.raises(KafkaException):
        bad.list_topics(timeout=3)
    bad.poll(1)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors


def test_kafka_python_over_ssl(broker: SecureBroker, certs: Certs) -> None:
    topic = f"kp-ssl-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": broker.bootstrap_of("SSL"),
        "security_protocol": "SSL",
        "ssl_cafile": str(certs.ca),
        "ssl_certfile": str(certs.client_cert),
        "ssl_keyfile": str(certs.client_key),
    }
    producer = KafkaProducer(**common)
    for i in range(3):
        producer.send(topic, b"p%d" % i).get(timeout=30)
    producer.close()
    consumer = KafkaConsumer(
        topic, **common, auto_offset_reset="earliest", consumer_timeout_ms=15000
    )
    got = first_values(consumer, 3)
    assert got == [b"p%d" % i for i in range(3)]


def test_aiokafka_over_sasl_ssl(broker: SecureBroker, certs: Certs) -> None:
    topic = f"aio-ssl-{uuid.uuid4().hex[:8]}"
    common = {
        "bootstrap_servers": broker.bootstrap_of("SASL_SSL"),
        "security_protocol": "SASL_SSL",
        "ssl_context": create_ssl_context(cafile=str(certs.ca)),
        "sasl_mechanism": SCRAM,
        "sasl_plain_username": "alice",
        "sasl_plain_password": "alice-pw",
    }

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(**common)
        await producer.start()
        try:
            for i in range(3):
                await producer.send_and_wait(topic, b"a%d" % i)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(topic, **common, auto_offset_reset="earliest")
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


@pytest.mark.parametrize("listener", ["SSL", "SASL_SSL"])
def test_tls_garbage_closes_only_that_connection(
    broker: SecureBroker, certs: Certs, listener: str
) -> None:
    port = broker.ports[listener]
    for garbage in [request(API_VERSIONS, 3, api_versions_body()), os.urandom(2048)]:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(garbage)
            sock.settimeout(10)
            try:
                while sock.recv(4096):  # a TLS alert at most, then the end
                    pass
            except ConnectionResetError:
                pass
    # a TLS record header of a ClientHello that never comes, then gone
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"\x16\x03\x01\x02\x00\x01")
    # a client that does not trust the broker's certificate gives up in the handshake
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        ssl.create_default_context().wrap_socket(sock, server_hostname="127.0.0.1")
    assert broker.alive()
    assert AdminClient(ssl_conf(broker, certs)).list_topics(timeout=10).brokers
    plain = AdminClient({"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")})
    assert plain.list_topics(timeout=10).brokers[1].port == broker.ports["PLAINTEXT"]


def test_a_tls_connection_is_counted_before_its_handshake(tmp_path: Path, certs: Certs) -> None:
    """As Kafka's acceptor does, `max.connections.per.ip` counts a TLS connection as it is
    accepted: sockets that never say hello fill the address's quota, one more is closed at
    once without a handshake, a client that would handshake is refused too, and a freed slot
    is taken again. (asyncio's TLS servers tell the protocol only after the handshake: these
    sockets were not counted, and the extra one waited 60 s for its ClientHello.)"""
    proc = SecureBroker(
        tmp_path / "data",
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.broker_keystore),
            "ssl.truststore.location": str(certs.ca),
            "max.connections.per.ip": "2",
        },
    ).start()
    address = ("127.0.0.1", proc.ports["SSL"])
    context = ssl.create_default_context(cafile=str(certs.ca))
    silent = [socket.create_connection(address, timeout=10) for _ in range(2)]
    try:
        with socket.create_connection(address, timeout=10) as extra:
            extra.settimeout(5)
            assert extra.recv(1) == b""  # closed by the broker, not left waiting
        with (
            socket.create_connection(address, timeout=10) as sock,
            pytest.raises((ssl.SSLError, OSError)),
        ):
            context.wrap_socket(sock, server_hostname="127.0.0.1")
        refused = (
            "Rejected connection from /127.0.0.1: address already has the configured maximum "
            "of 2 connections (max.connections.per.ip)"
        )
        assert proc.log_path.read_text().count(refused) == 2
        silent.pop().close()
        for _ in range(50):  # the broker counts the close once its loop has seen it
            try:
                with (
                    socket.create_connection(address, timeout=10) as sock,
                    context.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
                ):
                    assert tls.version() is not None
                    break
            except (ssl.SSLError, OSError):
                time.sleep(0.1)
        else:
            pytest.fail("the freed slot was not taken again")
        assert proc.alive()
    finally:
        for sock in silent:
            sock.close()
        proc.kill()


def test_inline_pem_key_and_trust(tmp_path: Path, certs: Certs) -> None:
    proc = SecureBroker(
        tmp_path / "data",
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.key": certs.broker_key.read_text(),
            "ssl.keystore.certificate.chain": certs.broker_cert.read_text(),
            "ssl.truststore.certificates": certs.ca.read_text(),
            "ssl.client.auth": "requested",
        },
    ).start()
    try:
        settings = {
            "bootstrap.servers": proc.bootstrap_of("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": str(certs.ca),
        }
        assert AdminClient(settings).list_topics(timeout=10).brokers[1].port == proc.ports["SSL"]
    finally:
        proc.kill()


def test_the_certificate_subject_and_the_sasl_user_are_principals(
    tmp_path: Path, certs: Certs
) -> None:
    """With the ACL authorizer: the client certificate's subject (Kafka's RFC 2253 form) and
    the SCRAM user are super users; another SCRAM user is not authorized."""
    data = tmp_path / "data"
    format_dir(data, "alice", "bob")
    proc = SecureBroker(
        data,
        {
            "listeners": "SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.broker_keystore),
            "ssl.truststore.location": str(certs.ca),
            "listener.name.ssl.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": SCRAM,
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:O=oncelog,CN=client-one;User:alice",
        },
    ).start()
    try:
        for settings, allowed in [
            (ssl_conf(proc, certs), True),
            (sasl_ssl_conf(proc, certs, "alice-pw"), True),
            ({**sasl_ssl_conf(proc, certs, "bob-pw"), "sasl.username": "bob"}, False),
        ]:
            topic = f"p-{uuid.uuid4().hex[:8]}"
            admin = AdminClient(settings)
            futures = admin.create_topics([NewTopic(topic, 1, 1)])
            if allowed:
                futures[topic].result(timeout=30)
            else:
                with pytest.raises(KafkaException) as info:
                    futures[topic].result(timeout=30)
                assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
                del info  # its traceback holds this frame and the clients until a GC
    finally:
        proc.kill()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"ssl.keystore.location": "/nonexistent/keystore.pem"}, "cannot load the keystore"),
        ({}, "TLS needs ssl.keystore.location"),
        ({"ssl.keystore.location": "GARBAGE"}, "cannot load the keystore"),
        ({"ssl.keystore.type": "JKS"}, "oncelog reads PEM"),
    ],
)
def test_bad_tls_config_is_one_line(
    tmp_path: Path, certs: Certs, settings: dict[str, str], expected: str
) -> None:
    if settings.get("ssl.keystore.location") == "GARBAGE":
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
        settings = {"ssl.keystore.location": str(garbage)}
    if settings.get("ssl.keystore.type") == "JKS":
        settings = {**settings, "ssl.keystore.location": str(certs.broker_keystore)}
    args = [sys.executable, "-m", "oncelog", "serve", "--data-dir", str(tmp_path / "d"),
            "--override", "listeners=SSL://127.0.0.1:0"]  # fmt: skip
    for key, value in settings.items():
        args += ["--override", f"{key}={value}"]
    result = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode in (1, 2), result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_broker_channel_over_sasl_ssl_with_scram(broker: SecureBroker, certs: Certs) -> None:
    """The broker's own client (replica fetcher, marker sender, verifier) reaches a
    SASL_SSL inter-broker listener: TLS with its truststore (the host name checked), then
    SCRAM with the listener's JAAS login; a wrong password is refused."""

    def security(password: str) -> ChannelSecurity | None:
        jaas = f'{SCRAM_MODULE} required username="alice" password="{password}";'
        return inter_broker_security(
            BrokerConfig(
                {
                    "listeners": "SASL_SSL://127.0.0.1:0",
                    "ssl.keystore.location": str(certs.broker_keystore),
                    "ssl.truststore.location": str(certs.ca),
                    "sasl.enabled.mechanisms": SCRAM,
                    "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": jaas,
                }
            )
        )

    async def metadata(sec: ChannelSecurity | None) -> Any:
        channel = BrokerChannel(1, "127.0.0.1", broker.ports["SASL_SSL"], 10, "t", sec)
        try:
            return await channel.call(3, 12, METADATA_BODY)
        finally:
            channel.close()

    good = security("alice-pw")
    assert good is not None and good.ssl_context is not None and good.mechanism == SCRAM
    answer = asyncio.run(metadata(good))
    assert [b.port for b in answer.brokers] == [broker.ports["SASL_SSL"]]
    with pytest.raises(PeerUnavailable, match="invalid credentials"):
        asyncio.run(metadata(security("wrong")))


def test_cluster_over_ssl_with_client_certificates(tmp_path: Path, certs: Certs) -> None:
    """Three brokers whose only listener is SSL with `ssl.client.auth=required`: followers
    fetch over TLS presenting the key store's certificate, checking the peer's host name."""
    cluster = SecureCluster(
        tmp_path,
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.keystore.location": str(certs.broker_keystore),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "required",
            "offsets.topic.num.partitions": "3",
        },
    ).start()
    try:
        settings = {
            **ssl_conf(cluster.brokers[1], certs),
            "bootstrap.servers": cluster.bootstrap_of("SSL"),
        }
        cluster.wait_brokers_known(
            lambda node: {**settings, "bootstrap.servers": cluster.bootstrap_of("SSL", (node,))}
        )
        admin = AdminClient(settings)
        topic = f"ssl-rep-{uuid.uuid4().hex[:8]}"
        for future in admin.create_topics([NewTopic(topic, 2, 3)]).values():
            future.result(30)
        producer = Producer({**settings, "acks": "all", "enable.idempotence": True})
        for i in range(20):
            producer.produce(topic, value=b"r%d" % i)
        assert producer.flush(60) == 0

        def isr_full() -> bool:
            meta = admin.list_topics(topic, timeout=10).topics[topic]
            return all(len(p.isrs) == 3 for p in meta.partitions.values())

        # acks=all needed both followers' fetches over TLS; they are still in sync after
        # replica.lag.time.max.ms
        time.sleep(4.5)
        wait_for(isr_full, 30, "every replica in sync")
    finally:
        cluster.close()
