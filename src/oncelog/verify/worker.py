"""Writer clients in their own processes, so a fault can crash them (SIGKILL) for real.

`python -m oncelog.verify.worker SPEC_JSON` runs one producer, transactional producer or copier
and prints every history operation it records as a JSON line on stdout. The parent's
`ProcessClient` thread copies those lines into the run's history as they arrive, so the
history stays in real-time order; an operation cut short by SIGKILL is left as an invocation
without an outcome, which the checker treats as indeterminate.

SIGTERM asks a worker to finish: producers stop after the current operation, copiers drain
what is left (as in-process copiers do once the producers are done).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import IO, Any

from oncelog.verify import history as h
from oncelog.verify.clients import Client, IdempotentProducer, TransactionalProducer
from oncelog.verify.copiers import HistoryCopier

#: The writer roles by `WorkerSpec.role`: what a worker process runs, and what `workload.Run`
#: runs in threads without the crash fault.
IN_PROCESS: dict[str, type[Client]] = {
    "producer": IdempotentProducer,
    "txn": TransactionalProducer,
    "copier": HistoryCopier,
}


@dataclass(slots=True)
class WorkerSpec:
    """What one worker process runs; `txn_base` keeps transaction numbers unique per spawn.

    `topic` is the run's main topic (the copiers' input, the transactional ids' prefix);
    `topics` every writable topic the producers spread their sends over (main first; empty:
    the main topic only).
    """

    role: str
    name: str
    bootstrap: str
    topic: str
    output_topic: str
    partitions: int
    per_client_rate: float
    abort_probability: float
    txn_base: int
    generation_base: int = 0
    acks: str = "all"
    topics: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps({k: getattr(self, k) for k in self.__slots__})

    @classmethod
    def from_json(cls, text: str) -> WorkerSpec:
        return cls(**json.loads(text))


@dataclass(slots=True)
class _WorkerConfig:
    """The part of RunConfig that clients read."""

    partitions: int
    abort_probability: float
    acks: str = "all"


class _StdoutRecorder:
    """The Recorder interface, writing each operation as a JSON line on stdout."""

    def __init__(self, out: IO[str]) -> None:
        self._out = out
        self._lock = threading.Lock()

    def write(self, op: h.Op) -> None:
        line = h.dumps(op)
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


@dataclass
class WorkerRun:
    """Stands in for `workload.Run` inside a worker process (a `clients.RunContext`)."""

    spec: WorkerSpec
    stop: threading.Event = field(default_factory=threading.Event)
    producers_done: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.topic = self.spec.topic
        self.topics = list(self.spec.topics) or [self.spec.topic]
        self.output_topic = self.spec.output_topic
        self.bootstrap = self.spec.bootstrap
        self.per_client_rate = self.spec.per_client_rate
        self.config = _WorkerConfig(
            self.spec.partitions, self.spec.abort_probability, self.spec.acks
        )
        self.recorder = _StdoutRecorder(sys.stdout)
        self._txn = itertools.count(self.spec.txn_base + 1)

    def next_txn(self) -> int:
        return next(self._txn)


def main(argv: list[str]) -> int:
    spec = WorkerSpec.from_json(argv[0])
    run = WorkerRun(spec)

    def finish(_signum: int, _frame: Any) -> None:
        run.stop.set()
        run.producers_done.set()

    signal.signal(signal.SIGTERM, finish)
    threading.Thread(target=_orphan_watch, args=(run,), daemon=True).start()
    # The same name (hence the same transactional.id, which fences the killed instance) with
    # process labels of its own: generations count from 1000 x the spawn number.
    client = IN_PROCESS[spec.role](spec.name, run)
    client.generation = spec.generation_base
    client.work()
    return 0


def _orphan_watch(run: WorkerRun) -> None:
    """Finish when the parent is gone (it was killed, or its run broke): a worker never
    outlives the run that started it."""
    parent = os.getppid()
    while not run.stop.wait(1.0):
        if os.getppid() != parent:
            run.stop.set()
            run.producers_done.set()


class ProcessClient(threading.Thread):
    """Parent side of one worker: (re)spawns it and relays its operations into the history."""

    def __init__(self, spec: WorkerSpec, recorder: Any) -> None:
        super().__init__(name=f"{spec.name}-relay", daemon=True)
        self.spec = spec
        self.base = spec.name
        self.recorder = recorder
        self.spawns = 0
        self.proc: subprocess.Popen[str] | None = None
        self.failure: BaseException | None = None
        self._lock = threading.Lock()
        self._respawned = threading.Event()
        self._crashed = False
        self._finishing = False
        self._spawn()

    def _spawn(self) -> None:
        spec = WorkerSpec(**{k: getattr(self.spec, k) for k in WorkerSpec.__slots__})
        spec.txn_base = self.spec.txn_base + self.spawns * 100_000
        spec.generation_base = self.spawns * 1000
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oncelog.verify.worker", spec.to_json()],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.spawns += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def crash(self) -> str:
        """SIGKILL the worker (a client process crash); heal() starts a new one."""
        with self._lock:
            proc = self.proc
            assert proc is not None
            self._crashed = True
            self._respawned.clear()
            proc.kill()
            proc.wait()
            return f"SIGKILL {self.base} spawn {self.spawns - 1} (pid {proc.pid})"

    def heal(self) -> str | None:
        with self._lock:
            if not self._crashed:
                return None
            self._crashed = False
            if not self._finishing:
                self._spawn()
            self._respawned.set()
            return f"started {self.base} spawn {self.spawns - 1}"

    def kill(self) -> None:
        """SIGKILL the worker if it still runs (cleanup of a run that ended early)."""
        with self._lock:
            self._finishing = True
            if self.alive:
                assert self.proc is not None
                self.proc.kill()
                self.proc.wait()
            self._respawned.set()

    def finish(self) -> None:
        """Ask the worker to finish (SIGTERM); join() waits for its last operations."""
        with self._lock:
            self._finishing = True
            if self.alive:
                assert self.proc is not None
                self.proc.send_signal(signal.SIGTERM)

    def run(self) -> None:
        try:
            while self._relay():
                pass
        except BaseException as e:  # reported in the run's summary
            self.failure = e

    def _relay(self) -> bool:
        """Copy one worker's operations; True when a respawned worker follows."""
        proc = self.proc
        assert proc is not None and proc.stdout is not None
        for line in proc.stdout:
            if line.endswith("\n"):  # a line cut short by SIGKILL is dropped
                self.recorder.write(h.op_from_dict(json.loads(line)))
        proc.wait()
        while True:
            with self._lock:
                if self.proc is not proc:
                    return True
                if not self._crashed:
                    killed = proc.returncode == -signal.SIGKILL and self._finishing
                    if proc.returncode not in (0, None) and not killed:
                        raise RuntimeError(f"worker {self.base} exited with {proc.returncode}")
                    return False
            self._respawned.wait(0.5)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
