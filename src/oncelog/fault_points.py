"""Every deliberate crash in the product, for the crash tests: the callers decide *when*
(each only once its testing key or option is set, so all are inert in production), this
module does the crash. A reader auditing what can kill a broker or a Spark driver on
purpose finds it all here; `tests/unit/test_fault_points.py` fails if a crash appears
anywhere else in `src/`.

The points and what arms them:

- ``txn.after-prepare``: the transaction coordinator dies right after its PrepareCommit/
  PrepareAbort is stored (replicated, in a cluster), before any marker:
  ``oncelog.testing.crash.after.prepare=true``.
- ``spark.sink.commit``: the Spark sink's driver commit of one batch kills a process
  (the driver): the sink option ``oncelog.testing.killPidInCommit=<pid>:<batch>``.
- ``spark.db-sink.before-commit`` / ``spark.db-sink.after-commit``: the database sink kills
  its driver inside the database transaction or right after it commits:
  ``run-pipeline --testing-kill-in-db-commit BATCH:POINT``.
"""

from __future__ import annotations

import logging
import os
import signal
from typing import NoReturn

log = logging.getLogger(__name__)

#: SIGKILL's exit status, as a shell or a supervisor reports a killed process.
KILLED_STATUS = 137


def exit_now(point: str) -> NoReturn:
    """End this process at once, as SIGKILL would: no flush, no `finally`, no atexit. The
    log line is written first, so a test can tell the planned crash from a real one."""
    log.critical("fault point %s: exiting like SIGKILL", point)
    logging.shutdown()
    os._exit(KILLED_STATUS)


def kill(pid: int, point: str) -> bool:
    """SIGKILL `pid` (False when it is already gone: a restarted run that kept the hook)."""
    log.critical("fault point %s: SIGKILL to pid %d", point, pid)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True
