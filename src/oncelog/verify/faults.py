"""Faults the workload injects, and the local broker process they act on.

Why an interface: `run` schedules faults without knowing what they do, so network partitions
(a proxy or iptables between brokers) and multi-broker targets can be added as new `Fault`
implementations without touching the scheduler. Every fault can be healed, and healing is
idempotent, so the run can always end with "heal everything, then read".
"""

from __future__ import annotations

import itertools
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Protocol

from oncelog.verify.processes import LocalBroker


class NotInjected(Exception):
    """start() found nothing to hit (e.g. no writer alive to crash): no fault window."""


class Fault(ABC):
    """One kind of fault against one target: start() injects it, heal() undoes it (idempotent)."""

    kind: str = "fault"

    @property
    @abstractmethod
    def target(self) -> str:
        """What the fault hits, for the history and the timeline."""

    @abstractmethod
    def start(self) -> str | None:
        """Inject the fault; returns a detail for the history. Raises NotInjected when there
        is nothing to hit, so no fault window is recorded for it."""

    @abstractmethod
    def heal(self) -> str | None:
        """Undo the fault if active (safe to call when it is not); returns a detail."""


class BrokerFault(Fault):
    """A fault on one broker process the tool started."""

    def __init__(self, broker: LocalBroker) -> None:
        self.broker = broker

    @property
    def target(self) -> str:
        return self.broker.name


class KillFault(BrokerFault):
    """SIGKILL the broker; heal restarts it on the same port (recovery from an unclean stop)."""

    kind = "kill"

    def start(self) -> str | None:
        self.broker.kill()
        return "SIGKILL"

    def heal(self) -> str | None:
        if self.broker.alive():
            return None
        began = time.monotonic()
        self.broker.start()
        return f"restarted in {time.monotonic() - began:.1f}s"


class PauseFault(BrokerFault):
    """SIGSTOP the broker (a process that hangs, e.g. a long GC pause); heal sends SIGCONT."""

    kind = "pause"

    def start(self) -> str | None:
        self.broker.pause()
        return "SIGSTOP"

    def heal(self) -> str | None:
        if not self.broker.paused:
            return None
        self.broker.resume()
        return "SIGCONT"


class Crashable(Protocol):
    """A client process that can be killed and started again (verify.worker.ProcessClient)."""

    base: str

    @property
    def alive(self) -> bool: ...

    def crash(self) -> str: ...

    def heal(self) -> str | None: ...


class ClientCrashFault(Fault):
    """SIGKILL one writer client process (round robin); heal starts a new instance of it.

    The new instance re-initialises the same transactional.id, which fences the dead one's
    open transaction; a copier then resumes from its group's committed offsets.
    """

    kind = "crash"

    def __init__(self, clients: Sequence[Crashable]) -> None:
        if not clients:
            raise ValueError("the crash fault needs writer clients (producers or copiers)")
        self.clients = list(clients)
        self._next = itertools.cycle(self.clients)
        self._victim: Crashable | None = None
        self._last = "clients"

    @property
    def target(self) -> str:
        return self._last

    def start(self) -> str | None:
        for _ in self.clients:
            victim = next(self._next)
            if victim.alive:
                self._victim, self._last = victim, victim.base
                return victim.crash()
        raise NotInjected("no writer client is alive to crash")

    def heal(self) -> str | None:
        victim, self._victim = self._victim, None
        return victim.heal() if victim is not None else None


BROKER_FAULTS: dict[str, type[KillFault] | type[PauseFault]] = {
    "kill": KillFault,
    "pause": PauseFault,
}
CLIENT_FAULTS = ("crash",)
FAULT_NAMES = (*BROKER_FAULTS, *CLIENT_FAULTS)


def check_fault_names(names: Sequence[str], own_broker: bool) -> None:
    """Unknown names, or broker faults without a broker the tool started, are errors."""
    for name in names:
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULT_NAMES)}")
        if name in BROKER_FAULTS and not own_broker:
            raise ValueError(f"the {name} fault needs --start-broker")


def make_faults(
    names: Sequence[str], broker: LocalBroker | None, clients: Sequence[Crashable]
) -> list[Fault]:
    """The faults named on the command line: kill and pause hit the tool's broker, crash the
    writer client processes."""
    check_fault_names(names, broker is not None)
    out: list[Fault] = []
    crash: ClientCrashFault | None = None  # one rotation over the clients, however often named
    for name in names:
        if name in BROKER_FAULTS:
            assert broker is not None
            out.append(BROKER_FAULTS[name](broker))
        else:
            crash = crash or ClientCrashFault(clients)
            out.append(crash)
    return out
