"""Every deliberate crash of a product process is a named point in `oncelog.fault_points`:
a self-exit or a SIGKILL anywhere else in the broker, the coordinators or the Spark
connector fails this test. (The verifier's job is to kill the processes it starts, and the
cleaner's pool ends its own child processes; both stay outside the rule.)"""

from __future__ import annotations

import re
from pathlib import Path

import oncelog

SRC = Path(oncelog.__file__).parent
CRASH = re.compile(r"os\._exit\(|os\.kill\(|signal\.SIGKILL")
#: Process supervision, not fault injection: the verifier kills the brokers and clients it
#: starts; the cleaner pool's worker exits when its broker is gone.
OUTSIDE = ("fault_points.py", "verify/", "server/cleaner_pool.py")


def test_crashes_happen_only_in_fault_points() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel.startswith(OUTSIDE):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if CRASH.search(line):
                found.append(f"{rel}:{n}: {line.strip()}")
    assert found == []


def test_the_rule_sees_a_crash() -> None:
    assert CRASH.search("    os.kill(pid, signal.SIGKILL)")
    assert CRASH.search("os._exit(137)")
    assert not CRASH.search("fault_points.kill(pid, 'x')")
