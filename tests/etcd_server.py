"""A throwaway single-member etcd for tests: Debian's `etcd` binary, client and peer URLs on
free 127.0.0.1 ports, data in a temporary directory, log in `<data dir>/etcd.log`.

The process is ours: `stop`, `pause` and `resume` signal only the pid `start` spawned. A
missing binary fails the test with a message naming the package (`scripts/test` installs
it); it is never a skip. Readiness is polled on `/health` of the client URL, since Debian's
etcd-server ships no etcdctl.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

import pytest


def sigstop(pid: int, what: str) -> None:
    """SIGSTOP, then wait until every thread of `pid` has stopped: on a busy machine a
    running process goes on answering for several milliseconds after the signal is sent."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 10
    while not _all_threads_stopped(pid):
        assert time.monotonic() < deadline, f"{what} did not stop within 10 s of SIGSTOP"
        time.sleep(0.001)


def _all_threads_stopped(pid: int) -> bool:
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:  # the thread ended
            continue
        if state not in ("T", "t"):
            return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def etcd_binary() -> str:
    found = shutil.which("etcd")
    if found is None:
        pytest.fail("etcd is not installed: `apt-get install etcd-server` (scripts/test does it)")
    return found


class EtcdServer:
    """One etcd process; ports and data survive `stop`/`start`, so a restart keeps both."""

    def __init__(self, data_dir: Path | None = None, name: str = "oncelog-test") -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="oncelog-etcd-"))
        self.name = name
        self.client_port = _free_port()
        self.peer_port = _free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "etcd.log"

    def start(self, timeout: float = 30.0) -> EtcdServer:
        client = f"http://127.0.0.1:{self.client_port}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            etcd_binary(),
            "--name", self.name,
            "--data-dir", str(self.data_dir / "data"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"{self.name}={peer}",
            "--initial-cluster-state", "new",
            "--heartbeat-interval", "50",
            "--election-timeout", "500",
        ]  # fmt: skip
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.healthy():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"etcd did not start; see {self.log_path}:\n{self.log_tail()}")

    def healthy(self) -> bool:
        url = f"http://{self.endpoint}/health"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, urllib.error.URLError, ValueError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`; a paused process is woken so it can exit."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGCONT)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def pause(self) -> None:
        assert self.proc is not None, "etcd is not running"
        sigstop(self.proc.pid, "etcd")

    def resume(self) -> None:
        assert self.proc is not None, "etcd is not running"
        os.kill(self.proc.pid, signal.SIGCONT)

    def close(self) -> None:
        """Stop and, if the directory was ours, delete the data."""
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EtcdServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@pytest.fixture
def etcd_server(tmp_path: Path) -> Iterator[EtcdServer]:
    """A running etcd for one test; `etcd_server.endpoint` is its client address."""
    server = EtcdServer(tmp_path / "etcd")
    try:
        yield server.start()
    finally:
        server.close()
