"""An acknowledged write is a stored write, whatever a client sends (issue 10 B).

Raw requests against the real broker process: a Produce whose partition data holds two v2
batches is refused with INVALID_RECORD and nothing appended, as Kafka's LogValidator does
(real clients send one batch per partition); other partitions of the same request are not
affected.
"""

from __future__ import annotations

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.helpers import confluent_read, create_topic
from tests.integration.rawclient import PRODUCE, RawClient, produce_body
from tests.integration.test_idempotence import (
    OUT_OF_ORDER_SEQUENCE_NUMBER,
    init_producer_id,
    log_end,
    raw_produce,
    seq_batch,
)
from tests.storage.util import make_batch

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

INVALID_RECORD = 87


def test_retry_and_new_batch_in_one_partition_are_refused_not_half_written(
    broker: BrokerProcess,
) -> None:
    """The issue's request: [0-4] (a retry) + [5-9] (new). Before the fix the answer was
    error 0 at offset 0, the log stayed at 5 and seq 10 got OUT_OF_ORDER_SEQUENCE_NUMBER."""
    topic = "two-batches"
    create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.port) as client:
        pid, epoch = init_producer_id(client)
        first = seq_batch(pid, epoch, 0, "a", count=5)
        second = seq_batch(pid, epoch, 5, "b", count=5)
        assert raw_produce(client, topic, first) == (0, 0)
        assert log_end(client, topic) == 5

        error, _ = raw_produce(client, topic, first + second)
        assert error == INVALID_RECORD
        assert log_end(client, topic) == 5

        # Nothing of it counted: the new batch alone is next in sequence and is written.
        assert raw_produce(client, topic, second) == (0, 5)
        assert raw_produce(client, topic, seq_batch(pid, epoch, 10, "c", count=5)) == (0, 10)
        assert raw_produce(client, topic, seq_batch(pid, epoch, 20, "gap"))[0] == (
            OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert log_end(client, topic) == 15
    log = confluent_read(broker.bootstrap, topic, {0: 15})
    assert [r.value for r in log[0]] == [f"{t}-{i}".encode() for t in "abc" for i in range(5)]
    assert [r.offset for r in log[0]] == list(range(15))


def test_two_batches_refused_per_partition_only(broker: BrokerProcess) -> None:
    """Two plain (non-idempotent) batches in one partition: INVALID_RECORD there, nothing
    appended; the other partition of the same request is written."""
    topic = "two-plain"
    create_topic(broker.bootstrap, topic, 2)
    one, two = make_batch([b"x", b"y"]), make_batch([b"z"])
    with RawClient(broker.port) as client:
        response = client.call(PRODUCE, 9, produce_body({topic: [(0, one + two), (1, one)]}))
        parts = {int(p.index): p for p in response.responses[0].partition_responses}
        assert int(parts[0].error_code) == INVALID_RECORD
        assert "more than one" in (parts[0].error_message or "")
        assert (int(parts[1].error_code), int(parts[1].base_offset)) == (0, 0)
    log = confluent_read(broker.bootstrap, topic, {0: 0, 1: 2})
    assert log.get(0, []) == []
    assert [r.value for r in log[1]] == [b"x", b"y"]
