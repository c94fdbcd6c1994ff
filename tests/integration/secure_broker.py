"""A broker process with several listeners (TLS, SASL) for the security tests, and the test
certificates they use, made with the `openssl` CLI."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.broker_process import BrokerProcess

#: The ready line's listeners note; other notes (", console http://...") may follow it.
LISTENERS = re.compile(r"listeners=([^\s,]+(?:,[^\s,]+)*)")
PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"


def plain_jaas(users: dict[str, str], login: tuple[str, str] | None = None) -> str:
    options = "".join(f' user_{name}="{password}"' for name, password in users.items())
    if login is not None:
        options = f' username="{login[0]}" password="{login[1]}"' + options
    return f"{PLAIN_MODULE} required{options};"


class SecureBroker(BrokerProcess):
    """Started with `listeners` from its overrides (no --listen); `ports` maps each listener
    name to its bound port, as the ready line reports them."""

    def __init__(
        self, data_dir: Path, overrides: dict[str, str], log_level: str | None = None
    ) -> None:
        """`log_level`: the broker's --log-level (DEBUG for what a test counts in its log)."""
        super().__init__(data_dir, overrides)
        self.ports: dict[str, int] = {}
        self.log_level = log_level

    def bootstrap_of(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def start(self, timeout: float = 30.0) -> SecureBroker:
        if self.ports:
            # a restart keeps the ports clients know
            specs = [
                re.sub(r":\d+$", f":{self.ports[spec.split('://')[0]]}", spec)
                for spec in self.overrides["listeners"].split(",")
            ]
            self.overrides["listeners"] = ",".join(specs)
        args = [sys.executable, "-m", "oncelog"]
        if self.log_level is not None:
            args += ["--log-level", self.log_level]
        args += ["serve", "--data-dir", str(self.data_dir)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        log = open(self.log_path, "a")  # noqa: SIM115 - lives as long as the process
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
        deadline = time.monotonic() + timeout
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if "ready on" in line:
                self.ready_line = line.strip()
                self.port = int(re.search(r"ready on [\d.]+:(\d+)", line).group(1))  # type: ignore[union-attr]
                match = LISTENERS.search(line)
                specs = match.group(1).split(",") if match else []
                for spec in specs:
                    name, _, address = spec.partition("://")
                    self.ports[name] = int(address.rsplit(":", 1)[1])
                if not specs:
                    name = self.overrides["listeners"].split("://")[0]
                    self.ports[name] = self.port
                return self
        self.kill()
        raise RuntimeError(f"broker did not start; see {self.log_path}:\n{self.log_tail()}")


@dataclass(frozen=True)
class Certs:
    """A CA, a broker certificate for 127.0.0.1/localhost and a client certificate."""

    ca: Path
    broker_keystore: Path  # key + chain, one PEM file
    broker_key: Path
    broker_cert: Path
    client_key: Path
    client_cert: Path


def make_certs(directory: Path, client_subject: str = "/CN=client-one/O=oncelog") -> Certs:
    directory.mkdir(parents=True, exist_ok=True)

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=oncelog-test-ca")
    ext = directory / "broker.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    for name, subject in (("broker", "/CN=localhost"), ("client", client_subject)):
        run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
            f"{name}.csr", "-subj", subject)
        extra = ["-extfile", "broker.ext"] if name == "broker" else []
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", *extra)
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(
        (directory / "broker.key").read_text() + (directory / "broker.pem").read_text()
    )
    return Certs(
        directory / "ca.pem",
        keystore,
        directory / "broker.key",
        directory / "broker.pem",
        directory / "client.key",
        directory / "client.pem",
    )


class SecureCluster:
    """Three SecureBrokers sharing one etcd (tests/etcd_server.py), each with `overrides`."""

    def __init__(
        self,
        base: Path,
        overrides: dict[str, str],
        size: int = 3,
        log_level: str | None = None,
    ) -> None:
        from tests.cluster_process import FAST
        from tests.etcd_server import EtcdServer

        self.etcd = EtcdServer(base / "etcd")
        self.brokers = {
            n: SecureBroker(
                base / f"broker-{n}", {**FAST, **overrides, "node.id": str(n)}, log_level
            )
            for n in range(1, size + 1)
        }

    def start(self) -> SecureCluster:
        self.etcd.start()
        for broker in self.brokers.values():
            broker.overrides["etcd.connect"] = self.etcd.endpoint
        threads = [threading.Thread(target=b.start) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        missing = [n for n, b in self.brokers.items() if not b.alive()]
        if missing:
            tails = "\n".join(self.brokers[n].log_tail() for n in missing)
            self.close()
            raise RuntimeError(f"brokers {missing} did not start:\n{tails}")
        return self

    def bootstrap_of(self, listener: str, nodes: tuple[int, ...] = (1, 2, 3)) -> str:
        return ",".join(self.brokers[n].bootstrap_of(listener) for n in nodes)

    def wait_brokers_known(
        self, settings: Callable[[int], dict[str, object]], timeout: float = 30
    ) -> None:
        """Every broker's Metadata lists every broker, asked of each broker alone with the
        client `settings(node)` it needs. Each learns the others through its etcd watch a
        moment after they registered; until then the broker placing a new topic's replicas
        may refuse a replication factor the cluster has (INVALID_REPLICATION_FACTOR)."""
        from confluent_kafka.admin import AdminClient

        def known(node: int) -> bool:
            # A fresh client knows only `node`, so its first Metadata is `node`'s view.
            brokers = AdminClient(settings(node)).list_topics(timeout=10).brokers
            return set(brokers) == set(self.brokers)

        for node in self.brokers:
            wait_for(lambda node=node: known(node), timeout, f"broker {node} knowing every broker")

    def close(self) -> None:
        for broker in self.brokers.values():
            broker.kill()
        self.etcd.close()


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")
