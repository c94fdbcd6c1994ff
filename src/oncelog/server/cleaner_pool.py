"""The log cleaner's worker process: started on first use, gone with the broker.

A cleaning round runs in a spawned process so the event loop never waits on it and the GIL
is not shared. The worker watches its parent: when the broker dies (SIGKILL included), the
worker exits at once instead of finishing a round nobody will swap in, which would take CPU
from the broker restarting on the same data. Its `.cleaned` files are deleted at the next load.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor

PARENT_POLL_S = 0.2


def _exit_with_parent(parent: int) -> None:
    """Worker initializer: a daemon thread ends the process once its parent is gone."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def new_pool() -> ProcessPoolExecutor:
    """One worker process, spawned (not forked: the broker has threads and open files)."""
    return ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_exit_with_parent,
        initargs=(os.getpid(),),
    )


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Stop now: a round in progress has only written `.cleaned` files, which are discarded."""
    processes = list((pool._processes or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        with contextlib.suppress(Exception):
            process.kill()
