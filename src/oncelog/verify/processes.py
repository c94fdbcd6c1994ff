"""The server processes `oncelog verify run` starts itself: oncelog brokers and etcd.

Each keeps its address across restarts (clients and relays reconnect to the same port), and
every signal goes to the pid it spawned, never to a process found by name.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

READY = re.compile(r"ready on ([\d.]+):(\d+)")


class Process:
    """A child process that can be killed, paused and resumed."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[str] | None = None
        self.paused = False
        self.closed = False
        self._lock = threading.Lock()

    def spawn(self, args: list[str], **kwargs: object) -> subprocess.Popen[str]:
        """Start the process unless `close` was called (then RuntimeError)."""
        with self._lock:
            if self.closed:
                raise RuntimeError("closed: not starting it again")
            self.proc = subprocess.Popen(args, text=True, **kwargs)  # type: ignore[call-overload]
            self.paused = False
            return self.proc

    def close(self) -> None:
        """SIGKILL it, and never start it again."""
        with self._lock:
            self.closed = True
        self.kill()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no flush, no clean shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None
        self.paused = False

    def pause(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)
            self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None and self.paused:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self, timeout: float = 30.0) -> None:
        """Clean shutdown (SIGTERM, SIGKILL after timeout)."""
        if self.proc is None:
            return
        self.resume()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


class LocalBroker(Process):
    """An oncelog broker process started by the tool; its port stays fixed across restarts."""

    def __init__(
        self,
        data_dir: Path,
        log_path: Path,
        overrides: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        node_id: int | None = None,
    ):
        super().__init__()
        self.data_dir = data_dir
        self.log_path = log_path
        self.overrides = dict(overrides or {})
        self.host = host
        self.node_id = node_id
        self.port = 0

    @property
    def name(self) -> str:
        if self.node_id is not None:
            return f"broker {self.node_id}"
        return f"broker@{self.host}:{self.port}"

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> None:
        """Start the broker and wait for its ready line (which gives the port on first start)."""
        args = [sys.executable, "-m", "oncelog", "serve", "--listen", f"{self.host}:{self.port}"]
        args += ["--data-dir", str(self.data_dir)]
        if self.node_id is not None:
            args += ["--node-id", str(self.node_id)]
        for key, value in self.overrides.items():
            args += ["--override", f"{key}={value}"]
        with self.log_path.open("a") as log:
            proc = self.spawn(args, stdout=subprocess.PIPE, stderr=log)
        stdout = proc.stdout
        assert stdout is not None
        ready = threading.Event()
        ports: list[int] = []

        def watch() -> None:
            """Find the ready line, then keep draining so the broker never blocks on stdout."""
            for line in stdout:
                match = READY.search(line)
                if match and not ready.is_set():
                    ports.append(int(match.group(2)))
                    ready.set()

        threading.Thread(target=watch, daemon=True).start()
        if ready.wait(timeout) and ports:
            self.port = ports[0]
            return
        self.kill()  # hung before its ready line, or exited
        raise RuntimeError(f"{self.name} did not start in {timeout:.0f}s; see {self.log_path}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class LocalEtcd(Process):
    """One etcd member (Debian's `etcd-server`), client and peer URLs on free 127.0.0.1 ports."""

    def __init__(self, data_dir: Path) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.client_port = free_port()
        self.peer_port = free_port()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.client_port}"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "etcd.log"

    def start(self, timeout: float = 30.0) -> None:
        binary = shutil.which("etcd")
        if binary is None:
            raise RuntimeError(
                "--start-cluster needs etcd on PATH (Debian: apt-get install etcd-server)"
            )
        client = f"http://{self.endpoint}"
        peer = f"http://127.0.0.1:{self.peer_port}"
        args = [
            binary,
            "--name", "oncelog-verify",
            "--data-dir", str(self.data_dir / "data"),
            "--listen-client-urls", client,
            "--advertise-client-urls", client,
            "--listen-peer-urls", peer,
            "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"oncelog-verify={peer}",
            "--initial-cluster-state", "new",
            "--heartbeat-interval", "50",
            "--election-timeout", "500",
        ]  # fmt: skip
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "a") as log:
            self.spawn(args, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.alive():
            if self.healthy():
                return
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"etcd did not start; see {self.log_path}")

    def healthy(self) -> bool:
        try:
            url = f"http://{self.endpoint}/health"
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")
        except (OSError, urllib.error.URLError, ValueError):
            return False
