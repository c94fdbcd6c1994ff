"""Start-up of the real `oncelog serve` process: refusals are one line, never a traceback.

A second broker on a live broker's data directory is refused by the directory's `.lock`
(Kafka's exclusive lock) before it reads or writes anything; a SIGKILLed broker's lock is
released by the OS. A taken port is found before the disk is touched; a data dir that is a
file, or cannot be created or written, is one line and exit 1; a value outside Kafka's bounds
is one line and exit 2; an unknown key is one warning.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic

pytestmark = [pytest.mark.integration]

TIMEOUT = 30.0


def serve(
    *args: str, timeout: float = TIMEOUT, log_level: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `python -m oncelog [--log-level L] serve ARGS` expecting it to exit by itself."""
    level = ["--log-level", log_level] if log_level else []
    proc = subprocess.Popen(
        [sys.executable, "-m", "oncelog", *level, "serve", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"serve {args} did not exit: stdout={out!r} stderr={err!r}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line a refused start prints (on stderr), with nothing else anywhere."""
    assert "Traceback" not in result.stdout + result.stderr
    assert "ready on" not in result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("oncelog: "), lines[0]
    return lines[0]


def serves(bootstrap: str, topic: str) -> bool:
    """The broker answers: a topic can be created and is then listed."""
    create_topic(bootstrap, topic, partitions=1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return topic in admin.list_topics(timeout=TIMEOUT).topics


def test_second_broker_on_a_live_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = BrokerProcess(data).start()
    try:
        assert first.proc is not None
        before = sorted(p.name for p in data.iterdir())
        result = serve("--listen", "127.0.0.1:0", "--data-dir", str(data))
        assert result.returncode == 1
        line = one_line(result)
        assert line == (
            f"oncelog: log directory {data} is in use by another process (pid {first.proc.pid})"
        )
        # nothing written under the live broker: no clean-shutdown marker, no new files
        assert not (data / ".kafka_cleanshutdown").exists()
        assert sorted(p.name for p in data.iterdir()) == before
        assert first.alive()
        assert serves(first.bootstrap, "after-refusal")
    finally:
        assert first.stop() == 0
    assert (data / ".kafka_cleanshutdown").exists()
    # once the holder is gone, the directory is free again
    again = BrokerProcess(data).start()
    assert again.stop() == 0


def test_lock_of_a_sigkilled_broker_is_released(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    broker.kill()
    assert (data / ".lock").exists()  # left behind, but no process holds it any more
    broker.start()
    try:
        assert serves(broker.bootstrap, "after-kill")
    finally:
        assert broker.stop() == 0


def test_port_in_use_is_found_before_the_disk_is_touched(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        data = tmp_path / "new" / "data"
        result = serve("--listen", f"127.0.0.1:{port}", "--data-dir", str(data))
    assert result.returncode == 1
    assert one_line(result) == (
        f"oncelog: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
    assert not (tmp_path / "new").exists()


def test_debug_adds_the_cause_of_a_start_up_error(tmp_path: Path) -> None:
    """--log-level DEBUG: the traceback of the OSError behind the line, then the same line."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = serve(
            "--listen", f"127.0.0.1:{port}", "--data-dir", str(tmp_path), log_level="DEBUG"
        )
    assert result.returncode == 1
    assert "DEBUG oncelog.server.app: start-up failed" in result.stderr
    assert "OSError: [Errno 98] Address already in use" in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last == f"oncelog: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory\n")
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(data))
    assert result.returncode == 1
    assert one_line(result) == f"oncelog: log directory {data} is not a directory"
    assert data.read_text() == "not a directory\n"


def test_data_dir_under_a_file(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    data = tmp_path / "file" / "data"
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(data))
    assert result.returncode == 1
    assert one_line(result) == f"oncelog: cannot create log directory {data}: Not a directory"


def test_data_dir_whose_parent_is_not_writable(tmp_path: Path) -> None:
    # /sys refuses new directories even to root, so this asserts for every user
    data = Path("/sys") / f"oncelog-test-{uuid.uuid4().hex}" / "data"
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(data))
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith(f"oncelog: cannot create log directory {data}: "), line
    assert not data.parent.exists()


def test_existing_data_dir_that_is_not_writable() -> None:
    # /proc/1 is a directory nobody may create files in, root included
    result = serve("--listen", "127.0.0.1:0", "--data-dir", "/proc/1")
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith("oncelog: log directory /proc/1 is not writable"), line


def test_damaged_metadata_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data).start()
    assert broker.stop() == 0
    (data / "oncelog-metadata.json").write_bytes(b"garbage")
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(data))
    assert result.returncode == 1
    line = one_line(result)
    assert line.startswith("oncelog: start-up failed: "), result.stderr
    assert str(data / "oncelog-metadata.json") in line  # which file to look at


def test_missing_parents_are_created(tmp_path: Path) -> None:
    """Kafka creates a missing log dir with its parents; so does oncelog."""
    data = tmp_path / "a" / "b" / "data"
    broker = BrokerProcess(data)
    broker.log_path = tmp_path / "broker.log"
    broker.start()
    assert broker.stop() == 0
    assert (data / "meta.properties").exists()


def test_value_out_of_range_exits_2_before_the_disk_is_touched(tmp_path: Path) -> None:
    data = tmp_path / "data"
    result = serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(data), "--override", "log.segment.bytes=-5"
    )
    assert result.returncode == 2
    assert one_line(result) == (
        "oncelog: configuration error: Invalid value -5 for configuration log.segment.bytes: "
        "Value must be at least 14"
    )
    assert not data.exists()


def test_unknown_key_is_one_warning(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data", {"log.segmnt.bytes": "1048576"}).start()
    assert broker.stop() == 0
    log = broker.log_path.read_text()
    warnings = [line for line in log.splitlines() if "log.segmnt.bytes" in line]
    assert len(warnings) == 1, log
    assert "WARNING" in warnings[0]
    assert warnings[0].endswith(
        "The configuration 'log.segmnt.bytes' was supplied but isn't a known config."
    )


def test_serve_help_names_ready_line_sigterm_and_config_docs() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "oncelog", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=True,
    )
    text = " ".join(result.stdout.split())
    assert "ready on HOST:PORT" in text
    assert "SIGTERM" in text
    assert "docs/configuration.md" in text
    for option in ("--listen", "--data-dir", "--node-id", "--override", "properties"):
        assert option in text


def test_port_out_of_range_exits_2_with_one_line(tmp_path: Path) -> None:
    """`--listen 127.0.0.1:99999` once listened on 34463 (99999 - 65536)."""
    result = serve("--listen", "127.0.0.1:99999", "--data-dir", str(tmp_path / "d"))
    assert result.returncode == 2
    line = one_line(result)
    assert "port 99999 is out of range 0-65535" in line, line
    assert not (tmp_path / "d").exists()
    tool = subprocess.run(
        [sys.executable, "-m", "oncelog", "topics", "list", "-b", "127.0.0.1:99999"],
        check=False,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert tool.returncode == 2
    assert tool.stdout == ""
    assert tool.stderr.splitlines() == [
        "Error: port 99999 is out of range 1-65535 in -b 127.0.0.1:99999"
    ]
