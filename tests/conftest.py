"""Shared fixtures: a real broker process per test, on an ephemeral port.

Also two guards that keep one stuck test from stalling the whole run: pytest-timeout's clock
stops while a report is written, and the session ends even if a test leaked a thread.
"""

from __future__ import annotations

import concurrent.futures.thread
import contextlib
import faulthandler
import os
import signal
import sys
import threading
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.processes import descendants


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    started: list[BrokerProcess] = []

    class Factory(BrokerProcess):
        def __init__(self, name: str = "data", overrides: dict[str, str] | None = None) -> None:
            super().__init__(tmp_path / name, overrides)
            started.append(self)

    yield Factory
    for proc in started:
        proc.kill()


@pytest.fixture
def broker(broker_factory: type[BrokerProcess]) -> BrokerProcess:
    """A running broker with default config; `broker.bootstrap` is its address."""
    return broker_factory().start()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport() -> Generator[None, Any, Any]:
    """Pause pytest-timeout's alarm while the report is made.

    Its SIGALRM raises wherever Python is. Fired while pytest formats a failure (looking up
    the source of every frame can take seconds on a loaded machine), it is an INTERNALERROR:
    pytest stops without tearing down the tests' brokers. Paused here, it fires in the next
    phase of the test instead, as an ordinary failure.
    """
    remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    if remaining:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        return (yield)
    finally:
        if remaining:
            signal.setitimer(signal.ITIMER_REAL, max(remaining, 1.0))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """End the run even if a test leaked a thread that will never stop.

    The interpreter joins every non-daemon thread before it exits: one stuck thread would hold
    the run until CI's limit. Such threads are named and their stacks printed, the child
    processes the tests left behind are killed by pid, and the process exits with pytest's
    status.
    """
    # An idle ThreadPoolExecutor worker is told to end at exit: it holds nothing.
    idle_worker = concurrent.futures.thread._worker  # type: ignore[attr-defined]
    stuck = [
        t
        for t in threading.enumerate()
        if t is not threading.main_thread()
        and not t.daemon
        and t.is_alive()
        and getattr(t, "_target", None) is not idle_worker
    ]
    for thread in stuck:
        thread.join(timeout=5.0 / len(stuck))
    stuck = [t for t in stuck if t.is_alive()]
    children = sorted(descendants(os.getpid(), living_only=True))
    if not stuck and not children:
        return
    left = [f"{pid} ({_command(pid)})" for pid in children]
    for pid in children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    sys.stdout.flush()
    err = sys.stderr
    if children:
        err.write(f"\nkilled {len(children)} process(es) the tests left running: {left}\n")
    if stuck:
        names = ", ".join(t.name for t in stuck)
        err.write(f"\n{len(stuck)} thread(s) a test left running: {names}; their stacks:\n")
        err.flush()
        faulthandler.dump_traceback(file=err, all_threads=True)
        err.flush()
        status = getattr(config, "_oncelog_exitstatus", 1)
        os._exit(int(status))


def _command(pid: int) -> str:
    """A process's command line, shortened (for the report of what was left running)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in words if w)[:200]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config._oncelog_exitstatus = exitstatus  # type: ignore[attr-defined]
