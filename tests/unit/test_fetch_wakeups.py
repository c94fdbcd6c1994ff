"""A parked Fetch is woken by everything that can change its answer, and reads again only then
(issue 15): an acks=all Produce moves the high watermark once per follower fetch, which is
no news to a follower parked at the log end, and the purgatory tries an operation once per
wake-up however many of its keys moved."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.dispatcher import Pending
from oncelog.broker.partition import Change, ReplicaView
from oncelog.broker.purgatory import Delayed, Purgatory
from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from oncelog.storage.log_info import AppendOrigin
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import FETCH_V, Broker, batch

TP = TopicPartition("data", 0)


def _state(leader: int, leader_epoch: int, isr: tuple[int, ...] = (1, 2, 3)) -> ReplicaView:
    return ReplicaView(leader, leader_epoch, isr, leader_epoch, (1, 2, 3), leader_epoch + 1)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    broker = Broker(tmp_path, **{"etcd.connect": "http://127.0.0.1:2379", "node.id": "1"})
    broker.replicas.apply_topic("data", uuid.uuid4(), ((1, 2, 3),), {}, False)
    broker.replicas.apply_partition_state(TP, _state(1, 0))
    try:
        yield broker
    finally:
        broker.close()


def fetch(broker: Broker, offset: int, *, replica_id: int = -1, min_bytes: int = 1) -> Any:
    body = broker.fetch_body("data", offset, max_wait_ms=500)
    body["replica_id"] = replica_id
    body["min_bytes"] = min_bytes
    body["topics"][0]["partitions"][0]["current_leader_epoch"] = 0
    outcome, _ = broker.dispatch(ApiKey.FETCH, FETCH_V, body)
    return outcome


def answer(broker: Broker, pending: Pending, response: Any) -> Any:
    return broker.decode(ApiKey.FETCH, FETCH_V, pending.finish(response)).responses[0].partitions[0]


def append(broker: Broker, n: int = 1) -> None:
    for _ in range(n):
        plog = broker.replicas.partition(TP)
        plog.append(_stored(plog.log_end_offset), origin=AppendOrigin.REPLICATION)


def _stored(offset: int) -> bytes:
    data = bytearray(batch([b"v"]))
    data[0:8] = offset.to_bytes(8, "big")
    return bytes(data)


def counting_reads(broker: Broker, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    replicas = broker.replicas
    real = replicas.follower_fetch

    def follower_fetch(replica_id: int, *args: Any, **kwargs: Any) -> Any:
        reads.append(replica_id)
        return real(replica_id, *args, **kwargs)

    monkeypatch.setattr(replicas, "follower_fetch", follower_fetch)
    return reads


def test_a_follower_parked_at_the_end_ignores_high_watermark_moves(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    append(broker, 2)
    assert isinstance(fetch(broker, 2, replica_id=2), Pending)
    parked = fetch(broker, 2, replica_id=3)  # the HW moves to 2 with it
    assert isinstance(parked, Pending)
    assert broker.replicas.partition(TP).high_watermark == 2
    reads = counting_reads(broker, monkeypatch)
    assert parked.delayed.try_complete(False) is None
    assert reads == []  # nothing new for it: not read again
    append(broker)
    response = parked.delayed.try_complete(False)
    assert response is not None and reads == [3]
    part = answer(broker, parked, response)
    assert part.error_code == ErrorCode.none and len(part.records) > 0


def test_a_consumer_parked_at_the_high_watermark_wakes_when_it_moves(broker: Broker) -> None:
    append(broker, 2)
    fetch(broker, 2, replica_id=2)
    fetch(broker, 2, replica_id=3)  # HW 2
    assert broker.replicas.partition(TP).high_watermark == 2
    parked = fetch(broker, 2)
    assert isinstance(parked, Pending)
    append(broker)  # on the leader only: not visible yet
    assert parked.delayed.try_complete(False) is None
    fetch(broker, 3, replica_id=2)
    fetch(broker, 3, replica_id=3)  # HW 3
    response = parked.delayed.try_complete(False)
    assert response is not None
    assert answer(broker, parked, response).high_watermark == 3


def test_a_parked_fetch_answers_a_lost_leadership_at_once(broker: Broker) -> None:
    parked = fetch(broker, 0, replica_id=2)
    assert isinstance(parked, Pending)
    broker.replicas.apply_partition_state(TP, _state(2, 1))
    response = parked.delayed.try_complete(False)
    assert response is not None
    assert answer(broker, parked, response).error_code == ErrorCode.fenced_leader_epoch


def test_a_parked_fetch_answers_a_log_start_past_its_offset(broker: Broker) -> None:
    append(broker, 3)
    fetch(broker, 3, replica_id=3)
    parked = fetch(broker, 3, replica_id=2)
    assert isinstance(parked, Pending)
    broker.replicas.partition(TP).truncate_fully_and_start_at(5)
    response = parked.delayed.try_complete(False)
    assert response is not None
    assert answer(broker, parked, response).error_code == ErrorCode.offset_out_of_range


def test_min_bytes_counts_what_arrives_across_wakeups(broker: Broker) -> None:
    fetch(broker, 0, replica_id=3)
    parked = fetch(broker, 0, replica_id=2, min_bytes=200)
    assert isinstance(parked, Pending)
    append(broker)
    assert parked.delayed.try_complete(False) is None  # one small batch: not enough yet
    append(broker, 5)
    response = parked.delayed.try_complete(False)
    assert response is not None
    assert len(answer(broker, parked, response).records) >= 200


def test_an_operation_is_tried_once_per_wakeup() -> None:
    tries: list[bool] = []

    def attempt(force: bool) -> Any:
        tries.append(force)
        return None

    purgatory = Purgatory()
    purgatory.watch(Delayed(attempt, deadline_ms=100, keys=("a", "b", "c")))
    assert purgatory.on_append(["a", "b", "c"]) == []
    assert tries == [False]


def test_the_expiry_still_answers_a_parked_fetch(broker: Broker) -> None:
    parked = fetch(broker, 0, replica_id=2)
    assert isinstance(parked, Pending)
    response = parked.delayed.try_complete(True)
    part = answer(broker, parked, response)
    assert part.error_code == ErrorCode.none and len(part.records) == 0


def test_the_high_watermark_follows_a_leader_alone_in_the_isr(broker: Broker) -> None:
    """A follower outside the ISR fetching moves the HW to the leader's end (the skip of the
    HW scan is for ISR members at or below it only)."""
    broker.replicas.apply_partition_state(TP, _state(1, 0, isr=(1,)))
    append(broker, 3)  # written without a produce: nothing advanced the HW yet
    plog = broker.replicas.partition(TP)
    assert plog.high_watermark == 0
    fetch(broker, 0, replica_id=2)
    assert plog.high_watermark == 3


def test_an_isr_member_below_the_high_watermark_does_not_move_it(broker: Broker) -> None:
    append(broker, 3)
    fetch(broker, 3, replica_id=2)
    fetch(broker, 3, replica_id=3)
    plog = broker.replicas.partition(TP)
    assert plog.high_watermark == 3
    append(broker, 2)
    fetch(broker, 3, replica_id=2)  # a re-read at its old position: the HW stays
    assert plog.high_watermark == 3
    fetch(broker, 5, replica_id=2)
    fetch(broker, 5, replica_id=3)
    assert plog.high_watermark == 5


def test_the_state_already_applied_is_no_news(
    broker: Broker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A leader's own ISR change comes back twice, from the etcd watch and from its write's
    answer: the second changes nothing and wakes nothing, and a proposal made in between
    stays pending."""
    replicas = broker.replicas
    woken: list[list[TopicPartition]] = []
    real = replicas.notify_appended

    def notify_appended(tps: list[TopicPartition], **kwargs: Any) -> None:
        woken.append(tps)
        real(tps, **kwargs)

    monkeypatch.setattr(replicas, "notify_appended", notify_appended)
    shrunk = ReplicaView(1, 0, (1, 2), 1, (1, 2, 3), 2)
    assert replicas.apply_partition_state(TP, shrunk) == Change.ISR_CHANGED  # the watch
    assert woken == [[TP]]
    leader = replicas.replicas_by_tp[TP].leader
    assert leader is not None and leader.isr == {1, 2} and leader.pending_isr is None
    leader.isr_proposed(frozenset({1}))
    replicas.isr_change_done(TP, shrunk)  # the write's answer
    assert woken == [[TP]]
    assert leader.isr == {1, 2} and leader.pending_isr == {1}
    assert replicas.apply_partition_state(TP, shrunk) == Change.NOTHING
    assert woken == [[TP]]
