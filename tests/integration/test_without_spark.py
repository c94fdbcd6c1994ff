"""The base install (no `[spark]` extra) runs the broker and every non-Spark command.

Each command runs in a Python where pyspark, pyarrow, pandas and py4j cannot be imported, as
after `pip install oncelog`: the broker must reach its ready line, and `pipeline averages`
must say in one line what to install instead of dying with a traceback (issue 10 A).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.broker_process import READY

SPARK_MODULES = ("pyspark", "pyarrow", "pandas", "py4j")
#: `python -c` prelude: the Spark extra's modules fail to import, then the `oncelog` command.
NO_SPARK = (
    "import sys\n"
    f"for m in {SPARK_MODULES!r}: sys.modules[m] = None\n"
    "from oncelog.cli.main import main\n"
    "sys.argv[0] = 'oncelog'\n"
    "raise SystemExit(main())\n"
)


def no_spark(*args: str) -> list[str]:
    """The argv of `oncelog ARGS` in a Python without the Spark extra."""
    return [sys.executable, "-c", NO_SPARK, *args]


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        no_spark(*args), check=False, capture_output=True, text=True, timeout=timeout
    )


def test_broker_starts_without_spark(tmp_path: Path) -> None:
    log = tmp_path / "broker.log"
    with open(log, "w") as err:
        proc = subprocess.Popen(
            no_spark("serve", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data")),
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 30
        line = ""
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line or READY.search(line):
                break
        assert READY.search(line), f"no ready line; broker log:\n{log.read_text()}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text()


def test_pipeline_averages_without_spark_says_what_to_install(tmp_path: Path) -> None:
    result = run("pipeline", "averages", "--checkpoint", str(tmp_path / "ck"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "pip install 'oncelog[spark]'" in lines[0]
    assert "Java 17" in lines[0]
    assert result.stdout == ""


def test_help_without_spark() -> None:
    for args in (
        ["--help"],
        ["pipeline", "--help"],
        ["pipeline", "averages", "--help"],
        ["pipeline", "generate", "--help"],
        ["topics", "--help"],
        ["transactions", "--help"],
        ["verify", "--help"],
    ):
        result = run(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert "Traceback" not in result.stderr, (args, result.stderr)


def averages_with(env: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """`oncelog pipeline averages` (PySpark installed) with only `env` for its environment."""
    args = ["--input", "e", "--output", "a", "--checkpoint", str(tmp_path / "ck")]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "oncelog",
            "pipeline",
            "averages",
            *args,
            "--bootstrap-server",
            "127.0.0.1:9",
        ],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_pipeline_without_java_is_one_line(tmp_path: Path) -> None:
    """PySpark installed but no JVM: one line naming Java 17+, not py4j's page of errors."""
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path)}  # no java on PATH, no JAVA_HOME
    done = averages_with(env, tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "Java 17+" in done.stderr and "no java on PATH" in done.stderr
    old = tmp_path / "old-jdk" / "bin"
    old.mkdir(parents=True)
    (old / "java").write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    (old / "java").chmod(0o755)
    done = averages_with({**env, "JAVA_HOME": str(old.parent), "PATH": "/usr/bin:/bin"}, tmp_path)
    assert done.returncode == 2, done.stderr
    assert "is Java 11" in done.stderr
