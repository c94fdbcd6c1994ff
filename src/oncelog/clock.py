"""Time as an injected dependency, so state machines can be tested with a manual clock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock milliseconds (for record timestamps) and monotonic milliseconds (for timers)."""

    def wall_ms(self) -> int: ...

    def monotonic_ms(self) -> int: ...


class SystemClock:
    """The real clock."""

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that only moves when a test tells it to."""

    def __init__(self, wall_ms: int = 1_700_000_000_000, monotonic_ms: int = 0) -> None:
        self._wall = wall_ms
        self._mono = monotonic_ms

    def wall_ms(self) -> int:
        return self._wall

    def monotonic_ms(self) -> int:
        return self._mono

    def advance(self, ms: int) -> None:
        self._wall += ms
        self._mono += ms
