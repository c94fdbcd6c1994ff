"""The console of a broker whose Kafka listeners all speak TLS: it reads the cluster over TLS
(trusting its own listener's certificate, presenting it where client certificates are
required), and on SASL_SSL it takes the broker's users with basic auth, as on SASL_PLAINTEXT."""

from __future__ import annotations

import base64
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.secure_broker import Certs, SecureBroker, make_certs, plain_jaas

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "alice": "alice-secret"}
TIMEOUT = 15


def console(broker: SecureBroker) -> str:
    match = re.search(r"console (http://127\.0\.0\.1:\d+/)", broker.ready_line)
    assert match, broker.ready_line
    return match.group(1)


def get(url: str, auth: tuple[str, str] | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if auth is not None:
        token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SecureBroker]:
    certs = make_certs(tmp_path / "certs")
    protocol: str = request.param
    overrides = {
        "listeners": f"{protocol}://127.0.0.1:0",
        "inter.broker.listener.name": protocol,
        "ssl.keystore.location": str(certs.broker_keystore),
        "ssl.truststore.location": str(certs.ca),
        "offsets.topic.num.partitions": "1",
        "http.listeners": "http://127.0.0.1:0",
    }
    if protocol == "SSL":
        overrides["ssl.client.auth"] = "required"
    else:
        overrides["sasl.enabled.mechanisms"] = "PLAIN"
        overrides["listener.name.sasl_ssl.plain.sasl.jaas.config"] = plain_jaas(USERS)
    proc = SecureBroker(tmp_path / "data", overrides).start()
    try:
        yield _with_topic(proc, protocol, certs)
    finally:
        proc.kill()


def _with_topic(proc: SecureBroker, protocol: str, certs: Certs) -> SecureBroker:
    """`proc` with the topic the tests look at, made over its TLS listener (a failure here
    must not leave the broker running: the fixture kills it)."""
    client: dict[str, Any] = {
        "bootstrap.servers": proc.bootstrap_of(protocol),
        "security.protocol": protocol,
        "ssl.ca.location": str(certs.ca),
    }
    if protocol == "SSL":
        client["ssl.certificate.location"] = str(certs.client_cert)
        client["ssl.key.location"] = str(certs.client_key)
    else:
        client.update(
            {"sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": "alice-secret"}
        )
    admin = AdminClient(client)
    for future in admin.create_topics([NewTopic("over-tls", 2, 1)]).values():
        future.result(TIMEOUT)
    return proc


@pytest.mark.parametrize("broker", ["SSL"], indirect=True)
def test_an_ssl_only_broker_with_client_certificates_serves_the_console(
    broker: SecureBroker,
) -> None:
    status, cluster = get(console(broker) + "api/cluster")
    assert status == 200, cluster
    assert [b["port"] for b in cluster["brokers"]] == [broker.ports["SSL"]]
    status, topics = get(console(broker) + "api/topics")
    assert status == 200, topics
    assert "over-tls" in json.dumps(topics)


@pytest.mark.parametrize("broker", ["SASL_SSL"], indirect=True)
def test_a_sasl_ssl_broker_takes_its_users_with_basic_auth(broker: SecureBroker) -> None:
    url = console(broker) + "api/topics"
    assert get(url)[0] == 401
    assert get(url, ("alice", "wrong"))[0] == 401
    status, topics = get(url, ("alice", "alice-secret"))
    assert status == 200, topics
    assert "over-tls" in json.dumps(topics)
