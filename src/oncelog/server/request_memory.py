"""One budget for the request bytes every connection holds (Kafka's `queued.max.request.bytes`).

Kafka's SocketServer takes each request's buffer from a memory pool (`SimpleMemoryPool`, not
strict) once the request's size is read: while any of the budget is left the whole request is
granted, so the pool goes over by at most one request per connection that asked at that
moment; once none is left, a connection that wants memory for its next request stops reading
until some comes back. A granted request is always read to its end, so requests half-read
never hold the budget against each other.

Here a connection reports what it holds (requests received and not yet handled, and the one
arriving, counted at its declared size once granted) after each read and each request it
handled, and asks `spent` before it reads on into a new request. Only requests that wait use
the budget: behind a long-polling Fetch, or for a client that does not read its answers; the
others are handled as they arrive. Sans-IO: no clock, no sockets.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable


class RequestMemory:
    """What connections hold, against `limit` bytes (None: unlimited, Kafka's -1, still
    counted for the metrics)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self._held: dict[Hashable, int] = {}
        #: Connections stopped for memory, in the order they stopped: called back in turn.
        self._waiting: dict[Hashable, Callable[[], None]] = {}

    @property
    def spent(self) -> bool:
        """No budget left: a connection may not start on a new request."""
        return self.limit is not None and self.used >= self.limit

    @property
    def available(self) -> int | None:
        return None if self.limit is None else self.limit - self.used

    @property
    def waiting(self) -> int:
        """Connections that stopped reading for memory."""
        return len(self._waiting)

    def hold(self, owner: Hashable, nbytes: int) -> None:
        """`owner` now holds `nbytes` (and no longer waits); less held may wake others."""
        self._waiting.pop(owner, None)
        old = self._held.get(owner, 0)
        if nbytes == old:
            return
        self.used += nbytes - old
        if nbytes:
            self._held[owner] = nbytes
        else:
            del self._held[owner]
        if nbytes < old:
            self._wake()

    def wait(self, owner: Hashable, resume: Callable[[], None]) -> None:
        """`owner` stopped reading for memory: `resume` is called (once) when the budget is
        no longer spent."""
        self._waiting[owner] = resume

    def release(self, owner: Hashable) -> None:
        """`owner` is gone: what it held comes back."""
        self.hold(owner, 0)

    def _wake(self) -> None:
        if not self._waiting or self.spent:
            return
        waiting, self._waiting = self._waiting, {}
        for resume in waiting.values():
            resume()
