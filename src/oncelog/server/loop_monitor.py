"""Latency diagnostics for benchmarks: event-loop lag, loop stalls with their stacks, GC pauses.

Off unless the environment names a file: ``ONCELOG_LOOP_MONITOR=/path/stats-{pid}.json``
(read by `BrokerServer.serve_until_stopped`). Not a broker setting: it is for
`bench/latency.py` and for looking at one broker's tail by hand; it costs a timer every
``ONCELOG_LOOP_MONITOR_MS`` (default 4) on the loop and a thread that wakes as often.

What it records, every figure with `time.monotonic()` stamps (one clock for every process of
the machine, so a benchmark can pick the events of its own time window):

* lag: how late the loop ran a timer due every interval (its overshoot), as a histogram, and
  every overshoot of at least ``SLOW_MS`` with its time (2 ms: uvloop's timers have 1 ms
  resolution), the loop thread's CPU time and its run-queue wait (Linux schedstat) since
  the timer ran before: busy loop, blocked loop or a machine whose cores were busy
  elsewhere;
* stalls: a watchdog thread notices when the loop has not run the timer for ``STALL_MS`` and
  takes the loop thread's stack once per stall, at most 10 a second
  (`faulthandler.dump_traceback`): what held the loop. A stall inside a system call (fsync)
  is seen at once; one in Python code after the interpreter's switch interval (5 ms), when
  the watchdog gets the GIL;
* GC: every collection's generation and pause (`gc.callbacks`), counts and a histogram per
  generation, each pause of at least ``SLOW_MS`` with its time.

The summary is written as JSON (temporary file + rename, no fsync: it is a diagnostic) by the
watchdog thread every second and once more at stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import json
import os
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, Any

ENV_PATH = "ONCELOG_LOOP_MONITOR"
ENV_INTERVAL = "ONCELOG_LOOP_MONITOR_MS"
SLOW_MS = 2.0
STALL_MS = 4.0
STACKS_PER_S = 10
#: Histogram bucket upper bounds, ms (the last bucket is everything above).
BUCKETS_MS = (0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 20, 30, 50, 100, 250, 500, 1000)
MAX_EVENTS = 5000
DUMP_EVERY_S = 1.0


def _bucket(ms: float) -> int:
    for i, bound in enumerate(BUCKETS_MS):
        if ms <= bound:
            return i
    return len(BUCKETS_MS)


def _short_frame(line: str) -> str:
    """`  File "/x/src/oncelog/a.py", line 3 in f` as `f (oncelog/a.py:3)`."""
    try:
        where, _, rest = line.strip()[len('File "') :].partition('", line ')
        lineno, _, name = rest.partition(" in ")
    except ValueError:
        return line.strip()
    for marker in ("/site-packages/", "/src/", "/lib/python"):
        if marker in where:
            where = where.split(marker, 1)[1]
            break
    return f"{name} ({where}:{lineno})"


def _thread_stack(dump: str, ident: int, limit: int = 14) -> list[str]:
    """The frames (innermost first) of thread `ident` in a faulthandler dump."""
    out: list[str] = []
    mine = False
    for line in dump.splitlines():
        if line.startswith(("Thread 0x", "Current thread 0x")):
            mine = int(line.split("0x", 1)[1].split()[0], 16) == ident
        elif mine and line.strip().startswith("File "):
            out.append(_short_frame(line))
    return out[:limit]


class LoopMonitor:
    def __init__(self, path: Path, interval_ms: float = 4.0) -> None:
        self.path = path
        self.interval = interval_ms / 1000
        self.started = time.monotonic()
        self.lag_hist = [0] * (len(BUCKETS_MS) + 1)
        self.lag_samples = 0
        self.lag_max_ms = 0.0
        # The newest MAX_EVENTS of each kind (a benchmark picks its own time window).
        #: (time, lag ms, loop CPU ms, run-queue wait ms, ms since the previous tick)
        self.slow: deque[tuple[float, float, float, float, float]] = deque(maxlen=MAX_EVENTS)
        self.stalls: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.gc_hist = {g: [0] * (len(BUCKETS_MS) + 1) for g in range(3)}
        self.gc_count = {g: 0 for g in range(3)}
        self.gc_total_ms = {g: 0.0 for g in range(3)}
        self.gc_max_ms = {g: 0.0 for g in range(3)}
        self.gc_slow: deque[tuple[float, int, float, int]] = deque(maxlen=MAX_EVENTS)
        """(time, generation, ms, collected)"""
        self._gc_start = 0.0
        self._beat = time.monotonic()
        self._due = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = threading.get_ident()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dump: IO[bytes] | None = None
        self._schedstat = -1
        self._last = self._cpu = 0.0
        self._waited = -1

    # -- on the loop ---------------------------------------------------------------------------

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        try:  # Linux: this thread's scheduler statistics (run time, run-queue wait, slices)
            self._schedstat = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        except OSError:
            self._schedstat = -1
        self._last, self._cpu, self._waited = time.monotonic(), time.thread_time(), -1
        self._waited = self._runqueue_ns()
        gc.callbacks.append(self._on_gc)
        self._due = time.monotonic() + self.interval
        self._timer = self._loop.call_at(self._loop.time() + self.interval, self._tick)
        self._thread = threading.Thread(target=self._watch, name="loop-monitor", daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        now = time.monotonic()
        cpu = time.thread_time()
        waited = self._runqueue_ns()
        lag_ms = max(0.0, (now - self._due) * 1000)
        self._beat = now
        self.lag_samples += 1
        self.lag_hist[_bucket(lag_ms)] += 1
        self.lag_max_ms = max(self.lag_max_ms, lag_ms)
        if lag_ms >= SLOW_MS:
            # Since the previous tick: the loop thread's CPU time, and its time runnable but
            # waiting for a core (schedstat). Much lag with little of either: it was blocked
            # in a system call (or on the GIL); lag ~ run-queue wait: the machine's cores
            # were busy elsewhere.
            self.slow.append(
                (
                    round(self._due, 6),
                    round(lag_ms, 3),
                    round((cpu - self._cpu) * 1000, 3),
                    round((waited - self._waited) / 1e6, 3) if waited >= 0 else -1.0,
                    round((now - self._last) * 1000, 3),
                )
            )
        self._last, self._cpu, self._waited = now, cpu, waited
        assert self._loop is not None
        self._due = now + self.interval
        self._timer = self._loop.call_at(self._loop.time() + self.interval, self._tick)

    def _runqueue_ns(self) -> int:
        """The loop thread's time spent waiting on a run queue so far, ns (-1: unknown)."""
        if self._schedstat < 0:
            return -1
        try:
            return int(os.pread(self._schedstat, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            return -1

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with contextlib.suppress(ValueError):
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)
        self.dump()
        if self._dump is not None:
            self._dump.close()
        if self._schedstat >= 0:
            os.close(self._schedstat)
            self._schedstat = -1

    # -- GC callbacks (whichever thread collects) ----------------------------------------------

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
            return
        ms = (time.perf_counter() - self._gc_start) * 1000
        gen = info.get("generation", 0)
        self.gc_count[gen] += 1
        self.gc_total_ms[gen] += ms
        self.gc_max_ms[gen] = max(self.gc_max_ms[gen], ms)
        self.gc_hist[gen][_bucket(ms)] += 1
        if ms >= SLOW_MS:
            self.gc_slow.append(
                (round(time.monotonic(), 6), gen, round(ms, 3), info.get("collected", 0))
            )

    # -- the watchdog thread -------------------------------------------------------------------

    def _watch(self) -> None:
        stalled_since = 0.0
        last_dump, last_stack = time.monotonic(), 0.0
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            behind = now - max(self._beat, self._due)
            if behind * 1000 >= STALL_MS:
                beat = self._beat
                if stalled_since != beat:  # once per stall
                    stalled_since = beat
                    # A dump holds the GIL for a while: at most STACKS_PER_S of them (on a
                    # starved machine there are dozens of stalls a second, all alike).
                    stack: list[str] = []
                    if now - last_stack >= 1 / STACKS_PER_S:
                        last_stack = now
                        stack = self._loop_stack()
                    self.stalls.append(
                        {
                            "time": round(now, 6),
                            "behind_ms": round(behind * 1000, 3),
                            "stack": stack,
                        }
                    )
            if now - last_dump >= DUMP_EVERY_S:
                last_dump = now
                with contextlib.suppress(OSError):
                    self.dump()

    def _loop_stack(self) -> list[str]:
        """The loop thread's stack, from faulthandler's dump (C, reads the frames in place).
        Not `sys._current_frames()`: walking another thread's frame objects has a history of
        crashes on 3.11 (cpython#99110, #111363), and a broker running the first version of
        this monitor died of a segfault in a thread."""
        if self._dump is None:
            self._dump = tempfile.TemporaryFile()  # noqa: SIM115 - kept for every stall
        self._dump.seek(0)
        self._dump.truncate()
        faulthandler.dump_traceback(self._dump, all_threads=True)
        self._dump.seek(0)
        text = self._dump.read().decode("utf-8", "replace")
        return _thread_stack(text, self._loop_thread)

    def snapshot(self) -> dict[str, Any]:
        # No lock: the GC callback runs in whichever thread allocates, the loop thread or this
        # one, possibly while that thread is in here; a lock taken here and there deadlocks
        # (it did: the broker hung). Each update is a few bytecodes under the GIL, and a
        # summary a few events out of step is good enough for a diagnostic.
        return {
            "pid": os.getpid(),
            "started": self.started,
            "written": time.monotonic(),
            "interval_ms": self.interval * 1000,
            "buckets_ms": list(BUCKETS_MS),
            "lag": {
                "samples": self.lag_samples,
                "hist": list(self.lag_hist),
                "max_ms": round(self.lag_max_ms, 3),
                "slow": _copy(self.slow),
            },
            "stalls": _copy(self.stalls),
            "gc": {
                "count": dict(self.gc_count),
                "total_ms": {g: round(v, 3) for g, v in self.gc_total_ms.items()},
                "max_ms": {g: round(v, 3) for g, v in self.gc_max_ms.items()},
                "hist": {g: list(h) for g, h in self.gc_hist.items()},
                "slow": _copy(self.gc_slow),
                "thresholds": list(gc.get_threshold()),
                "frozen": gc.get_freeze_count(),
            },
        }

    def dump(self) -> None:
        data = json.dumps(self.snapshot())
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(data)
        os.replace(tmp, self.path)


def _copy(events: deque[Any]) -> list[Any]:
    """A list of `events`, which another thread may append to meanwhile."""
    for _ in range(10):
        try:
            return list(events)
        except RuntimeError:  # deque mutated during iteration
            continue
    return []


def from_environment() -> LoopMonitor | None:
    """A monitor if ONCELOG_LOOP_MONITOR names a file, else None ("{pid}" in the name is
    replaced by the process id: brokers started with one environment write apart)."""
    path = os.environ.get(ENV_PATH)
    if not path:
        return None
    interval = float(os.environ.get(ENV_INTERVAL, "4") or 4)
    return LoopMonitor(Path(path.replace("{pid}", str(os.getpid()))), interval)
