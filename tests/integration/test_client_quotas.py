"""Client quotas on a real broker: set and described through kafka-python's protocol classes
(AlterClientQuotas, DescribeClientQuotas), enforced on confluent-kafka's producer and
consumer, which are told the throttle time (librdkafka's throttle_cb), kept across a
restart, and refused without the cluster's AlterConfigs right.

Durations are only bounded from below: a throttled client cannot be faster than its quota,
while a loaded machine only makes it slower."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from kafka.admin import KafkaAdminClient
from kafka.protocol.admin import AlterClientQuotasRequest as Alter
from kafka.protocol.admin import DescribeClientQuotasRequest as Describe

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic
from tests.integration.secure_broker import SecureBroker, plain_jaas
from tests.integration.test_metrics import metrics_url, scrape, value

pytestmark = pytest.mark.integration

#: A quota of 20 kB/s, measured over 10 s: a client may send 200 kB at once, then waits.
RATE = 20_000
MESSAGE = b"q" * 1000
COUNT = 400


class Admin:
    """kafka-python's admin client, sending the quota requests it has classes for."""

    def __init__(self, bootstrap: str, client_id: str = "quota-admin") -> None:
        self.client = KafkaAdminClient(bootstrap_servers=bootstrap, client_id=client_id)
        self.manager = self.client._manager

    def send(self, request: Any) -> Any:
        return self.manager.run(self.manager.send, request)

    def alter(
        self,
        entity: Iterable[tuple[str, str | None]],
        ops: dict[str, float | None],
        validate_only: bool = False,
    ) -> tuple[int, str | None]:
        entry = Alter.EntryData(
            entity=[Alter.EntryData.EntityData(entity_type=t, entity_name=n) for t, n in entity],
            ops=[
                Alter.EntryData.OpData(key=k, value=v or 0.0, remove=v is None)
                for k, v in ops.items()
            ],
        )
        answer = self.send(Alter(entries=[entry], validate_only=validate_only))
        (result,) = answer.entries
        return result.error_code, result.error_message

    def describe(self, components: list[tuple[str, int, str | None]], strict: bool = False) -> Any:
        return self.send(
            Describe(
                components=[
                    Describe.ComponentData(entity_type=t, match_type=m, match=n)
                    for t, m, n in components
                ],
                strict=strict,
            )
        )

    def quotas(
        self, components: list[tuple[str, int, str | None]] | None = None, strict: bool = False
    ) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
        """The entities a filter matches (all without one), each as its sorted (type, name)
        pairs, with their quotas."""
        answer = self.describe(components or [], strict)
        assert answer.error_code == 0, answer.error_message
        return {
            tuple(sorted((e.entity_type, e.entity_name) for e in entry.entity)): {
                v.key: v.value for v in entry.values
            }
            for entry in answer.entries
        }

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    client = Admin(broker.bootstrap)
    yield client
    client.close()


def test_quotas_are_set_described_removed_and_survive_a_restart(
    broker: BrokerProcess, admin: Admin
) -> None:
    assert admin.alter([("user", "alice")], {"producer_byte_rate": 1024.0}) == (0, None)
    assert admin.alter(
        [("user", "alice"), ("client-id", None)],
        {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
    ) == (0, None)
    assert admin.alter([("client-id", "app")], {"producer_byte_rate": 9.0}, True) == (0, None)
    assert admin.quotas() == {
        (("user", "alice"),): {"producer_byte_rate": 1024.0},
        (("client-id", None), ("user", "alice")): {
            "consumer_byte_rate": 2048.0,
            "request_percentage": 12.5,
        },
    }
    strict = admin.describe([("user", 0, "alice")], strict=True)
    assert [[(e.entity_type, e.entity_name) for e in x.entity] for x in strict.entries] == [
        [("user", "alice")]
    ]
    bad = admin.describe([("user", 0, "a"), ("user", 1, None)])
    assert (bad.error_code, bad.error_message) == (
        42,
        "Entity type user cannot appear more than once in the filter.",
    )
    # Kafka's refusals, one entry at a time.
    assert admin.alter([("user", "alice")], {"producer_byte_rate": 1.5}) == (
        42,
        "producer_byte_rate cannot be a fractional value.",
    )
    assert admin.alter([("user", "alice")], {"nonsense": 1.0}) == (
        42,
        "Invalid configuration key nonsense",
    )
    assert admin.alter([], {"producer_byte_rate": 1.0}) == (
        42,
        "Invalid empty client quota entity",
    )

    admin.close()
    broker.restart()
    again = Admin(broker.bootstrap)
    try:
        assert set(again.quotas()) == {
            (("user", "alice"),),
            (("client-id", None), ("user", "alice")),
        }
        # Removing the last key removes the entity.
        assert again.alter([("user", "alice")], {"producer_byte_rate": None}) == (0, None)
        assert (("user", "alice"),) not in again.quotas()
    finally:
        again.close()


def produce(
    bootstrap: str, client_id: str, count: int, login: dict[str, str] | None = None
) -> tuple[float, list[float], int]:
    """(seconds taken, throttle times librdkafka was told, messages delivered); `login`:
    librdkafka's SASL settings."""
    throttles: list[float] = []
    delivered = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "batch.size": 16384,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
            **(login or {}),
        }
    )
    started = time.monotonic()
    for _ in range(count):
        producer.produce("quota", MESSAGE, on_delivery=lambda e, m: delivered.append(e is None))
        producer.poll(0)
    assert producer.flush(120) == 0
    return time.monotonic() - started, throttles, sum(delivered)


def test_a_producer_over_its_byte_rate_is_throttled_and_loses_nothing(
    broker_factory: type[BrokerProcess],
) -> None:
    broker = broker_factory(overrides={"http.listeners": "http://127.0.0.1:0"}).start()
    create_topic(broker.bootstrap, "quota", 1)
    admin = Admin(broker.bootstrap)
    try:
        assert admin.alter([("client-id", "slow")], {"producer_byte_rate": RATE}) == (0, None)
    finally:
        admin.close()
    # 400 kB at 20 kB/s, 200 kB of it at once: at least another 10 s (5 s allowed for
    # the rounding of samples).
    taken, throttles, delivered = produce(broker.bootstrap, "slow", COUNT)
    assert delivered == COUNT
    assert any(t > 0 for t in throttles), throttles
    assert taken > 5.0, taken
    # Another client id has no quota: never throttled.
    _, free_throttles, free_delivered = produce(broker.bootstrap, "fast", COUNT)
    assert free_delivered == COUNT and not any(t > 0 for t in free_throttles), free_throttles
    samples = scrape(metrics_url(broker))
    assert (value(samples, "oncelog_throttled_responses_total", api="Produce") or 0) >= 1
    assert (value(samples, "oncelog_throttle_time_seconds_total", api="Produce") or 0) > 0
    # Every message is there once, in order.
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "check"})
    consumer.assign([TopicPartition("quota", 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 30
    while len(offsets) < 2 * COUNT and time.monotonic() < deadline:
        offsets += [m.offset() for m in consumer.consume(1000, 1.0) if m.error() is None]
    consumer.close()
    assert offsets == list(range(2 * COUNT))


def test_a_consumer_over_its_byte_rate_is_throttled_and_reads_everything_once(
    broker: BrokerProcess, admin: Admin
) -> None:
    create_topic(broker.bootstrap, "quota", 1)
    produce(broker.bootstrap, "writer", COUNT)
    assert admin.alter([("client-id", "slow-reader")], {"consumer_byte_rate": RATE}) == (0, None)
    throttles: list[float] = []
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "readers",
            "client.id": "slow-reader",
            "max.partition.fetch.bytes": 20_000,
            "throttle_cb": lambda event: throttles.append(event.throttle_time),
        }
    )
    consumer.assign([TopicPartition("quota", 0, 0)])
    offsets: list[int] = []
    started = time.monotonic()
    deadline = started + 90
    while len(offsets) < COUNT and time.monotonic() < deadline:
        for message in consumer.consume(100, 0.5):
            if message.error() is None:
                assert message.value() == MESSAGE
                offsets.append(message.offset())
    taken = time.monotonic() - started
    consumer.close()
    assert offsets == list(range(COUNT))
    assert any(t > 0 for t in throttles), throttles
    assert taken > 5.0, taken


STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def test_quotas_need_the_clusters_config_rights(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory(
        overrides={"authorizer.class.name": STANDARD, "super.users": "User:admin"}
    ).start()
    admin = Admin(broker.bootstrap)
    try:
        assert admin.alter([("user", "alice")], {"producer_byte_rate": 1024.0}) == (
            31,
            "Cluster authorization failed.",
        )
        denied = admin.describe([])
        assert (denied.error_code, denied.entries) == (31, None)
    finally:
        admin.close()


def test_a_user_quota_holds_for_the_authenticated_user_only(tmp_path: Path) -> None:
    """A quota on `user=alice` applies to alice's SASL logins, whatever their client id, and
    not to bob's or to unauthenticated clients (User:ANONYMOUS)."""
    broker = SecureBroker(
        tmp_path / "data",
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": plain_jaas(
                {"alice": "alice-pw", "bob": "bob-pw"}
            ),
        },
    ).start()
    try:
        plain = broker.bootstrap_of("PLAINTEXT")
        create_topic(plain, "quota", 1)
        admin = Admin(plain)
        try:
            assert admin.alter([("user", "alice")], {"producer_byte_rate": RATE}) == (0, None)
        finally:
            admin.close()
        sasl = broker.bootstrap_of("SASL_PLAINTEXT")

        def login(user: str) -> dict[str, str]:
            return {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": f"{user}-pw",
            }

        _, throttles, delivered = produce(sasl, "any-client", COUNT, login("alice"))
        assert delivered == COUNT and any(t > 0 for t in throttles), throttles
        for bootstrap, who in ((sasl, login("bob")), (plain, None)):
            _, throttles, delivered = produce(bootstrap, "any-client", COUNT, who)
            assert delivered == COUNT and not any(t > 0 for t in throttles), throttles
    finally:
        broker.kill()
