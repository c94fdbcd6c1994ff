"""The averages pipeline on a real Spark standalone cluster against a three-broker oncelog
cluster stays exactly once through crashes (issue 13, items 5 and 6).

Spark: one Master and two Workers (1 core, 1 GiB each) from the PySpark wheel's `spark-class`
(tests/spark/spark_standalone.py), every service on 127.0.0.1; the driver is
`oncelog pipeline averages --master spark://…` in its own process, so its executors run in
JVMs under the Workers, not under the driver. Kafka: etcd plus three brokers
(tests/cluster_process.py), input and output topics with RF=3 and min.insync.replicas=2.

Each fault is made while a micro-batch is in flight (planned in the checkpoint's `offsets`,
not yet in `commits`), checked to have happened, and the run then ends with the output equal
to the result computed independently from the committed input (tests/spark/pipeline_check.py).
Faults are combined into few runs: a Spark cluster run costs ~20 s before its first batch.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster_process import Cluster
from tests.postgres_server import PostgresServer, find_bin_dir
from tests.processes import descendants
from tests.spark.pipeline_check import analyse_kafka, analyse_postgres, assert_exactly_once
from tests.spark.pipeline_process import (
    INPUT,
    OUTPUT,
    RUN_TIMEOUT,
    PipelineProcess,
    averages_args,
    checkpoint_batches,
    generate,
    kill_mid_batch,
    pipelines,
    run,
    run_to_end,
)
from tests.spark.spark_standalone import SparkStandalone, listening_sockets

__all__ = ["pipelines"]  # the fixture

pytestmark = pytest.mark.slow

#: Internal topics replicated like the data, so a broker's death loses no coordinator state.
INTERNAL = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "4",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.num.partitions": "4",
    "transaction.state.log.min.isr": "2",
    "group.initial.rebalance.delay.ms": "100",
}
TOPIC_CONFIG = {"min.insync.replicas": "2"}
BATCH = "300"  # events per micro-batch: ~1-2 s of work on this cluster


@pytest.fixture
def oncelog_cluster(tmp_path: Path) -> Iterator[Cluster]:
    (tmp_path / "oncelog").mkdir()
    with Cluster(tmp_path / "oncelog", overrides=INTERNAL) as cluster:
        yield cluster


@pytest.fixture
def spark_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SparkStandalone]:
    """The Spark cluster; drivers started by the test inherit the loopback environment."""
    for key, value in SparkStandalone.driver_env(tmp_path / "driver-local").items():
        monkeypatch.setenv(key, value)
    with SparkStandalone(tmp_path / "spark", workers=2, cores=1, memory="1g") as spark:
        yield spark


class CrashablePostgres(PostgresServer):
    """The test PostgreSQL, plus a crash (`pg_ctl stop -m immediate`) and a start after it."""

    down = False

    def crash(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        self.down = True

    def start_again(self) -> None:
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={self.port} "
            f"-c unix_socket_directories={self.root} -c fsync=off"
        )
        log = str(self.root / "log")
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")
        self.down = False

    def stop(self) -> None:
        if self.down:  # crashed and not started again: only the directory is left
            shutil.rmtree(self.root, ignore_errors=True)
        else:
            super().stop()


@pytest.fixture
def postgres() -> Iterator[CrashablePostgres]:
    """Debian's PostgreSQL binaries are part of the test machine (scripts/test installs them).

    The data directory is a mkdtemp of its own, not under tmp_path: as root the server runs
    as `postgres`, which cannot enter pytest's 0700 base directory.
    """
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.fail("PostgreSQL is not installed: apt-get install postgresql-15")
    server = CrashablePostgres(bin_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()


def cluster_args(
    oncelog: Cluster, spark: SparkStandalone, checkpoint: Path, *extra: str
) -> list[str]:
    """`pipeline averages` on the Spark cluster, a backlog worked off in 300-event batches.

    The later `--master spark://…` overrides the `--master local[2,4]` of `averages_args`.
    """
    return [
        *averages_args(oncelog.bootstrap, checkpoint, "--max-offsets-per-trigger", BATCH,
                       "--trigger-interval", "0 seconds", *extra),
        *spark.driver_args(),
    ]  # fmt: skip


def wait_committed_after(checkpoint: Path, batch: int, proc: PipelineProcess) -> None:
    """The pipeline recovered: a batch after `batch` is committed (bounded)."""
    deadline = time.monotonic() + RUN_TIMEOUT
    while not any(b > batch for b in checkpoint_batches(checkpoint, "commits")):
        if proc.proc.poll() is not None:
            raise AssertionError(f"pipeline exited after batch {batch}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no batch after {batch} committed in time:\n{proc.tail()}")
        time.sleep(0.2)


def wait_gone(pids: list[int], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while any(Path(f"/proc/{pid}").exists() and not zombie(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} {pids} still running")
        time.sleep(0.2)


def zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def assert_loopback_only(spark: SparkStandalone, driver: PipelineProcess) -> None:
    """Master, Workers, executors, Python daemons and the driver's JVM listen on 127.0.0.1."""
    driver_pids = descendants(driver.proc.pid) | {driver.proc.pid}
    sockets = listening_sockets(spark.pids() | driver_pids)
    assert sockets, "no listening socket found at all: the check itself is broken"
    assert {ip for _, ip, _ in sockets} == {"127.0.0.1"}, sockets
    owners = {pid for pid, _, _ in sockets}
    assert spark.master is not None and spark.master.pid in owners
    assert all(w.pid in owners for w in spark.workers.values())
    assert set(spark.executors()) <= owners and len(spark.executors()) == 2
    assert owners & driver_pids, "the driver's JVM listens nowhere?"


def test_kafka_sink_through_executor_worker_driver_and_broker_kills(
    oncelog_cluster: Cluster,
    spark_cluster: SparkStandalone,
    pipelines: list[PipelineProcess],
    tmp_path: Path,
) -> None:
    oc, spark = oncelog_cluster, spark_cluster
    # Broker 1 leads every partition of both topics: killing it moves all their leaders.
    oc.create_topic(INPUT, configs=TOPIC_CONFIG, assignment=[[1, 2, 3], [1, 3, 2], [1, 2, 3]])
    oc.create_topic(OUTPUT, configs=TOPIC_CONFIG, assignment=[[1, 2, 3], [1, 3, 2]])
    assert {oc.leader(t, p) for t, n in ((INPUT, 3), (OUTPUT, 2)) for p in range(n)} == {1}
    generate(oc.bootstrap, 4500)
    checkpoint = tmp_path / "ck"
    args = cluster_args(oc, spark, checkpoint)
    log = tmp_path / "pipeline.log"
    first = run(pipelines, args, log)
    first.wait_for_batch(0, RUN_TIMEOUT)
    assert_loopback_only(spark, first)

    # 1. An executor JVM, SIGKILLed while its tasks run: Spark reruns them elsewhere and the
    # Master gives the application a new executor on the same Worker.
    executor = spark.wait_executor(1)
    batch = kill_mid_batch(checkpoint, lambda: os.kill(executor, signal.SIGKILL), "executor kill")
    spark.workers[1].wait_log(r"Executor app-\S+ finished with state \w+ .*exited with code 137")
    wait_committed_after(checkpoint, batch, first)
    assert spark.wait_executor(1) != executor

    # 2. A Worker JVM, SIGKILLed: its executor exits by itself, the Master drops the Worker; a
    # new Worker process registers and gets an executor of the running application.
    old = spark.executors(2)
    batch = kill_mid_batch(checkpoint, lambda: spark.kill_worker(2), "worker kill")
    spark.wait_alive_workers(1)
    wait_gone(old, "executors of the killed worker")
    spark.start_worker(2)
    spark.wait_alive_workers(2)
    spark.wait_executor(2)
    wait_committed_after(checkpoint, batch, first)

    # 3. The driver (Python and its JVM), SIGKILLed: the Master ends the application; a new
    # driver replays the uncommitted batch from the checkpoint.
    batch = kill_mid_batch(checkpoint, first.kill, "driver kill")
    assert batch not in checkpoint_batches(checkpoint, "commits")
    generate(oc.bootstrap, 1500, 4500)
    second = run(pipelines, [*args, "--available-now"], log)
    second.wait_for_batch(batch, RUN_TIMEOUT)
    assert second.batches()[0][0] == batch, "the restart must replay the unfinished batch"

    # 4. The broker leading every input and output partition, SIGKILLed; restarted once the
    # others have taken over the leadership.
    kill_mid_batch(checkpoint, oc.brokers[1].kill, "broker kill")
    oc.wait_for(
        lambda: all(oc.leader(INPUT, p, via=[2, 3]) in (2, 3) for p in range(3)),
        30,
        "new leaders of the input partitions",
    )
    oc.brokers[1].start()
    # The query rides it out or fails (a sink transaction may time out); a rerun finishes.
    if second.wait(RUN_TIMEOUT) != 0:
        run_to_end(pipelines, args, log)
    oc.wait_isr_full(INPUT)

    analysis = analyse_kafka(oc.bootstrap, INPUT, OUTPUT)
    assert_exactly_once(analysis)
    assert sum(count for count, _ in analysis.expected.values()) == 6000


def test_postgres_sink_through_driver_kill_and_database_crash(
    oncelog_cluster: Cluster,
    spark_cluster: SparkStandalone,
    postgres: CrashablePostgres,
    pipelines: list[PipelineProcess],
    tmp_path: Path,
) -> None:
    oc, spark = oncelog_cluster, spark_cluster
    oc.create_topic(INPUT, 3, 3, TOPIC_CONFIG)
    generate(oc.bootstrap, 3000)
    checkpoint = tmp_path / "ck"
    args = cluster_args(oc, spark, checkpoint, "--sink", "postgresql", "--db", postgres.url)
    log = tmp_path / "pipeline.log"
    first = run(pipelines, args, log)
    first.wait_for_batch(1, RUN_TIMEOUT)

    # 1. The driver, SIGKILLed mid-batch; its successor replays the batch (written or
    # skipped, depending on whether the database transaction had committed). Not batch 1:
    # its line means its database write is done, only Spark's commits/1 may still be missing.
    batch = kill_mid_batch(checkpoint, first.kill, "driver kill", after=1)
    generate(oc.bootstrap, 1500, 3000)
    second = run(pipelines, args, log)
    assert second.wait_for_batch(batch, RUN_TIMEOUT) == batch

    # 2. PostgreSQL crashes (immediate shutdown: no checkpoint, crash recovery at start)
    # during a later batch; that batch's write fails and with it the query, which the driver
    # reports and exits 1.
    kill_mid_batch(checkpoint, postgres.crash, "database crash", after=batch)
    assert second.wait(RUN_TIMEOUT) == 1, second.tail()
    failure = log.read_text().rsplit("query failed:", 1)
    assert len(failure) == 2 and "psycopg.OperationalError" in failure[1], second.tail()
    postgres.start_again()
    run_to_end(pipelines, args, log)

    analysis = analyse_postgres(postgres.url, oc.bootstrap, INPUT)
    assert_exactly_once(analysis)
    assert sum(count for count, _ in analysis.expected.values()) == 4500
