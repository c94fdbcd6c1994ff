"""A throwaway PostgreSQL server for tests: initdb in a temporary directory, listening only on
127.0.0.1 on a free port, stopped and deleted afterwards.

Uses the machine's PostgreSQL binaries (Debian's `/usr/lib/postgresql/<version>/bin`, or
`initdb` on PATH). PostgreSQL refuses to run as root, so as root the server runs as the
`postgres` user through `runuser`.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def find_bin_dir() -> Path | None:
    """The directory holding initdb and pg_ctl, newest version first; None if not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = [Path(p).parent.parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    versions = sorted(v for v in versions if v.name.isdigit())
    return versions[-1] / "bin" if versions else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class PostgresServer:
    def __init__(self, bin_dir: Path) -> None:
        self.bin_dir = bin_dir
        self.root = Path(tempfile.mkdtemp(prefix="oncelog-pg-"))
        self.data = self.root / "data"
        self.port = _free_port()
        self._as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin_dir / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed:\n{result.stdout}{result.stderr}")

    def start(self) -> PostgresServer:
        if self._as_postgres:
            shutil.chown(self.root, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.root} -c fsync=off"
        )
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")
        return self

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
