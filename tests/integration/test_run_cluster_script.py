"""`scripts/run-cluster` as a user runs it to watch a leader die: the real script, etcd and three
brokers. A SIGKILLed broker is reported (node id, status, how to start it again) while the other
two keep serving; `scripts/run-cluster restart N` starts it again with the same command line and
it rejoins the ISR; SIGTERM to the script stops everything, the restarted broker included.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster_process import FAST, free_port
from tests.integration.helpers import wait_until
from tests.processes import descendants

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "run-cluster"
TOPIC = "orders"

BROKER_LINE = re.compile(
    r"oncelog cluster: broker (?P<n>[123]) pid (?P<pid>\d+) on 127\.0\.0\.1:(?P<port>\d+), "
    r"console (?P<console>\S+), data (?P<data>\S+), log (?P<log>\S+)"
)
EXITED_LINE = re.compile(
    r"oncelog cluster: broker (?P<n>[123]) \(pid (?P<pid>\d+)\) exited \(status 137, SIGKILL\); "
    r"brokers (?P<others>[0-9,]+) keep serving\. Start it again with: (?P<cmd>.+?) "
    r"\(its log: \S+\)$"
)


def free_runs(*counts: int) -> list[int]:
    """The first port of runs of `counts` consecutive free ports, the runs disjoint."""
    taken: set[int] = set()
    out = []
    for count in counts:
        for _ in range(100):
            base = free_port()
            ports = set(range(base, base + count))
            if base + count > 65535 or ports & taken:
                continue
            try:
                for port in ports:
                    with socket.socket() as s:
                        s.bind(("127.0.0.1", port))
            except OSError:
                continue
            taken |= ports
            out.append(base)
            break
        else:
            raise RuntimeError("no run of free ports")
    return out


class Lines:
    """The lines of a stream, read by a thread, so waits for one are bounded."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, args=(stream,), daemon=True).start()

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def until(self, matches: Callable[[str], bool], timeout: float, what: str) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no {what} in {timeout}s; got {self.seen}") from None
            if line is None:
                raise AssertionError(f"stream ended before {what}; got {self.seen}")
            self.seen.append(line)
            if matches(line):
                return line

    def rest(self, timeout: float = 5) -> list[str]:
        """What is left once the stream ends."""
        with contextlib.suppress(AssertionError):
            self.until(lambda _: False, timeout, "end")
        return self.seen


def isr_sizes(bootstrap: str) -> dict[int, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    if topic.error is not None:
        return {}
    return {p: len(meta.isrs) for p, meta in topic.partitions.items()}


def leader_of(bootstrap: str, partition: int) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        topic = admin.list_topics(TOPIC, timeout=10).topics[TOPIC]
    except KafkaException:
        return -1
    return int(topic.partitions[partition].leader)


def produce_acks_all(bootstrap: str, count: int) -> None:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "message.timeout.ms": 60000,
        }
    )
    errors: list[object] = []
    delivered: list[int] = []

    def report(err: object, _msg: object) -> None:
        (errors if err is not None else delivered).append(err or 1)  # type: ignore[arg-type]

    for i in range(count):
        producer.produce(TOPIC, key=str(i % 3).encode(), value=f"v{i}".encode(), on_delivery=report)
    left = producer.flush(70)
    assert left == 0 and not errors and len(delivered) == count, (left, errors, len(delivered))


def living(pids: Iterable[int]) -> set[int]:
    out = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            out.add(pid)
    return out


def stop_and_check(proc: subprocess.Popen[str], started: set[int], ports: list[int]) -> None:
    """SIGTERM to the script stops every process it and the restart started; ports freed."""
    started |= descendants(proc.pid, living_only=True)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(90) == 143
    wait_until(lambda: not living(started), 10, f"no process left of {sorted(started)}")
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"


def create_replicated_topic(bootstrap: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(TOPIC, 3, 3, config={"min.insync.replicas": "2"})], operation_timeout=30
    )
    for future in futures.values():
        future.result(30)


def serving(survivors: str, others: list[int]) -> None:
    """The two brokers left answer metadata (a new leader for partition 0, `oncelog cluster
    describe`) and take acks=all writes (min.insync.replicas=2)."""
    wait_until(lambda: leader_of(survivors, 0) in others, 60, "a new leader for partition 0")
    produce_acks_all(survivors, 30)
    described = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "oncelog"), "cluster", "describe", "-b", survivors],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert described.returncode == 0, described.stderr
    assert "Brokers: 2\n" in described.stdout, described.stdout


def restart(command: str, n: int, base: int, http_base: int) -> int:
    """Run the command the exit report printed; the new broker's pid from its one line."""
    done = subprocess.run(
        shlex.split(command), cwd="/", capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    again = re.fullmatch(
        rf"oncelog cluster: broker {n} restarted: pid (\d+), 127\.0\.0\.1:{base + n - 1} "
        rf"\(log\.dirs=\S+\), console http://127\.0\.0\.1:{http_base + n - 1}/, log \S+\n",
        done.stdout,
    )
    assert again is not None, (done.stdout, done.stderr)
    return int(again[1])


def start_lines(
    lines: list[str], home: Path, base: int, http_base: int
) -> dict[int, re.Match[str]]:
    """Each broker's start line (pid, address, console, data dir, log) and command line."""
    brokers = {int(m["n"]): m for m in map(BROKER_LINE.fullmatch, lines) if m}
    assert sorted(brokers) == [1, 2, 3], lines
    for n, m in brokers.items():
        assert int(m["port"]) == base + n - 1
        assert m["console"] == f"http://127.0.0.1:{http_base + n - 1}/"
        assert m["data"] == str(home / f"broker-{n}")
        assert m["log"] == str(home / f"broker-{n}.log")
        command = lines[lines.index(m.string) + 1]
        assert command.startswith(f"  command ({home}/broker-{n}.cmd): cd "), command
        assert f"--listen 127.0.0.1:{base + n - 1} --data-dir {m['data']}" in command
        with urllib.request.urlopen(m["console"] + "api/cluster", timeout=10) as response:
            assert response.status == 200  # the web console is on
    return brokers


@pytest.mark.timeout(240)
def test_a_killed_broker_is_reported_the_others_serve_and_a_restart_rejoins(
    tmp_path: Path,
) -> None:
    base, http_base, etcd_port = free_runs(3, 3, 2)
    fast = [arg for key, value in FAST.items() for arg in ("--override", f"{key}={value}")]
    proc = subprocess.Popen(
        [str(SCRIPT), "--dir", "c", "--base-port", str(base), "--http-base-port",
         str(http_base), "--etcd-port", str(etcd_port), *fast],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
        env={**os.environ, "STOP_TIMEOUT_S": "20"}, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    started: set[int] = set()
    try:
        bootstrap = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        consoles = " ".join(f"http://127.0.0.1:{http_base + i}/" for i in range(3))
        ready = out.until(lambda s: s.startswith("oncelog cluster ready"), 90, "ready line")
        assert ready == (
            f"oncelog cluster ready: bootstrap {bootstrap} (etcd 127.0.0.1:{etcd_port}), "
            f"consoles {consoles}"
        ), err.seen
        brokers = start_lines(out.seen, tmp_path / "c", base, http_base)
        started |= {int(m["pid"]) for m in brokers.values()}
        etcd = [line for line in out.seen if line.startswith("oncelog cluster: etcd pid ")]
        assert len(etcd) == 1, out.seen
        started.add(int(etcd[0].split()[4]))
        started |= descendants(proc.pid, living_only=True)

        create_replicated_topic(bootstrap)
        wait_until(lambda: isr_sizes(bootstrap) == {0: 3, 1: 3, 2: 3}, 60, "a full ISR")
        produce_acks_all(bootstrap, 30)

        # SIGKILL partition 0's leader by the pid the script printed.
        victim = leader_of(bootstrap, 0)
        os.kill(int(brokers[victim]["pid"]), signal.SIGKILL)
        report = err.until(lambda s: EXITED_LINE.match(s) is not None, 20, "the exit report")
        exited = EXITED_LINE.match(report)
        assert exited is not None and int(exited["n"]) == victim
        assert exited["pid"] == brokers[victim]["pid"]
        others = [n for n in (1, 2, 3) if n != victim]
        assert exited["others"] == ",".join(map(str, others))
        assert exited["cmd"] == f"{SCRIPT} restart {victim} --dir {tmp_path}/c"
        assert proc.poll() is None, "the script stopped"

        # The other two keep answering: metadata, and acks=all writes (min.insync.replicas=2).
        survivors = ",".join(f"127.0.0.1:{base + n - 1}" for n in others)
        serving(survivors, others)
        for n in others:
            assert living([int(brokers[n]["pid"])]), f"broker {n} stopped"

        # The printed command starts it again, with the same command line; it rejoins the ISR.
        new_pid = restart(exited["cmd"], victim, base, http_base)
        started.add(new_pid)
        err.until(
            lambda s: s == f"oncelog cluster: broker {victim} is running again: pid {new_pid}",
            10,
            "the script noticing the restart",
        )
        wait_until(lambda: isr_sizes(bootstrap) == {0: 3, 1: 3, 2: 3}, 90, "the ISR whole again")
        produce_acks_all(bootstrap, 10)
        assert proc.poll() is None

        # SIGTERM stops everything, the restarted broker (not the script's child) included.
        ports = [*range(base, base + 3), *range(http_base, http_base + 3), etcd_port]
        stop_and_check(proc, started, ports)
        assert not any("Traceback" in line for line in err.rest() + out.rest())
        assert not (tmp_path / "c" / "run-cluster.pid").exists()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
        for pid in living(started):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.timeout(120)
def test_etcd_exiting_stops_the_cluster(tmp_path: Path) -> None:
    """The brokers cannot work without etcd: its exit is reported and everything stops."""
    base, http_base, etcd_port = free_runs(3, 3, 2)
    proc = subprocess.Popen(
        [str(SCRIPT), "--dir", str(tmp_path / "c"), "--base-port", str(base),
         "--http-base-port", str(http_base), "--etcd-port", str(etcd_port)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "STOP_TIMEOUT_S": "20"},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        out.until(lambda s: s.startswith("oncelog cluster ready"), 90, "ready line")
        started = descendants(proc.pid, living_only=True)
        etcd = next(line for line in out.seen if line.startswith("oncelog cluster: etcd pid "))
        etcd_pid = int(etcd.split()[4])
        os.kill(etcd_pid, signal.SIGKILL)
        assert proc.wait(60) == 1
        assert err.rest() == [
            f"oncelog cluster: etcd (pid {etcd_pid}) exited (status 137, SIGKILL): the brokers "
            f"cannot work without it; stopping them (logs in {tmp_path}/c)"
        ]
        wait_until(lambda: not living(started), 10, f"no process left of {sorted(started)}")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)


@pytest.mark.timeout(30)
def test_restart_without_a_running_cluster_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [str(SCRIPT), "restart", "2", "--dir", str(tmp_path / "none")],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == (
        f"oncelog cluster: no cluster is running from {tmp_path}/none (start one with "
        f"scripts/run-cluster --dir {tmp_path}/none)\n"
    )
    for bad in (["restart"], ["restart", "4"], ["restart", "1", "extra"]):
        result = subprocess.run(
            [str(SCRIPT), *bad], capture_output=True, text=True, timeout=20, check=False
        )
        assert result.returncode == 2, bad
        assert len(result.stderr.splitlines()) == 1 and result.stdout == "", result.stderr
