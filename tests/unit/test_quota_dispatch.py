"""Client quotas through the real dispatcher (an in-process broker on a manual clock): the
throttle time goes into the answer and into `ClientQuotas.muted` for the connection, for
request time, produced and fetched bytes; what brokers and handshakes send is exempt."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from oncelog.broker.dispatcher import NoReply, Outcome, Reply
from oncelog.broker.quotas import CLIENT_ID, FETCH, PRODUCE, REQUEST, make_entity
from oncelog.protocol.registry import ApiKey
from tests.unit.metrics_broker import FETCH_V, Broker, batch

#: The client id the harness sends.
CLIENT = make_entity([(CLIENT_ID, "metrics-test")])


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    b = Broker(tmp_path)
    b.create_topic("t")
    yield b
    b.close()


def metadata(broker: Broker) -> int:
    answer = broker.call(
        ApiKey.METADATA,
        12,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    return int(answer.throttle_time.total_seconds() * 1000)


def produce_outcome(broker: Broker, acks: int, records: bytes) -> Outcome:
    """The dispatcher's outcome of a Produce of `records` to partition 0 of `t`."""
    outcome, _ = broker.dispatch(
        ApiKey.PRODUCE,
        9,
        {
            "transactional_id": None,
            "acks": acks,
            "timeout": timedelta(seconds=1),
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    return outcome


def test_no_quota_no_throttle(broker: Broker) -> None:
    assert metadata(broker) == 0
    assert broker.context.quotas.muted == {}


def test_request_time_over_its_quota_throttles_for_at_most_a_window(broker: Broker) -> None:
    broker.context.quotas.set_entity(CLIENT, {REQUEST: 1e-9})
    assert metadata(broker) == 1000  # Kafka bounds request throttles by one window
    assert broker.context.quotas.muted == {"conn-1": 1000}
    assert broker.value("oncelog_throttled_responses_total", api="Metadata") == 1
    broker.context.quotas.muted.clear()
    # ApiVersions is never throttled (a client needs it before anything else).
    answer = broker.call(
        ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
    )
    assert answer.throttle_time == timedelta(0)
    assert broker.context.quotas.muted == {}


def test_produced_bytes_over_the_quota_throttle_the_produce(broker: Broker) -> None:
    # 10 s of 100 B/s: the first 1,000 B are free, the next cost their share of the window.
    broker.context.quotas.set_entity(CLIENT, {PRODUCE: 100.0})
    first = broker.produce("t", 0, batch([b"x" * 200]))
    assert first.error_code == 0 and broker.context.quotas.muted == {}
    for _ in range(5):
        broker.produce("t", 0, batch([b"x" * 200]))
    assert broker.context.quotas.muted.get("conn-1", 0) > 0
    # The answer itself carries it.
    outcome = produce_outcome(broker, 1, batch([b"y"]))
    assert isinstance(outcome, Reply)
    answer = broker.decode(ApiKey.PRODUCE, 9, outcome.data)
    assert answer.throttle_time > timedelta(0)
    assert answer.responses[0].partition_responses[0].error_code == 0  # still written


def test_acks_zero_is_muted_though_unanswered(broker: Broker) -> None:
    broker.context.quotas.set_entity(CLIENT, {PRODUCE: 1.0})
    outcome = produce_outcome(broker, 0, batch([b"z" * 100]))
    assert isinstance(outcome, NoReply)
    assert broker.context.quotas.muted.get("conn-1", 0) > 0


def test_fetched_bytes_over_the_quota_throttle_the_fetch(broker: Broker) -> None:
    for _ in range(3):
        broker.produce("t", 0, batch([b"f" * 500]))
    broker.context.quotas.set_entity(CLIENT, {FETCH: 10.0})
    answer = broker.call(ApiKey.FETCH, FETCH_V, broker.fetch_body("t", 0))
    # At most what the quota allows in all samples but one (10 B/s x 10 s): one batch, as
    # KIP-74 always returns the first, and then the throttle.
    partition = answer.responses[0].partitions[0]
    assert partition.error_code == 0 and partition.records
    assert answer.throttle_time > timedelta(0)
    assert broker.context.quotas.muted.get("conn-1", 0) > 0
    assert broker.value("oncelog_throttled_responses_total", api="Fetch") == 1


def test_a_brokers_fetch_is_not_charged(broker: Broker) -> None:
    """A follower's fetch (replica_id set) is not counted: with a request-time quota any
    charged request would be throttled a whole window."""
    broker.produce("t", 0, batch([b"f" * 500]))
    broker.context.quotas.set_entity(CLIENT, {FETCH: 1.0, REQUEST: 1e-9})
    body = broker.fetch_body("t", 0)
    body["replica_id"] = 2
    broker.dispatch(ApiKey.FETCH, FETCH_V, body)
    assert broker.context.quotas.muted == {}
    assert metadata(broker) == 1000  # while a client's request is
