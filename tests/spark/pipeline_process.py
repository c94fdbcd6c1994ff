"""The pipeline as a subprocess: start it, watch its batch lines, SIGKILL it with its JVM.

`oncelog pipeline averages` runs in its own session (process group). Killing it means killing
the Python driver, the JVM it launched and the Python workers — and PySpark's worker daemon
puts itself in a process group of its own, so a killpg alone could leave it behind. `kill()`
therefore snapshots every descendant (from /proc) first, then SIGKILLs the group and each of
them, and waits until none is left.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic
from tests.processes import descendants
from tests.spark.spark_env import JAVA_OPTIONS, spark_env

BATCH = re.compile(r"^batch (\d+) (?:rows (\d+)|skipped)")


def _sigkill(pid: int, *, group: bool = False) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        (os.killpg if group else os.kill)(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class PipelineProcess:
    """One `oncelog pipeline averages` run; stdout lines are collected by a reader thread."""

    def __init__(self, args: list[str], log: Path) -> None:
        self.args = args
        self.log = log
        self.lines: list[str] = []
        self._cond = threading.Condition()
        self._tree: set[int] = set()
        env = {**os.environ, **spark_env(), "PYTHONUNBUFFERED": "1"}
        with open(log, "ab") as err:
            err.write(f"\n=== {' '.join(args)}\n".encode())
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "oncelog.cli.main",
                    "--log-level",
                    "WARNING",
                    "pipeline",
                    "averages",
                    *args,
                ],
                stdout=subprocess.PIPE,
                stderr=err,
                text=True,
                env=env,
                start_new_session=True,
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        """Remember the process tree while the driver lives: once it dies, its orphans are
        re-parented and no longer findable from its pid (the worker daemon is in another group).
        """
        while self.proc.poll() is None:
            self._tree |= descendants(self.proc.pid)
            time.sleep(0.5)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def batches(self) -> list[tuple[int, int | None]]:
        """(batch id, rows or None when skipped) for every batch line so far."""
        out = []
        for line in list(self.lines):
            match = BATCH.match(line)
            if match:
                out.append((int(match.group(1)), int(match.group(2)) if match.group(2) else None))
        return out

    def wait_for(self, pattern: str, timeout: float) -> re.Match[str]:
        """The first stdout line matching `pattern`; fails if the process ends or time runs out."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    match = regex.search(line)
                    if match:
                        return match
                seen = len(self.lines)
                if self.proc.poll() is not None and not self._reader.is_alive():
                    raise AssertionError(
                        f"pipeline exited ({self.proc.returncode}) before {pattern!r}:\n"
                        + self.tail()
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting for {pattern!r}:\n" + self.tail())
                self._cond.wait(min(left, 0.5))

    def wait_for_batch(self, minimum: int, timeout: float) -> int:
        """Wait until a batch with id ≥ `minimum` has been reported; its id."""
        deadline = time.monotonic() + timeout
        while True:
            done = [b for b, _ in self.batches() if b >= minimum]
            if done:
                return done[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no batch ≥ {minimum} in time:\n" + self.tail())
            if self.proc.poll() is not None and not self._reader.is_alive():
                raise AssertionError(f"pipeline exited before batch {minimum}:\n" + self.tail())
            time.sleep(0.05)

    def tail(self, n: int = 40) -> str:
        try:
            err = self.log.read_text(errors="replace").splitlines()[-n:]
        except OSError:
            err = []
        return "stdout:\n" + "\n".join(self.lines[-n:]) + "\nstderr:\n" + "\n".join(err)

    def wait(self, timeout: float) -> int:
        """Exit code of the driver; kills everything if it does not end in time."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(
                f"pipeline did not finish in {timeout}s:\n" + self.tail()
            ) from None
        self._reap()
        return code

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM (clean stop), then SIGKILL if needed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        """SIGKILL the driver, its JVM and every Python worker, and wait until all are gone."""
        tree = self._tree | descendants(self.proc.pid)
        _sigkill(self.proc.pid, group=True)
        for pid in tree:
            _sigkill(pid)
        self.proc.wait()
        self._reap(tree)

    def _reap(self, tree: set[int] | None = None) -> None:
        """Make sure no process of this run survives (the JVM exits when the driver does)."""
        tree = (tree or set()) | self._tree
        deadline = time.monotonic() + 30
        while True:
            left = [pid for pid in tree if _alive(pid) and pid != os.getpid()]
            try:
                os.killpg(self.proc.pid, 0)
                group_alive = True
            except ProcessLookupError:
                group_alive = False
            if not left and not group_alive:
                return
            if time.monotonic() > deadline:
                for pid in left:
                    _sigkill(pid)
                if group_alive:
                    _sigkill(self.proc.pid, group=True)
                deadline = time.monotonic() + 10
            time.sleep(0.1)


@pytest.fixture
def pipelines(tmp_path: Path) -> Iterator[list[PipelineProcess]]:
    """Start pipelines with `run(pipelines, args)`; all are killed at teardown."""
    started: list[PipelineProcess] = []
    yield started
    for proc in started:
        if proc.proc.poll() is None:
            proc.kill()
        else:
            proc._reap()


def run(started: list[PipelineProcess], args: list[str], log: Path) -> PipelineProcess:
    proc = PipelineProcess(args, log)
    started.append(proc)
    return proc


#: Broker settings for pipeline tests: small internal topics, quick rebalances.
BROKER_OVERRIDES = {
    "transaction.state.log.num.partitions": "4",
    "offsets.topic.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "100",
}
INPUT = "events"
OUTPUT = "averages"
#: Event i has timestamp TS_BASE + i * STEP_MS (a fixed past time: windows are deterministic).
TS_BASE = 1_700_000_000_000
STEP_MS = 100


def generate(bootstrap: str, count: int, first: int = 0, *extra: str) -> None:
    """`oncelog pipeline generate` in-process (no JVM needed for the input)."""
    from oncelog.cli.main import main

    args = ["pipeline", "generate", "--bootstrap-server", bootstrap, "--topic", INPUT,
            "--count", str(count), "--first", str(first), "--keys", "5", "--partitions", "3",
            "--start-ms", str(TS_BASE), "--step-ms", str(STEP_MS), *extra]  # fmt: skip
    assert main(args) == 0


def averages_args(bootstrap: str, checkpoint: Path, *extra: str) -> list[str]:
    """Arguments of `pipeline averages` for tests: local[2,4] so Spark retries failed tasks."""
    return ["--bootstrap-server", bootstrap, "--input", INPUT, "--output", OUTPUT,
            "--checkpoint", str(checkpoint), "--master", "local[2,4]",
            "--conf", "spark.driver.memory=768m",
            "--conf", f"spark.driver.extraJavaOptions={JAVA_OPTIONS}", *extra]  # fmt: skip


#: Seconds a pipeline run may take before a test gives up on it.
RUN_TIMEOUT = 150


@pytest.fixture
def pbroker(broker_factory: type[BrokerProcess]) -> BrokerProcess:
    """A broker with the pipeline's input (3 partitions) and output (2) topics."""
    broker = broker_factory(overrides=BROKER_OVERRIDES).start()
    create_topic(broker.bootstrap, INPUT, 3)
    create_topic(broker.bootstrap, OUTPUT, 2)
    return broker


def run_to_end(started: list[PipelineProcess], args: list[str], log: Path) -> PipelineProcess:
    """A run that processes everything available (--available-now) and exits 0."""
    proc = run(started, [*args, "--available-now"], log)
    code = proc.wait(RUN_TIMEOUT)
    assert code == 0, proc.tail()
    return proc


def checkpoint_batches(checkpoint: Path, log: str) -> set[int]:
    """Batch ids in the checkpoint's `offsets` (planned) or `commits` (finished) log."""
    directory = checkpoint / log
    if not directory.is_dir():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}


def batch_in_flight(checkpoint: Path, min_age: float = 0.0) -> int | None:
    """The batch Spark has planned but not finished (offsets/N without commits/N), or None.

    That is what "mid-batch" means for Spark's write-ahead log: a crash now makes a restart
    run batch N again. `min_age`: only once offsets/N is that many seconds old, so the batch
    is past planning and its tasks are running.
    """
    planned = checkpoint_batches(checkpoint, "offsets")
    if not planned:
        return None
    last = max(planned)
    if last in checkpoint_batches(checkpoint, "commits"):
        return None
    try:
        age = time.time() - (checkpoint / "offsets" / str(last)).stat().st_mtime
    except FileNotFoundError:
        return None
    return last if age >= min_age else None


def last_batch_seconds(checkpoint: Path) -> float | None:
    """How long the last finished batch took (offsets/N written to commits/N written)."""
    committed = checkpoint_batches(checkpoint, "commits")
    if not committed:
        return None
    last = str(max(committed))
    try:
        done = (checkpoint / "commits" / last).stat().st_mtime
        return done - (checkpoint / "offsets" / last).stat().st_mtime
    except FileNotFoundError:
        return None


def kill_mid_batch(
    checkpoint: Path,
    kill: Callable[[], None],
    what: str,
    after: int = -1,
    min_age: float = 0.3,
    share: float | None = None,
) -> int:
    """Once a batch after `after` has been running for `min_age` s, `kill`; the batch (checked
    to be unfinished then). With `share`, at most that share of the last finished batch's
    duration: a machine fast enough to finish batches within `min_age` still gets a kill
    inside one."""
    deadline = time.monotonic() + RUN_TIMEOUT
    age = min_age
    while (batch := batch_in_flight(checkpoint, age)) is None or batch <= after:
        if time.monotonic() > deadline:
            raise AssertionError(f"no batch in flight to {what} in")
        if share is not None and (took := last_batch_seconds(checkpoint)) is not None:
            age = min(min_age, share * took)
        time.sleep(0.02 if share is not None else 0.05)
    checked = time.time()
    kill()
    commit = checkpoint / "commits" / str(batch)
    # Coarse file timestamps may lag a little: a commit written before the check is excluded
    # by the check itself, this only guards against a kill that took long.
    assert not commit.exists() or commit.stat().st_mtime >= checked - 0.05, (
        f"batch {batch} finished before the {what}"
    )
    return batch
