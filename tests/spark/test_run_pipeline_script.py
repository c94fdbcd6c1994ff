"""`scripts/run-pipeline` stopped with Ctrl-C while Spark runs: the pipeline first (it stops its
query and Spark cleanly, in one line), then the broker the script started, then one line from
the script — no Py4J traceback, no librdkafka `Connection refused` from a broker gone first.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.cluster_process import free_port
from tests.processes import descendants
from tests.spark.spark_env import JAVA_OPTIONS, spark_env

ROOT = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.timeout(420)
def test_ctrl_c_stops_spark_then_the_broker_with_one_line(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        **spark_env(),
        "PYTHONUNBUFFERED": "1",
        "BOOTSTRAP": f"127.0.0.1:{port}",
        "DATA": str(tmp_path / "data"),
        "STATE": str(tmp_path / "state"),
        "EVENTS": "600",
    }
    proc = subprocess.Popen(
        [str(ROOT / "scripts" / "run-pipeline"), "--max-offsets-per-trigger", "10",
         "--conf", f"spark.driver.extraJavaOptions={JAVA_OPTIONS}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    lines: list[str] = []
    tree: set[int] = set()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))

    def watch() -> None:  # the process tree, while it lives (orphans are re-parented)
        while proc.poll() is None:
            tree.update(descendants(proc.pid))
            time.sleep(0.5)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    threading.Thread(target=watch, daemon=True).start()
    try:
        deadline = time.monotonic() + 240  # Spark's start-up on 2 busy cores
        while not any(re.match(r"batch \d+ rows \d+", line) for line in lines):
            assert proc.poll() is None, "\n".join(lines)
            assert time.monotonic() < deadline, "no batch in 240 s:\n" + "\n".join(lines)
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C at the terminal does
        assert proc.wait(150) == 130, "\n".join(lines)
        reader.join(30)
        text = "\n".join(lines)
        for bad in ("Traceback", "Py4J", "py4j", "Connection refused", "KeyboardInterrupt"):
            assert bad not in text, text
        assert lines[-1] == (
            "run-pipeline: stopped by SIGINT (the pipeline first, then what it started); run it "
            f"again to continue from {tmp_path}/state/checkpoint-pipeline-events-pipeline-averages"
        ), text
        assert "pipeline stopped by SIGINT" in lines, text
        assert lines.index("pipeline stopped by SIGINT") == len(lines) - 2, text
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, "the broker still serves"
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in tree):
            assert time.monotonic() < deadline, [p for p in tree if _alive(p)]
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
