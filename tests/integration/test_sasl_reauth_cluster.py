"""KIP-368 between brokers: a 3-broker cluster whose inter-broker listener is SASL (PLAIN over
SASL_PLAINTEXT, SCRAM-SHA-512 over SASL_SSL) with a short `connections.max.reauth.ms`. The
brokers' own connections (replica fetchers, transaction markers, KIP-890 verification)
renew their sessions on the same connection before they run out, so while an RF=3 topic is
produced with acks=all and transactions commit, no leader closes a follower's connection as
expired and no follower finds its leader unavailable; the renewals are counted in the
brokers' DEBUG log."""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from tests.integration.secure_broker import (
    SCRAM_MODULE,
    Certs,
    SecureCluster,
    make_certs,
    plain_jaas,
    wait_for,
)

pytestmark = pytest.mark.integration

LIFETIME_MS = 3000
RUN_S = 20.0
USERS = {"broker": "broker-secret", "admin": "admin-secret"}
RENEWED = re.compile(r"re-authenticated with broker \d+")
#: What a connection closed for an expired session, or a follower cut off, leaves in a log.
BROKEN = (
    "SASL session expired",
    "unavailable",
    "re-authentication with broker",
    "not sent",
    "verifying transaction",
)


class ReauthCluster(SecureCluster):
    def __init__(self, base: Path, listener: str, mechanism: str, certs: Certs) -> None:
        name = listener.lower()
        overrides = {
            "listeners": f"{listener}://127.0.0.1:0",
            "inter.broker.listener.name": listener,
            "sasl.enabled.mechanisms": f"PLAIN,{mechanism}" if mechanism != "PLAIN" else "PLAIN",
            "sasl.mechanism.inter.broker.protocol": mechanism,
            f"listener.name.{name}.plain.sasl.jaas.config": plain_jaas(
                USERS, login=("broker", USERS["broker"])
            ),
            "connections.max.reauth.ms": str(LIFETIME_MS),
            "transaction.state.log.num.partitions": "3",
            "offsets.topic.num.partitions": "3",
        }
        if mechanism != "PLAIN":
            overrides[f"listener.name.{name}.{mechanism.lower()}.sasl.jaas.config"] = (
                f'{SCRAM_MODULE} required username="broker" password="{USERS["broker"]}";'
            )
        if listener == "SASL_SSL":
            overrides["ssl.keystore.location"] = str(certs.broker_keystore)
            overrides["ssl.truststore.location"] = str(certs.ca)
        super().__init__(base, overrides, log_level="DEBUG")
        self.listener = listener
        self.mechanism = mechanism
        self.certs = certs

    def conf(self, nodes: tuple[int, ...] = (1, 2, 3)) -> dict[str, object]:
        """The admin user's client settings (PLAIN: the broker user may not exist yet)."""
        conf: dict[str, object] = {
            "bootstrap.servers": self.bootstrap_of(self.listener, nodes),
            "security.protocol": self.listener,
            "sasl.mechanism": "PLAIN",
            "sasl.username": "admin",
            "sasl.password": USERS["admin"],
        }
        if self.listener == "SASL_SSL":
            conf["ssl.ca.location"] = str(self.certs.ca)
        return conf


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(
    params=[("SASL_PLAINTEXT", "PLAIN"), ("SASL_SSL", "SCRAM-SHA-512")],
    ids=["plain-sasl_plaintext", "scram-sasl_ssl"],
)
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[ReauthCluster]:
    listener, mechanism = request.param
    running = ReauthCluster(tmp_path_factory.mktemp("reauth-cluster"), listener, mechanism, certs)
    running.start()
    try:
        running.wait_brokers_known(lambda node: running.conf(nodes=(node,)))
        if mechanism != "PLAIN":  # the brokers' own SCRAM login, seen by every broker (etcd)
            upsert = UserScramCredentialUpsertion(
                "broker",
                ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                USERS["broker"].encode(),
            )
            admin = AdminClient(running.conf())
            admin.alter_user_scram_credentials([upsert])["broker"].result(30)
        yield running
    finally:
        running.close()


class Transactions(threading.Thread):
    """A transaction every 4 s: between two of them the marker sender's and verifier's
    channels sit idle past a session's lifetime."""

    def __init__(self, producer: Producer, topic: str) -> None:
        super().__init__()
        self.producer, self.topic = producer, topic
        self.committed = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(4.0):
            self.producer.begin_transaction()
            for p in range(3):
                self.producer.produce(self.topic, value=b"txn", partition=p)
            self.producer.commit_transaction(30)
            self.committed += 1


def produce_for(producer: Producer, topic: str, seconds: float) -> None:
    """acks=all produce to every partition for `seconds`; every message delivered."""
    delivered: list[object] = []
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        (failed if err is not None else delivered).append(err)

    sent = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        producer.produce(topic, value=b"v%d" % sent, partition=sent % 3, on_delivery=on_delivery)
        sent += 1
        producer.poll(0.02)
    assert producer.flush(30) == 0
    assert len(delivered) == sent and not failed, failed[:5]


def renewals_since(cluster: ReauthCluster, starts: dict[int, int]) -> dict[int, int]:
    """Each broker's re-authentications logged since `starts` (log sizes); fails on any
    line of a connection closed as expired or a peer found unavailable meanwhile."""
    renewals = {}
    for node, broker in cluster.brokers.items():
        with open(broker.log_path, errors="replace") as log:
            log.seek(starts[node])
            window = log.read()
        broken = [line for line in window.splitlines() if any(b in line for b in BROKEN)]
        assert not broken, f"broker {node}:\n" + "\n".join(broken[:10])
        renewals[node] = len(RENEWED.findall(window))
    return renewals


def test_inter_broker_sessions_are_renewed_not_closed(cluster: ReauthCluster) -> None:
    admin = AdminClient(cluster.conf())
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    for future in admin.create_topics([NewTopic(topic, 3, 3)]).values():
        future.result(30)

    def isr_full() -> bool:
        meta = admin.list_topics(topic, timeout=10).topics[topic]
        return len(meta.partitions) == 3 and all(
            len(p.isrs) == 3 for p in meta.partitions.values()
        )

    wait_for(isr_full, 60, "every replica in sync")
    errors: list[KafkaError] = []
    producer = Producer(
        {**cluster.conf(), "acks": "all", "linger.ms": 5, "error_cb": errors.append}
    )
    txn = Producer(
        {**cluster.conf(), "transactional.id": f"t-{topic}", "error_cb": errors.append}
    )
    txn.init_transactions(60)
    for p in range(3):  # every broker has a leader's connections open before the window
        producer.produce(topic, value=b"warm-up", partition=p)
    assert producer.flush(30) == 0
    time.sleep(LIFETIME_MS / 1000)  # past the first sessions' lifetime: renewals are due

    starts = {n: b.log_path.stat().st_size for n, b in cluster.brokers.items()}
    transactions = Transactions(txn, topic)
    transactions.start()
    try:
        produce_for(producer, topic, RUN_S)
    finally:
        transactions.stop.set()
        transactions.join(60)
    assert not transactions.is_alive() and transactions.committed >= 3
    assert not errors, errors[:5]
    renewals = renewals_since(cluster, starts)
    # each broker follows the two others (3 partitions, RF=3, leaders spread): its fetcher
    # renews each session every 2.55-2.85 s, so 7 times or so per leader in 20 s
    assert all(count >= 6 for count in renewals.values()), renewals
    assert isr_full()


@pytest.fixture
def plain_cluster(
    tmp_path_factory: pytest.TempPathFactory, certs: Certs
) -> Iterator[ReauthCluster]:
    running = ReauthCluster(
        tmp_path_factory.mktemp("reauth-slow"), "SASL_PLAINTEXT", "PLAIN", certs
    )
    running.start()
    try:
        running.wait_brokers_known(lambda node: running.conf(nodes=(node,)))
        yield running
    finally:
        running.close()


class Rdkafka(logging.Handler):
    """librdkafka's log of one producer: its re-authentications, its SASL failures."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.reauths = 0
        self.failures: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "Received REAUTH op" in message:
            self.reauths += 1
        elif "handshake failed" in message or "SASL authentication error" in message:
            self.failures.append(message)


def test_librdkafka_renews_while_acks_all_waits_on_a_stopped_follower(
    plain_cluster: ReauthCluster,
) -> None:
    """The PLAIN producer flake ("SASL PLAIN mechanism handshake failed: Local: Broker
    transport failure"): while a follower is stopped an acks=all Produce waits seconds; the
    producer's next requests, sent well within its session, wait behind it; librdkafka starts
    its re-authentication at 90 % of the lifetime with them in flight. The leader must serve
    them (they arrived in time) rather than close the connection as expired under the
    client's SaslHandshake. Any mechanism: SCRAM did the same under the same load."""
    cluster = plain_cluster
    admin = AdminClient(cluster.conf())
    topic = f"slow-{uuid.uuid4().hex[:8]}"
    # leaders on brokers 1 and 2; broker 3 only follows, and is the one stopped
    new = NewTopic(topic, 2, replica_assignment=[[1, 2, 3], [2, 1, 3]])
    for future in admin.create_topics([new]).values():
        future.result(30)
    wait_for(
        lambda: all(
            len(p.isrs) == 3
            for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        ),
        60,
        "every replica in sync",
    )
    logs, producers = [], []
    for i in range(3):
        logger = logging.getLogger(f"{__name__}.producer{i}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logs.append(Rdkafka())
        logger.addHandler(logs[-1])
        settings = {
            **cluster.conf(nodes=(1, 2)),
            "acks": "all",
            "linger.ms": 0,
            "debug": "broker",
            "logger": logger,
        }
        producers.append(Producer(settings))
    follower = cluster.brokers[3].proc
    assert follower is not None
    starts = {n: b.log_path.stat().st_size for n, b in cluster.brokers.items()}
    sent = 0
    try:
        for phase_s, stopped in ((2.0, False), (6.0, True), (3.0, False)):
            follower.send_signal(signal.SIGSTOP if stopped else signal.SIGCONT)
            deadline = time.monotonic() + phase_s
            while time.monotonic() < deadline:
                for producer in producers:
                    producer.produce(topic, value=b"v%d" % sent, partition=sent % 2)
                    producer.poll(0)
                sent += 1
                time.sleep(0.005)
    finally:
        follower.send_signal(signal.SIGCONT)
    for producer in producers:
        assert producer.flush(60) == 0
    failures = [f for log in logs for f in log.failures]
    assert not failures, failures[:5]
    assert all(log.reauths >= 2 for log in logs), [log.reauths for log in logs]
    for node in (1, 2):
        with open(cluster.brokers[node].log_path, errors="replace") as log:
            log.seek(starts[node])
            assert "SASL session expired" not in log.read(), f"broker {node}"
