"""A real Spark standalone cluster for tests: one Master and N Workers on 127.0.0.1.

Started with the `spark-class` script the PySpark wheel ships, so it needs nothing beyond the
test venv and Java 17. Every service is bound to 127.0.0.1: `SPARK_LOCAL_IP` plus `--host`
(the web UIs follow `SPARK_LOCAL_IP`; the master's would otherwise listen on every interface),
and ports are ephemeral (the real ones are read back from the logs). Work dirs, local dirs and
logs live under the test's directory; the REST submission server stays off.

Every pid is ours: a watcher thread remembers each descendant of the Master and Workers (the
executors, their Python worker daemons) with its start time, so `close()` SIGKILLs exactly
those processes, even those re-parented after their parent died, and never a recycled pid.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.processes import descendants
from tests.spark.spark_env import JAVA_OPTIONS, WHEEL_SPARK_HOME, spark_home

SPARK_CLASS = WHEEL_SPARK_HOME / "bin" / "spark-class"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

MASTER_AT = re.compile(r"Starting Spark master at spark://127\.0\.0\.1:(\d+)")
MASTER_UI_AT = re.compile(r"Bound MasterWebUI to 127\.0\.0\.1, and started at http://[^:/]+:(\d+)")
WORKER_REGISTERED = "Successfully registered with master"
#: Detect lost workers in seconds, not the default minute (the heartbeat is a quarter of it).
WORKER_TIMEOUT_S = 10
START_TIMEOUT = 90.0


def _start_time(pid: int) -> int | None:
    """Field 22 of /proc/PID/stat (start time in clock ticks): tells a recycled pid apart."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[19])


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [part.decode(errors="replace") for part in f.read().split(b"\0") if part]
    except OSError:
        return []


def _sigkill_if_same(pid: int, started: int | None) -> None:
    if started is not None and _start_time(pid) == started:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def listening_sockets(pids: set[int]) -> list[tuple[int, str, int]]:
    """(pid, address, port) of every TCP socket in LISTEN state that one of `pids` holds.

    From /proc (no `ss` needed): the socket inodes of each pid's fds, matched against
    /proc/net/tcp and tcp6. IPv4-mapped IPv6 addresses are shown as IPv4.
    """
    owner: dict[str, int] = {}
    for pid in pids:
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if link.startswith("socket:["):
                        owner[link[8:-1]] = pid
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in owner:  # 0A: LISTEN
                    continue
                hex_ip, hex_port = local.split(":")
                raw = bytes.fromhex(hex_ip)
                # The kernel prints each 32-bit word in host (little-endian) order.
                words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                ip: ipaddress.IPv4Address | ipaddress.IPv6Address
                if len(words) == 4:
                    ip = ipaddress.IPv4Address(words)
                else:
                    ip = ipaddress.IPv6Address(words)
                    ip = ip.ipv4_mapped or ip
                out.append((owner[inode], str(ip), int(hex_port, 16)))
    return out


class SparkProcess:
    """One Master or Worker JVM (spark-class execs java, so the Popen pid is the JVM's)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log: Path) -> None:
        self.name = name
        self.log = log
        with open(log, "ab") as out:
            out.write(f"\n=== {' '.join(args)}\n".encode())
            self.proc = subprocess.Popen(
                [str(SPARK_CLASS), *args],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.started = time.monotonic()
        self._log_from = log.stat().st_size

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        """This run's part of the log."""
        with open(self.log, "rb") as f:
            f.seek(self._log_from)
            return f.read().decode(errors="replace")

    def wait_log(self, pattern: re.Pattern[str] | str, timeout: float = START_TIMEOUT) -> str:
        """The first match of `pattern` in this run's log (group 1 if any)."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        while True:
            match = regex.search(self.text())
            if match:
                return match.group(1) if regex.groups else match.group(0)
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name}: no {regex.pattern!r} in time:\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, n: int = 30) -> str:
        return "\n".join(self.text().splitlines()[-n:])

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)


class SparkStandalone:
    """Master + `workers` Workers (`cores` cores and `memory` each), all on 127.0.0.1."""

    def __init__(self, base: Path, workers: int = 2, cores: int = 1, memory: str = "1g") -> None:
        self.base = base
        self.cores = cores
        self.memory = memory
        self.master: SparkProcess | None = None
        self.workers: dict[int, SparkProcess] = {}
        self.size = workers
        self.master_port = 0
        self.ui_port = 0
        #: pid -> start time of every process seen under the Master and Workers.
        self._seen: dict[int, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        (base / "conf").mkdir(parents=True, exist_ok=True)  # empty: no spark-env.sh, defaults

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            # The wheel's Spark; its executors' Python workers import the installed PySpark.
            "SPARK_HOME": spark_home(),
            "SPARK_CONF_DIR": str(self.base / "conf"),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.base / "local"),
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": f"-Dspark.worker.timeout={WORKER_TIMEOUT_S} {JAVA_OPTIONS}",
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # The executors' Python workers: the venv's interpreter, which imports oncelog
            # and confluent-kafka.
            "PYSPARK_PYTHON": sys.executable,
            **extra,
        }

    def start(self) -> SparkStandalone:
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.master = SparkProcess(
            "master",
            [MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"],
            self.env(),
            self.base / "master.log",
        )
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()
        self.master_port = int(self.master.wait_log(MASTER_AT))
        self.ui_port = int(self.master.wait_log(MASTER_UI_AT))
        for n in range(1, self.size + 1):
            self.start_worker(n, wait=False)
        for worker in self.workers.values():
            worker.wait_log(WORKER_REGISTERED)
        self.wait_alive_workers(self.size)

    def start_worker(self, n: int, *, wait: bool = True) -> SparkProcess:
        """Start (or restart) worker `n`: a new process on a new port, the same work dir."""
        work = self.base / f"worker-{n}"
        local = self.base / f"worker-{n}-local"
        work.mkdir(exist_ok=True)
        local.mkdir(exist_ok=True)
        worker = SparkProcess(
            f"worker-{n}",
            [
                *(WORKER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"),
                *("--cores", str(self.cores), "--memory", self.memory),
                *("--work-dir", str(work), self.url),
            ],
            # The executors' local dirs (shuffle files, RocksDB's working copies) go here.
            self.env(SPARK_LOCAL_DIRS=str(local)),
            self.base / f"worker-{n}.log",
        )
        self.workers[n] = worker
        if wait:
            worker.wait_log(WORKER_REGISTERED)
        return worker

    def kill_worker(self, n: int) -> None:
        """SIGKILL the Worker JVM only (its executors notice and exit by themselves)."""
        self.workers[n].kill()

    def _watch(self) -> None:
        while not self._stop.wait(0.3):
            self.remember()

    def remember(self) -> None:
        with self._lock:
            for pid in self._roots():
                for child in descendants(pid) | {pid}:
                    if child not in self._seen:
                        started = _start_time(child)
                        if started is not None:
                            self._seen[child] = started

    def _known(self) -> list[tuple[int, int]]:
        with self._lock:
            return list(self._seen.items())

    def _roots(self) -> list[int]:
        procs = [self.master, *self.workers.values()]
        return [p.pid for p in procs if p is not None and p.alive()]

    def state(self) -> dict[str, Any]:
        """The master's JSON status page (workers, applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=10) as answer:
            state: dict[str, Any] = json.load(answer)
        return state

    def alive_workers(self) -> list[dict[str, Any]]:
        return [w for w in self.state()["workers"] if w["state"] == "ALIVE"]

    def wait_alive_workers(self, count: int, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while len(self.alive_workers()) != count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the master does not see {count} live workers:\n"
                                     f"{self.state()['workers']}")  # fmt: skip
            time.sleep(0.3)

    def executors(self, n: int | None = None) -> list[int]:
        """Pids of the executor JVMs (CoarseGrainedExecutorBackend) under worker `n` or all."""
        workers = [self.workers[n]] if n is not None else list(self.workers.values())
        out = []
        for worker in workers:
            if worker.alive():
                out += [p for p in descendants(worker.pid) if EXECUTOR_CLASS in cmdline(p)]
        return sorted(out)

    def wait_executor(self, n: int, timeout: float = START_TIMEOUT) -> int:
        """The pid of an executor running under worker `n`, once there is one."""
        deadline = time.monotonic() + timeout
        while not (found := self.executors(n)):
            if time.monotonic() > deadline:
                raise AssertionError(f"no executor under worker {n}:\n{self.workers[n].tail()}")
            time.sleep(0.2)
        return found[0]

    def pids(self) -> set[int]:
        """Every living process of the cluster (JVMs, executors, Python daemons)."""
        self.remember()
        return {pid for pid, started in self._known() if _start_time(pid) == started}

    def driver_conf(self) -> dict[str, str]:
        """Spark settings of a driver on this cluster: it binds and advertises 127.0.0.1."""
        return {
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "768m",
            "spark.executor.memory": "512m",  # fits a 1g worker
            "spark.executor.extraJavaOptions": JAVA_OPTIONS,
        }

    def driver_args(self) -> list[str]:
        """`oncelog pipeline averages` arguments that run it on this cluster."""
        args = ["--master", self.url]
        for key, value in self.driver_conf().items():
            args += ["--conf", f"{key}={value}"]
        return args

    @staticmethod
    def driver_env(local_dir: Path) -> dict[str, str]:
        """Environment of a driver process: loopback only, scratch files under `local_dir`.

        Without SPARK_LOCAL_IP the driver resolves the host name and warns it is using the
        first non-loopback interface (it still binds to spark.driver.bindAddress).
        """
        local_dir.mkdir(parents=True, exist_ok=True)
        return {"SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(local_dir)}

    def close(self) -> None:
        """SIGKILL everything this cluster started (and nothing else), and wait for it."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(5)
        self.remember()
        for proc in [*self.workers.values(), self.master]:
            if proc is not None and proc.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        for pid, started in self._known():
            _sigkill_if_same(pid, started)
        for proc in [*self.workers.values(), self.master]:
            if proc is not None:
                proc.proc.wait(30)
        deadline = time.monotonic() + 30
        while any(_start_time(p) == s for p, s in self._known()):
            if time.monotonic() > deadline:
                raise RuntimeError("Spark processes survived SIGKILL")
            time.sleep(0.1)

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
