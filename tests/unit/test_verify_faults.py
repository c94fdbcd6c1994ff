"""Client crash faults: a round with no writer alive injects nothing and records no window."""

from __future__ import annotations

import pytest

from oncelog.verify.faults import ClientCrashFault, NotInjected


class FakeWriter:
    """A crashable client as the fault sees it (the real ones are worker processes)."""

    def __init__(self, base: str, alive: bool) -> None:
        self.base = base
        self.alive = alive
        self.crashed = 0

    def crash(self) -> str:
        self.alive = False
        self.crashed += 1
        return f"SIGKILL {self.base}"

    def heal(self) -> str | None:
        self.alive = True
        return f"restarted {self.base}"


def test_crash_rotates_over_live_writers() -> None:
    a, b = FakeWriter("a", True), FakeWriter("b", True)
    fault = ClientCrashFault([a, b])
    assert fault.start() == "SIGKILL a" and fault.target == "a"
    assert fault.heal() == "restarted a"
    assert fault.start() == "SIGKILL b" and fault.target == "b"


def test_no_live_writer_is_not_a_fault_window() -> None:
    a = FakeWriter("a", False)
    fault = ClientCrashFault([a])
    with pytest.raises(NotInjected):
        fault.start()
    assert a.crashed == 0
    assert fault.heal() is None  # nothing to undo
