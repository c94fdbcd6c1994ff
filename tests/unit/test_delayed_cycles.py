"""A completed purgatory operation leaves no reference cycle behind (issue 15).

The connection's callback refers back to the operation it waits for; left in place, every
waiting Fetch or acks=all Produce became cyclic garbage that only full collections freed
(70-570 ms pauses in bench/latency.py). `server.app._complete` drops the callback.
"""

from __future__ import annotations

import gc
import weakref
from typing import Any

from oncelog.broker.purgatory import Delayed, Purgatory
from oncelog.server.app import _complete


def waiting_operation(answers: list[Any]) -> Delayed:
    op = Delayed(lambda force: "answer", deadline_ms=100, keys=("tp",))

    def done(response: Any) -> None:  # as Connection._wait_for's: compares with `op`
        if op.done:
            answers.append(response)

    op.on_done = done
    return op


def test_a_completed_operation_is_freed_without_the_gc() -> None:
    answers: list[Any] = []
    purgatory = Purgatory()
    purgatory.watch(waiting_operation(answers))
    gc.disable()
    try:
        (completed,) = purgatory.on_append(["tp"])
        op, response = completed
        _complete(op, response)
        assert answers == ["answer"]
        assert op.on_done is None
        gone = weakref.ref(op)
        del op, completed
        purgatory.expire(1_000)  # the deadline heap lets go of it too
        assert gone() is None  # freed by reference counting: no cycle was left
    finally:
        gc.enable()


def test_a_completed_operation_lets_go_of_its_request_before_its_deadline() -> None:
    """An acks=all Produce completes in ms but has a 30 s deadline: what it refers to must
    not wait for the deadline in the heap (it aged into the oldest GC generation)."""

    class Request:
        pass

    purgatory = Purgatory()
    request = Request()
    gone = weakref.ref(request)
    op = Delayed(lambda force, r=request: r, deadline_ms=30_000, keys=("tp",))  # type: ignore[misc]
    purgatory.watch(op)
    del request
    ((_, response),) = purgatory.on_append(["tp"])
    del response
    assert gone() is None  # the heap still holds `op`, but nothing behind it
    assert op.keys == () and op.try_complete(True) is None
    assert len(purgatory) == 0
    assert purgatory.next_deadline() is None


def test_the_deadline_heap_drops_completed_operations() -> None:
    purgatory = Purgatory()
    ops = [Delayed(lambda force: "x", deadline_ms=1_000 + i, keys=(i,)) for i in range(1_000)]
    for op in ops:
        purgatory.watch(op)
    purgatory.watch(Delayed(lambda force: "late", deadline_ms=500_000, keys=("other",)))
    for i in range(1_000):
        assert len(purgatory.on_append([i])) == 1
    assert len(purgatory) == 1
    assert len(purgatory._deadlines) <= 64  # rebuilt as completed entries piled up
    assert purgatory.next_deadline() == 500_000
    assert purgatory.expire(499_999) == []
    ((op, response),) = purgatory.expire(500_000)
    assert response == "late" and op.done
    assert len(purgatory) == 0 and purgatory.next_deadline() is None


def test_expire_and_cancel_keep_the_count() -> None:
    purgatory = Purgatory()
    a = Delayed(lambda force: "a" if force else None, deadline_ms=10, keys=("k",))
    b = Delayed(lambda force: "b" if force else None, deadline_ms=20, keys=("k",))
    c = Delayed(lambda force: "c" if force else None, deadline_ms=30, keys=("k",))
    for op in (a, b, c):
        purgatory.watch(op)
    purgatory.cancel(b)
    assert len(purgatory) == 2
    assert purgatory.on_append(["k"]) == []  # nothing ready without force
    assert [r for _, r in purgatory.expire(25)] == ["a"]
    assert len(purgatory) == 1 and purgatory.next_deadline() == 30
    assert [r for _, r in purgatory.expire(30)] == ["c"]
    assert len(purgatory) == 0 and purgatory._done_in_heap == 0
