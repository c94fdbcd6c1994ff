"""Happy paths of `oncelog pipeline averages` against a real broker: Kafka sink (two runs from
one checkpoint), SQLite sink, windowed variant. Each output must equal the result computed
independently from the input (tests/spark/pipeline_check.py).
"""

from __future__ import annotations

from pathlib import Path

from tests.broker_process import BrokerProcess
from tests.spark.pipeline_check import analyse_kafka, analyse_sqlite, assert_exactly_once
from tests.spark.pipeline_process import (
    INPUT,
    OUTPUT,
    PipelineProcess,
    averages_args,
    generate,
    pbroker,
    pipelines,
    run_to_end,
)

__all__ = ["pbroker", "pipelines"]  # the fixtures





def test_kafka_sink_two_runs_from_one_checkpoint(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 600)
    args = averages_args(pbroker.bootstrap, tmp_path / "ck", "--max-offsets-per-trigger", "250")
    first = run_to_end(pipelines, args, tmp_path / "p.log")
    assert first.batches()[0][0] == 0
    assert sum(r or 0 for _, r in first.batches()) == 600
    assert_exactly_once(analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT))
    # The state comes back from the checkpoint (RocksDB), the input resumes after batch 2.
    generate(pbroker.bootstrap, 300, 600)
    second = run_to_end(pipelines, args, tmp_path / "p.log")
    assert second.batches()[0][0] == 3
    assert sum(r or 0 for _, r in second.batches()) == 300
    analysis = analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT)
    assert_exactly_once(analysis)
    assert sum(c for c, _ in analysis.expected.values()) == 900


def test_sqlite_sink(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    generate(pbroker.bootstrap, 500)
    db = str(tmp_path / "averages.db")
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--sink", "sqlite", "--db", db,
        "--max-offsets-per-trigger", "200",
    )  # fmt: skip
    proc = run_to_end(pipelines, args, tmp_path / "p.log")
    assert proc.batches()[0][0] == 0
    assert_exactly_once(analyse_sqlite(db, pbroker.bootstrap, INPUT))


def test_windowed_kafka(
    pbroker: BrokerProcess, pipelines: list[PipelineProcess], tmp_path: Path
) -> None:
    # 400 events 100 ms apart: 40 s of event time, four 10-second windows per key.
    generate(pbroker.bootstrap, 400)
    args = averages_args(
        pbroker.bootstrap, tmp_path / "ck", "--window", "10 seconds",
        "--watermark", "1 hour", "--max-offsets-per-trigger", "150",
    )  # fmt: skip
    run_to_end(pipelines, args, tmp_path / "p.log")
    analysis = analyse_kafka(pbroker.bootstrap, INPUT, OUTPUT, window_ms=10_000)
    assert_exactly_once(analysis)
    assert len(analysis.expected) == 5 * 4
