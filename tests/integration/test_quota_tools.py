"""`oncelog configs --entity-type users|clients` against a real broker, as `kafka-configs.sh`
sets and shows client quotas: what the tool prints, and what kafka-python's raw
DescribeClientQuotas / AlterClientQuotas see (and set) on the same broker.

One broker for the module, with a PLAINTEXT listener and a SASL_PLAINTEXT one for
--command-config; every test works on its own users and client ids, so none sees another's
quotas (the default entities are only touched in one test)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.secure_broker import SecureBroker, plain_jaas
from tests.integration.test_client_quotas import Admin

pytestmark = pytest.mark.integration

EXACT, DEFAULT, SPECIFIED = 0, 1, 2
Entity = tuple[tuple[str, str | None], ...]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBroker]:
    base: Path = tmp_path_factory.mktemp("quota-tools")
    proc = SecureBroker(
        base / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(
                {"admin": "admin-secret"}
            ),
        },
    ).start()
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def kafka_python(broker: SecureBroker) -> Iterator[Admin]:
    client = Admin(broker.bootstrap_of("PLAINTEXT"), client_id="quota-tools-test")
    yield client
    client.close()


def configs(broker: SecureBroker, *args: str, listener: str = "PLAINTEXT") -> Any:
    return subprocess.run(
        [sys.executable, "-m", "oncelog", "configs", "-b", broker.bootstrap_of(listener), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(broker: SecureBroker, *args: str, listener: str = "PLAINTEXT") -> list[str]:
    done = configs(broker, *args, listener=listener)
    assert (done.returncode, done.stderr) == (0, "")
    lines: list[str] = done.stdout.splitlines()
    return lines


def refused(broker: SecureBroker, status: int, *args: str) -> str:
    """The one `Error:` line of a refused command (no traceback, nothing on stdout)."""
    done = configs(broker, *args)
    assert done.returncode == status, done.stderr
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: ")
    return str(line)


def test_add_then_describe_a_user(broker: SecureBroker, kafka_python: Admin) -> None:
    assert ok(
        broker, "--alter", "--entity-type", "users", "--entity-name", "alice",
        "--add-config", "producer_byte_rate=1024,consumer_byte_rate=2048",
    ) == ["Completed updating config for user alice."]  # fmt: skip
    assert kafka_python.quotas([("user", EXACT, "alice")], strict=True) == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0, "consumer_byte_rate": 2048.0}
    }
    expected = [
        "Quota configs for user-principal 'alice' are "
        "consumer_byte_rate=2048.0, producer_byte_rate=1024.0"
    ]
    assert ok(broker, "--describe", "--entity-type", "users", "--entity-name", "alice") == expected
    assert ok(broker, "--describe", "--user", "alice") == expected
    # Adding again changes one key and keeps the other; a large value prints as Java does.
    ok(broker, "--alter", "--user", "alice", "--add-config", "producer_byte_rate=10485760")
    assert ok(broker, "--describe", "--user", "alice") == [
        "Quota configs for user-principal 'alice' are "
        "consumer_byte_rate=2048.0, producer_byte_rate=1.048576E7"
    ]
    # Every user: alice among them, with her quotas only (not her client ids').
    every = ok(broker, "--describe", "--entity-type", "users")
    assert (
        "Quota configs for user-principal 'alice' are "
        "consumer_byte_rate=2048.0, producer_byte_rate=1.048576E7"
    ) in every
    assert all("client-id" not in line for line in every)


def test_quotas_set_by_another_client_are_described(
    broker: SecureBroker, kafka_python: Admin
) -> None:
    assert kafka_python.alter((("client-id", "reporter"),), {"request_percentage": 12.5}) == (
        0,
        None,
    )
    assert ok(broker, "--describe", "--entity-type", "clients", "--entity-name", "reporter") == [
        "Quota configs for client-id 'reporter' are request_percentage=12.5"
    ]
    # An entity without quotas prints nothing, as Kafka's tool does.
    assert ok(broker, "--describe", "--entity-type", "clients", "--entity-name", "nobody") == []


def test_delete_config(broker: SecureBroker, kafka_python: Admin) -> None:
    ok(
        broker, "--alter", "--entity-type", "users", "--entity-name", "dora",
        "--add-config", "producer_byte_rate=4096,request_percentage=50",
    )  # fmt: skip
    assert ok(
        broker, "--alter", "--entity-type", "users", "--entity-name", "dora",
        "--delete-config", "request_percentage", "--add-config", "consumer_byte_rate=8192",
    ) == ["Completed updating config for user dora."]  # fmt: skip
    assert kafka_python.quotas([("user", EXACT, "dora")], strict=True) == {
        (("user", "dora"),): {"producer_byte_rate": 4096.0, "consumer_byte_rate": 8192.0}
    }
    # A key that is not set cannot be deleted (Kafka's check, before any change).
    assert (
        refused(
            broker, 1, "--alter", "--user", "dora",
            "--delete-config", "request_percentage,producer_byte_rate",
        )
        == "Error: Invalid config(s): request_percentage"
    )  # fmt: skip
    assert kafka_python.quotas([("user", EXACT, "dora")], strict=True) == {
        (("user", "dora"),): {"producer_byte_rate": 4096.0, "consumer_byte_rate": 8192.0}
    }
    ok(
        broker, "--alter", "--user", "dora",
        "--delete-config", "producer_byte_rate,consumer_byte_rate",
    )  # fmt: skip
    assert kafka_python.quotas([("user", EXACT, "dora")], strict=True) == {}
    assert ok(broker, "--describe", "--user", "dora") == []


def test_default_entities(broker: SecureBroker, kafka_python: Admin) -> None:
    assert ok(
        broker, "--alter", "--entity-type", "clients", "--entity-default",
        "--add-config", "consumer_byte_rate=1000000000",
    ) == ["Completed updating default config for clients in the cluster."]  # fmt: skip
    assert ok(
        broker, "--alter", "--user-defaults", "--add-config", "producer_byte_rate=2000000000"
    ) == ["Completed updating default config for users in the cluster."]
    assert kafka_python.quotas([("client-id", DEFAULT, None)], strict=True) == {
        (("client-id", None),): {"consumer_byte_rate": 1e9}
    }
    assert kafka_python.quotas([("user", DEFAULT, None)], strict=True) == {
        (("user", None),): {"producer_byte_rate": 2e9}
    }
    assert ok(broker, "--describe", "--entity-type", "clients", "--entity-default") == [
        "Quota configs for the default client-id are consumer_byte_rate=1.0E9"
    ]
    assert ok(broker, "--describe", "--user-defaults") == [
        "Quota configs for the default user-principal are producer_byte_rate=2.0E9"
    ]
    # A named user's clients that use the default client id.
    assert ok(
        broker, "--alter", "--entity-type", "users", "--entity-name", "erin",
        "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=25",
    ) == ["Completed updating config for user erin."]  # fmt: skip
    assert ok(
        broker, "--describe", "--entity-type", "users", "--entity-name", "erin",
        "--entity-type", "clients", "--entity-default",
    ) == [
        "Quota configs for user-principal 'erin', the default client-id are request_percentage=25.0"
    ]  # fmt: skip
    for args in (("--client-defaults",), ("--user-defaults",)):
        ok(
            broker, "--alter", *args,
            "--delete-config", "consumer_byte_rate" if args[0] == "--client-defaults"
            else "producer_byte_rate",
        )  # fmt: skip
    assert kafka_python.quotas([("client-id", DEFAULT, None)], strict=True) == {}
    assert kafka_python.quotas([("user", DEFAULT, None)], strict=True) == {}


def test_a_users_client_id(broker: SecureBroker, kafka_python: Admin) -> None:
    assert ok(
        broker, "--alter", "--entity-type", "users", "--entity-name", "bob",
        "--entity-type", "clients", "--entity-name", "app1",
        "--add-config", "request_percentage=12.5",
    ) == ["Completed updating config for user bob."]  # fmt: skip
    # Kafka's shorthand lists the client first, and its line names the client.
    assert ok(
        broker, "--alter", "--user", "bob", "--client", "app2",
        "--add-config", "producer_byte_rate=512",
    ) == ["Completed updating config for client app2."]  # fmt: skip
    assert kafka_python.quotas(
        [("user", EXACT, "bob"), ("client-id", SPECIFIED, None)], strict=True
    ) == {
        (("client-id", "app1"), ("user", "bob")): {"request_percentage": 12.5},
        (("client-id", "app2"), ("user", "bob")): {"producer_byte_rate": 512.0},
    }
    assert ok(
        broker, "--describe", "--entity-type", "users", "--entity-name", "bob",
        "--entity-type", "clients", "--entity-name", "app1",
    ) == [
        "Quota configs for user-principal 'bob', client-id 'app1' are request_percentage=12.5"
    ]  # fmt: skip
    assert ok(
        broker, "--describe", "--entity-type", "users", "--entity-name", "bob",
        "--entity-type", "clients",
    ) == [
        "Quota configs for user-principal 'bob', client-id 'app1' are request_percentage=12.5",
        "Quota configs for user-principal 'bob', client-id 'app2' are producer_byte_rate=512.0",
    ]  # fmt: skip
    # bob alone and client id app1 alone have no quotas of their own.
    assert ok(broker, "--describe", "--user", "bob") == []
    assert ok(broker, "--describe", "--client", "app1") == []


def test_values_the_broker_refuses(broker: SecureBroker, kafka_python: Admin) -> None:
    assert refused(
        broker, 1, "--alter", "--entity-type", "users", "--entity-name", "frank",
        "--add-config", "producer_byte_rate=1.5",
    ) == (
        "Error: cannot alter the quotas of user-principal 'frank': "
        "INVALID_REQUEST (42): producer_byte_rate cannot be a fractional value."
    )  # fmt: skip
    assert refused(
        broker, 1, "--alter", "--client", "frank-app", "--add-config", "consumer_byte_rate=0"
    ) == (
        "Error: cannot alter the quotas of client-id 'frank-app': "
        "INVALID_REQUEST (42): Quota consumer_byte_rate must be greater than 0"
    )
    line = refused(
        broker, 1, "--alter", "--user", "frank", "--add-config", "controller_mutation_rate=5"
    )
    assert "controller_mutation_rate" in line
    assert kafka_python.quotas([("user", EXACT, "frank")], strict=True) == {}
    assert kafka_python.quotas([("client-id", EXACT, "frank-app")], strict=True) == {}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("--alter", "--user", "gina", "--add-config", "producer_byte_rate=fast"),
            "Cannot parse quota configuration value for producer_byte_rate: fast",
        ),
        (
            ("--alter", "--entity-type", "users", "--entity-name", "gina", "--entity-default",
             "--add-config", "producer_byte_rate=1"),
            "give --entity-name or --entity-default, not both",
        ),
        (
            ("--alter", "--entity-type", "users", "--add-config", "producer_byte_rate=1"),
            "--entity-name or --entity-default must be specified with each --entity-type "
            "for --alter",
        ),
        (
            ("--alter", "--user", "gina", "--add-config", "retention.ms=1"),
            "Only quota configs can be added for 'users' using --bootstrap-server. "
            "Unexpected config names: retention.ms",
        ),
        (
            ("--alter", "--client", "gina-app", "--delete-config", "foo"),
            "Only quota configs can be deleted for 'clients' using --bootstrap-server. "
            "Unexpected config names: foo",
        ),
        (
            ("--alter", "--user", "gina"),
            "--alter needs --add-config or --delete-config",
        ),
        (
            ("--describe", "--entity-type", "users", "--entity-type", "topics"),
            "Only 'users' and 'clients' entity types may be specified together",
        ),
        (
            ("--describe", "--entity-type", "users", "--entity-type", "users"),
            "Duplicate entity type(s) specified: users",
        ),
        (
            ("--describe", "--entity-type", "users", "--client", "x"),
            "--entity-{type,name,default} should not be used in conjunction with specific "
            "entity flags",
        ),
        (("--describe",), "At least one entity type must be specified"),
        (
            ("--describe", "--entity-type", "clients", "--entity-name", "a", "--entity-name", "b"),
            "More entity names specified than entity types",
        ),
    ],
)  # fmt: skip
def test_command_line_errors(broker: SecureBroker, args: tuple[str, ...], message: str) -> None:
    assert refused(broker, 2, *args) == f"Error: {message}"


def test_command_config_logs_in(broker: SecureBroker, tmp_path: Path) -> None:
    good = tmp_path / "admin.properties"
    good.write_text(
        "# the SASL listener\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.username=admin\nsasl.password=admin-secret\n"
    )
    args = ("--command-config", str(good))
    assert ok(
        broker, "--alter", "--user", "hank", "--add-config", "consumer_byte_rate=300",
        *args, listener="SASL_PLAINTEXT",
    ) == ["Completed updating config for user hank."]  # fmt: skip
    assert ok(broker, "--describe", "--user", "hank", *args, listener="SASL_PLAINTEXT") == [
        "Quota configs for user-principal 'hank' are consumer_byte_rate=300.0"
    ]
    bad = tmp_path / "wrong.properties"
    bad.write_text(good.read_text().replace("admin-secret", "wrong"))
    done = configs(
        broker, "--describe", "--user", "hank", "--command-config", str(bad),
        listener="SASL_PLAINTEXT",
    )  # fmt: skip
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("Error: ")
    missing = configs(broker, "--describe", "--user", "hank", "--command-config", "/nonexistent")
    assert missing.returncode == 2
    assert missing.stderr.startswith("Error: cannot read --command-config")
