"""The cleaner's worker process dies with the broker: a SIGKILLed broker leaves no worker
finishing a round (and taking CPU from the broker restarting on the same data)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

PARENT = """
import sys, time
from oncelog.server.cleaner_pool import new_pool

if __name__ == "__main__":
    pool = new_pool()
    pool.submit(time.sleep, 60)  # a long cleaning round
    time.sleep(1.0)
    print(*[p.pid for p in pool._processes.values()], flush=True)
    time.sleep(60)
"""


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_worker_exits_when_the_broker_is_killed() -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True, env={**os.environ}
    )
    try:
        assert parent.stdout is not None
        worker = int(parent.stdout.readline())
        assert alive(worker)
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 10
        while alive(worker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not alive(worker), "the worker outlived the broker"
    finally:
        parent.kill()
        parent.wait(10)
