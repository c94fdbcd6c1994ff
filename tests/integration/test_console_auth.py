"""The HTTP listener of a broker with a SASL listener and the ACL authorizer: it takes the
broker's users with basic auth (checked by logging in to the broker over SASL), reads the
cluster as the request's user, and lets only users with Alter on the cluster abort."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
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

pytestmark = pytest.mark.integration

USERS = {"admin": "admin-secret", "alice": "alice-secret", "operator": "operator-secret"}
TIMEOUT = 15


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
    base: Path = tmp_path_factory.mktemp("console-auth")
    proc = SecureBroker(
        base / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(USERS),
            "offsets.topic.num.partitions": "2",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
            "http.listeners": "http://127.0.0.1:0",
        },
    ).start()
    try:
        admin = AdminClient(conf(proc, "admin"))
        grants = [
            AclBinding(
                ResourceType.BROKER,
                "kafka-cluster",
                ResourcePatternType.LITERAL,
                "User:operator",
                "*",
                AclOperation.ALTER,
                AclPermissionType.ALLOW,
            ),
            AclBinding(
                ResourceType.TOPIC,
                "a-",
                ResourcePatternType.PREFIXED,
                "User:alice",
                "*",
                AclOperation.DESCRIBE,
                AclPermissionType.ALLOW,
            ),
        ]
        for future in admin.create_acls(grants, request_timeout=TIMEOUT).values():
            assert future.result() is None
        topics = [NewTopic(n, 1, 1) for n in ("a-mine", "b-secret")]
        for future in admin.create_topics(topics).values():
            future.result(TIMEOUT)
        yield proc
    finally:
        proc.kill()


def console(broker: SecureBroker) -> str:
    match = re.search(r"console (http://127\.0\.0\.1:\d+/)", broker.ready_line)
    assert match, broker.ready_line
    return match.group(1)


def get(url: str, user: str | None = None, password: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(url)
    if user is not None:
        token = base64.b64encode(f"{user}:{password or USERS[user]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            body = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        body, status = exc.read(), exc.code
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()


def post_abort(url: str, user: str) -> tuple[int, Any]:
    token = base64.b64encode(f"{user}:{USERS[user]}".encode()).decode()
    body = {"topic": "a-mine", "partition": 0, "producer_id": 0, "start_offset": 0}
    request = urllib.request.Request(
        url + "api/transactions/abort",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_logins_are_the_brokers_users(broker: SecureBroker) -> None:
    url = console(broker)
    status, _ = get(url + "api/cluster")
    assert status == 401
    assert get(url + "metrics")[0] == 401
    assert get(url + "api/cluster", "alice", "wrong")[0] == 401
    assert get(url + "api/cluster", "mallory", "x")[0] == 401
    status, cluster = get(url + "api/cluster", "alice")
    assert status == 200 and cluster["controller_id"] == 1
    status, text = get(url + "metrics", "alice")
    assert status == 200 and "oncelog_requests_total" in text


def test_requests_read_as_their_user(broker: SecureBroker) -> None:
    """The broker's ACLs decide what each user's pages show (Metadata hides topics)."""
    url = console(broker)
    _, alice_topics = get(url + "api/topics", "alice")
    _, admin_topics = get(url + "api/topics", "admin")
    assert [t["name"] for t in alice_topics] == ["a-mine"]
    assert {"a-mine", "b-secret"} <= {t["name"] for t in admin_topics}


def test_abort_needs_alter_on_the_cluster(broker: SecureBroker) -> None:
    url = console(broker)
    assert get(url + "api/whoami", "alice")[1] == {"user": "alice", "may_abort": False}
    assert get(url + "api/whoami", "operator")[1] == {"user": "operator", "may_abort": True}
    assert get(url + "api/whoami", "admin")[1] == {"user": "admin", "may_abort": True}
    status, body = post_abort(url, "alice")
    assert status == 403
    assert body["error"] == "aborting transactions needs the Alter operation on the cluster"
    status, body = post_abort(url, "admin")
    assert status == 409  # allowed, and nothing is open there
    assert body["error"] == (
        "no open transaction of producer 0 on a-mine-0 starts at offset 0"
    )


def test_scram_logins(tmp_path: Path) -> None:
    """Users with SCRAM credentials only (made by `oncelog storage format --add-scram`): the
    console logs in with SCRAM-SHA-512 when SCRAM-SHA-256 has no credential for the user."""
    data = tmp_path / "data"
    formatted = subprocess.run(
        [
            sys.executable, "-m", "oncelog", "storage", "format", "--data-dir", str(data),
            "--add-scram", "SCRAM-SHA-512=[name=carol,password=carol-pw,iterations=4096]",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert formatted.returncode == 0, formatted.stderr
    proc = SecureBroker(
        data,
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
            "security.inter.broker.protocol": "SASL_PLAINTEXT",
            "offsets.topic.num.partitions": "2",
            "http.listeners": "http://127.0.0.1:0",
        },
    ).start()
    try:
        url = console(proc)
        assert get(url + "api/whoami", "carol", "wrong")[0] == 401
        status, me = get(url + "api/whoami", "carol", "carol-pw")
        assert (status, me) == (200, {"user": "carol", "may_abort": True})  # no authorizer
        status, cluster = get(url + "api/cluster", "carol", "carol-pw")
        assert status == 200
        assert cluster["brokers"][0]["port"] == proc.ports["SASL_PLAINTEXT"]
    finally:
        proc.kill()
