"""The broker's budget for waiting request bytes (queued.max.request.bytes), sans-IO."""

from __future__ import annotations

import pytest

from oncelog.config import BrokerConfig, InvalidConfig
from oncelog.server.request_memory import RequestMemory


class Reader:
    """A connection as the budget sees it: it holds bytes, stops when told, and counts the
    times it was called back."""

    def __init__(self, memory: RequestMemory) -> None:
        self.memory = memory
        self.resumes = 0

    def hold(self, nbytes: int) -> None:
        self.memory.hold(self, nbytes)

    def stop(self) -> None:
        self.memory.wait(self, self.resume)

    def resume(self) -> None:
        self.resumes += 1


def test_the_budget_is_spent_once_what_connections_hold_reaches_it() -> None:
    memory = RequestMemory(100)
    a, b = Reader(memory), Reader(memory)
    a.hold(60)
    b.hold(30)
    assert memory.used == 90 and memory.available == 10 and not memory.spent
    # Not strict, as Kafka's pool: a request granted with 10 bytes left may take 70.
    b.hold(100)
    assert memory.used == 160 and memory.spent


def test_memory_given_back_wakes_the_waiting_connections_once_it_is_not_spent() -> None:
    memory = RequestMemory(100)
    a, b, c = Reader(memory), Reader(memory), Reader(memory)
    a.hold(80)
    b.hold(30)
    b.stop()
    c.hold(5)
    c.stop()
    a.hold(70)  # 105: still spent, nobody wakes
    assert (b.resumes, c.resumes) == (0, 0) and memory.waiting == 2
    a.hold(0)  # 35
    assert (b.resumes, c.resumes) == (1, 1) and memory.waiting == 0
    a.hold(10)
    a.hold(0)  # called back once only
    assert (b.resumes, c.resumes) == (1, 1)


def test_holding_again_means_no_longer_waiting() -> None:
    memory = RequestMemory(100)
    a, b = Reader(memory), Reader(memory)
    a.hold(100)
    b.hold(10)
    b.stop()
    b.hold(10)  # b re-checked by itself (it reads on, or stops again)
    assert memory.waiting == 0
    a.hold(0)
    assert b.resumes == 0


def test_a_closed_connection_gives_back_what_it_held_and_is_not_called_back() -> None:
    memory = RequestMemory(100)
    a, b, c = Reader(memory), Reader(memory), Reader(memory)
    a.hold(100)
    b.hold(10)
    b.stop()
    c.hold(1)
    c.stop()
    memory.release(c)
    memory.release(a)
    assert memory.used == 10 and b.resumes == 1 and c.resumes == 0
    memory.release(b)
    memory.release(b)  # twice is harmless
    assert memory.used == 0 and memory.waiting == 0


def test_unlimited_counts_but_is_never_spent() -> None:
    memory = RequestMemory(None)
    Reader(memory).hold(10**12)
    assert memory.used == 10**12 and memory.available is None and not memory.spent


@pytest.mark.parametrize(("value", "expected"), [("-1", None), ("0", None), ("1048576", 1 << 20)])
def test_queued_max_request_bytes_is_a_budget_or_unlimited(
    value: str, expected: int | None
) -> None:
    config = BrokerConfig(
        {"queued.max.request.bytes": value, "socket.request.max.bytes": "1048576"}
    )
    assert config.queued_max_request_bytes == expected


def test_a_budget_below_one_request_is_refused_as_kafka_does() -> None:
    with pytest.raises(
        InvalidConfig, match=r"must be larger or equal to socket\.request\.max\.bytes"
    ):
        BrokerConfig({"queued.max.request.bytes": "1048575", "socket.request.max.bytes": "1048576"})
    with pytest.raises(InvalidConfig):
        BrokerConfig({"queued.max.request.bytes": "100"})  # below the 100 MiB default
