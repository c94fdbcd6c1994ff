"""Requests that wait for data or a deadline (Fetch with min_bytes / max_wait_ms), sans-IO.

A handler returns a `Delayed` instead of a response; the server keeps it here. An append to
a partition wakes the operations watching it (`on_append`), `expire(now)` forces those past
their deadline. The server only moves completed operations to the wire; no timers live here
(`next_deadline` tells the server when to call `expire`).

A completed operation lets go of what it refers to (its callbacks, the request behind them,
its keys) at once, and the deadline heap drops completed entries once they are half of it:
an acks=all Produce waits a few ms but has a 30 s deadline, and a heap that kept each one,
with its request, until that deadline kept ~25,000 objects per broker alive at 2,000 msg/s on
RF=3, which aged into the oldest GC generation and made a full collection (50-80 ms) run
every ~15 s (bench/latency.py, issue 15).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any


def _finished(force: bool) -> None:
    """`try_complete` of a completed operation (it holds nothing any more)."""
    return None


@dataclass(eq=False, slots=True, weakref_slot=True)
class Delayed:
    """A response that is not ready yet.

    `try_complete(force)` returns the response once it can be sent (always when `force`).
    """

    try_complete: Callable[[bool], Any | None]
    deadline_ms: int
    keys: tuple[Hashable, ...]
    on_done: Callable[[Any], None] | None = None
    done: bool = field(default=False, init=False)


class Purgatory:
    def __init__(self) -> None:
        self._watchers: dict[Hashable, set[Delayed]] = {}
        self._deadlines: list[tuple[int, int, Delayed]] = []
        self._seq = itertools.count()
        self._done_in_heap = 0
        """Entries of `_deadlines` whose operation completed before its deadline."""

    def __len__(self) -> int:
        return len(self._deadlines) - self._done_in_heap

    def watch(self, op: Delayed) -> None:
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        heapq.heappush(self._deadlines, (op.deadline_ms, next(self._seq), op))

    def on_append(self, keys: Iterable[Hashable]) -> list[tuple[Delayed, Any]]:
        """Try to complete operations watching any of `keys` (partitions that grew, or other
        keys such as a group whose waiters were filled); return those that completed."""
        # Each operation is tried once however many of `keys` it watches (a fetch of six
        # partitions that all grew is one try, not six).
        ops: dict[Delayed, None] = {}
        for key in keys:
            watchers = self._watchers.get(key)
            if watchers:
                ops.update(dict.fromkeys(watchers))
        out: list[tuple[Delayed, Any]] = []
        for op in ops:
            if op.done:
                continue
            response = op.try_complete(False)
            if response is not None:
                self._finish(op)
                out.append((op, response))
        return out

    def expire(self, now_ms: int) -> list[tuple[Delayed, Any]]:
        out: list[tuple[Delayed, Any]] = []
        while self._deadlines and self._deadlines[0][0] <= now_ms:
            _, _, op = heapq.heappop(self._deadlines)
            if op.done:
                self._done_in_heap -= 1
                continue
            attempt = op.try_complete
            self._finish(op, in_heap=False)
            out.append((op, attempt(True)))
        return out

    def cancel(self, op: Delayed) -> None:
        if not op.done:
            self._finish(op)

    def next_deadline(self) -> int | None:
        while self._deadlines and self._deadlines[0][2].done:
            heapq.heappop(self._deadlines)
            self._done_in_heap -= 1
        return self._deadlines[0][0] if self._deadlines else None

    def _finish(self, op: Delayed, *, in_heap: bool = True) -> None:
        """Mark `op` done, unwatch it and drop its references (not `on_done`: the server
        takes that one when it hands the response over)."""
        op.done = True
        for key in op.keys:
            watchers = self._watchers.get(key)
            if watchers is not None:
                watchers.discard(op)
                if not watchers:
                    del self._watchers[key]
        op.keys = ()
        op.try_complete = _finished
        if in_heap:
            self._done_in_heap += 1
            if self._done_in_heap > 32 and self._done_in_heap * 2 > len(self._deadlines):
                # Amortised O(1) per operation: a rebuild halves the heap at least.
                self._deadlines = [entry for entry in self._deadlines if not entry[2].done]
                heapq.heapify(self._deadlines)
                self._done_in_heap = 0
