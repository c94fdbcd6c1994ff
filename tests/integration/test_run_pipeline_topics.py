"""`scripts/run-pipeline` reads and writes topics of its own (pipeline-events, pipeline-averages)
and refuses, in one line naming the option to pass, topics holding other records: the README's
earlier examples left unkeyed `seq 10` lines in `events` and the transactional example's results
in `averages`, and the pipeline printed a stale line from them. The check runs before Spark."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer

from oncelog.cli.main import main
from tests.broker_process import BrokerProcess

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def produce(broker: BrokerProcess, topic: str, records: list[tuple[str | None, str]]) -> None:
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in records:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def run_pipeline(
    broker: BrokerProcess, tmp_path: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BOOTSTRAP": broker.bootstrap, "STATE": str(tmp_path / "state"),
           "DATA": str(tmp_path / "data")}  # fmt: skip
    return subprocess.run(
        [str(ROOT / "scripts" / "run-pipeline"), *args],
        capture_output=True, text=True, timeout=120, env=env, check=False, cwd=tmp_path,
    )  # fmt: skip


@pytest.mark.timeout(180)
def test_foreign_input_and_output_are_refused_in_one_line(
    broker: BrokerProcess, tmp_path: Path
) -> None:
    produce(broker, "events", [(None, str(i)) for i in range(1, 11)])  # seq 10 | oncelog produce
    result = run_pipeline(broker, tmp_path, "--input", "events")
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert result.stderr == (
        "Error: topic events holds records other than events `oncelog pipeline generate` wrote "
        "(partition 0 offset 0: no oncelog.index header); pass --input with a topic of the "
        "pipeline's own\n"
    )
    # examples/eos_averages.py's results: no `key` field in the value.
    produce(broker, "averages", [("a", json.dumps({"count": 2, "sum": 4.0, "avg": 2.0}))])
    result = run_pipeline(broker, tmp_path, "--output=averages")
    assert result.returncode == 1, result
    assert result.stdout == ""
    assert result.stderr.startswith(
        "Error: topic averages holds records other than results of `oncelog pipeline averages` "
        "(partition 0 offset 0: value b'{"
    ), result.stderr
    assert result.stderr.endswith("pass --output with a topic of the pipeline's own\n")
    assert len(result.stderr.splitlines()) == 1
    assert not (tmp_path / "state" / "generated-pipeline-events").exists()  # nothing written


def test_the_pipelines_own_records_pass(broker: BrokerProcess) -> None:
    assert main(["pipeline", "generate", "--bootstrap-server", broker.bootstrap, "--topic",
                 "pipeline-events", "--count", "30"]) == 0  # fmt: skip
    result = json.dumps({"key": "k1", "count": 3, "sum": 10.0, "avg": 3.3})
    windowed = json.dumps({"key": "k2", "window_start_ms": 0, "window_end_ms": 10,
                           "count": 1, "sum": 2.0, "avg": 2.0})  # fmt: skip
    produce(broker, "pipeline-averages", [("k1", result), ("k2", windowed)])
    assert main(["pipeline", "check-topics", "--bootstrap-server", broker.bootstrap, "--input",
                 "pipeline-events", "--output", "pipeline-averages"]) == 0  # fmt: skip
    assert main(["pipeline", "check-topics", "--bootstrap-server", broker.bootstrap, "--input",
                 "no-such-topic", "--output", "nor-this"]) == 0  # fmt: skip
