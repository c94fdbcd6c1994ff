"""The averages pipeline stays exactly once through crashes (issue 6, "Done when").

Each test runs `oncelog pipeline averages` as a subprocess on local[2,4] (Spark retries a failed
task), breaks it — SIGKILL of the driver and its JVM mid-batch or inside the sink's commit, a
failed task attempt, a SIGKILLed broker, aborted input transactions, a forced replay — restarts it
from its checkpoint where needed, and then checks the output against the result computed
independently from the committed input: no duplicate, no loss, the right averages.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.broker_process import BrokerProcess
from tests.spark.pipeline_check import (
    analyse_kafka,
    analyse_sqlite,
    assert_exactly_once,
)
from tests.spark.pipeline_process import (
    INPUT,
    OUTPUT,
    RUN_TIMEOUT,
    PipelineProcess,
    averages_args,
    generate,
    kill_mid_batch,
    pbroker,
    pipelines,
    run,
    run_to_end,
)

__all__ = ["pbroker", "pipelines"]  # the fixtures

pytestmark = pytest.mark.slow





def killed_by_itself(proc: PipelineProcess, timeout: float = RUN_TIMEOUT) -> None:
    """Wait for a testing hook to SIGKILL the driver, then clear away its JVM and workers."""
    try:
        code = proc.proc.wait(timeout)
    except Exception:
        proc.kill()
        raise AssertionError("the hook did not kill the driver:\n" + proc.tail()) from None
    proc.kill()
    assert code == -signal.SIGKILL, f"exit {code}\n" + proc.tail()


def test_driver_sigkill_while_executors_write(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 1500)
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--max-offsets-per-trigger", "300",
        "--trigger-interval", "0 seconds",
    )  # fmt: skip
    first = run(pipelines, args, tmp_path / "p.log")
    # Half a second (or 40% of a batch, if they take less) into a batch after batch 1 (of
    # 0-4): its tasks read, aggregate and write.
    batch = kill_mid_batch(
        tmp_path / "ck", first.kill, "driver kill", after=1, min_age=0.5, share=0.4
    )
    # What Spark committed, from the checkpoint itself: the printed batch lines lag behind.
    committed = committed_batches(tmp_path / "ck")
    assert max(committed) < 4, "finished before the kill; nothing was tested"
    assert max(committed) == batch - 1
    second = run_to_end(pipelines, args, tmp_path / "p.log")
    assert second.batches()[0][0] == batch
    assert_exactly_once(analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT))


def committed_batches(checkpoint: Path) -> set[int]:
    return {int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}


def test_driver_sigkill_inside_sink_commit(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 900)
    args = averages_args(pbroker.bootstrap, tmp_path / "ck", "--max-offsets-per-trigger", "300")
    first = run(pipelines, [*args, "--available-now", "--testing-kill-in-commit", "1"],
                tmp_path / "p.log")  # fmt: skip
    killed_by_itself(first)
    assert {b for b, _ in first.batches()} <= {0}
    # Batch 1's records and markers are committed, Spark's commit log is not: it replays it.
    second = run_to_end(pipelines, args, tmp_path / "p.log")
    assert second.batches()[0][0] == 1
    assert_exactly_once(analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT))


def test_failed_task_attempt_is_retried(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 600)
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--max-offsets-per-trigger", "300",
        "--testing-fail-task", "1:0",
    )  # fmt: skip
    run_to_end(pipelines, args, tmp_path / "p.log")
    # The hook fired (Spark logs the lost attempt's error) and the retry succeeded.
    assert "injected failure in batch 1 partition 0 attempt 0" in (tmp_path / "p.log").read_text()
    assert_exactly_once(analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT))


@pytest.mark.parametrize("sink", ["kafka", "sqlite"])
def test_broker_sigkill_mid_run(
    sink: str, pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 900)
    db = str(tmp_path / "averages.db")
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--max-offsets-per-trigger", "300",
        "--trigger-interval", "1 second", *sink_args(sink, db),
    )  # fmt: skip
    proc = run(pipelines, args, tmp_path / "p.log")
    proc.wait_for_batch(1, RUN_TIMEOUT)
    pbroker.restart(kill=True)
    generate(pbroker.bootstrap, 300, 900)
    # The pipeline rides it out or fails; either way it must end up exactly once.
    deadline = time.monotonic() + 90
    while proc.proc.poll() is None and time.monotonic() < deadline:
        analysis = analyse(sink, db, pbroker.bootstrap)
        if analysis.ok and sum(c for c, _ in analysis.expected.values()) == 1200:
            break
        time.sleep(1)
    if proc.proc.poll() is None:
        assert proc.terminate() == 0, "SIGTERM must stop the pipeline cleanly\n" + proc.tail()
    run_to_end(pipelines, args, tmp_path / "p.log")
    analysis = analyse(sink, db, pbroker.bootstrap)
    assert_exactly_once(analysis)
    assert sum(c for c, _ in analysis.expected.values()) == 1200


def sink_args(sink: str, db: str) -> list[str]:
    return [] if sink == "kafka" else ["--sink", sink, "--db", db]


def analyse(sink: str, db: str, bootstrap: str) -> Any:
    """The independent check of the Kafka output topic or of the database."""
    if sink == "kafka":
        return analyse_kafka(bootstrap, INPUT, OUTPUT)
    return analyse_sqlite(db, bootstrap, INPUT)


@pytest.mark.parametrize("sink", ["kafka", "sqlite"])
def test_transactional_input_with_aborts(
    sink: str, pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    # 100 transactions of 7 events, every third aborted: 33 aborted, 469 events count.
    generate(pbroker.bootstrap, 700, 0, "--transactional", "--txn-size", "7", "--abort-every", "3")
    db = str(tmp_path / "averages.db")
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--max-offsets-per-trigger", "250",
        *sink_args(sink, db),
    )  # fmt: skip
    run_to_end(pipelines, args, tmp_path / "p.log")
    analysis = analyse(sink, db, pbroker.bootstrap)
    assert_exactly_once(analysis)
    assert sum(c for c, _ in analysis.expected.values()) == 700 - 33 * 7


@pytest.mark.parametrize("point", ["before-commit", "after-commit"])
def test_database_sink_sigkill_in_transaction(
    point: str, pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 900)
    db = str(tmp_path / "averages.db")
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--sink", "sqlite", "--db", db,
        "--max-offsets-per-trigger", "300",
    )  # fmt: skip
    first = run(pipelines, [*args, "--available-now", "--testing-kill-in-db", f"1:{point}"],
                tmp_path / "p.log")  # fmt: skip
    killed_by_itself(first)
    second = run_to_end(pipelines, args, tmp_path / "p.log")
    batch, rows = second.batches()[0]
    assert batch == 1
    if point == "after-commit":
        assert rows is None, "batch 1 is in the database: its replay must be skipped"
    else:
        assert rows, "batch 1 was rolled back: its replay must write it"
    assert_exactly_once(analyse_sqlite(db, pbroker.bootstrap, INPUT))


def test_database_sink_driver_sigkill_during_foreach_batch(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 1500)
    db = str(tmp_path / "averages.db")
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--sink", "sqlite", "--db", db,
        "--max-offsets-per-trigger", "300", "--trigger-interval", "0 seconds",
    )  # fmt: skip
    first = run(pipelines, args, tmp_path / "p.log")
    batch = kill_mid_batch(
        tmp_path / "ck", first.kill, "driver kill", after=1, min_age=0.5, share=0.4
    )
    second = run_to_end(pipelines, args, tmp_path / "p.log")
    assert second.batches()[0][0] == batch, "the restart must replay the unfinished batch"
    assert_exactly_once(analyse_sqlite(db, pbroker.bootstrap, INPUT))


@pytest.mark.parametrize("semantics", ["at-least-once", "exactly-once"])
def test_forced_replay_duplicates_only_at_least_once(
    semantics: str, pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    """Deleting the last commits/N makes Spark run batch N again: a plain writer duplicates."""
    generate(pbroker.bootstrap, 600)
    checkpoint = tmp_path / "ck"
    args = averages_args(
        pbroker.bootstrap, checkpoint, "--max-offsets-per-trigger", "250",
        "--semantics", semantics,
    )  # fmt: skip
    run_to_end(pipelines, args, tmp_path / "p.log")
    last = max(committed_batches(checkpoint))
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    again = run_to_end(pipelines, args, tmp_path / "p.log")
    assert again.batches()[0][0] == last
    analysis = analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT)
    assert not analysis.wrong, analysis.describe()
    if semantics == "at-least-once":
        assert analysis.duplicates, "the replay should have written batch N twice"
    else:
        assert_exactly_once(analysis)
