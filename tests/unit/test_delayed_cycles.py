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
