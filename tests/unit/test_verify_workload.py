"""`verify run`'s topics: on a cluster it starts, without `--replication-factor`, topics of RF 2
and 1 next to the main one (RF 3), which every writer spreads its sends over, a transaction's
too; what reaches the worker processes of the crash fault; the topics' min.insync.replicas."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from oncelog.verify import workload
from oncelog.verify.clients import IdempotentProducer, TransactionalProducer, spread
from oncelog.verify.worker import WorkerRun, WorkerSpec
from oncelog.verify.workload import Run, RunConfig, plan_topics


def config(**kw: Any) -> RunConfig:
    return RunConfig(history=Path("h.jsonl"), **kw)


@pytest.mark.parametrize(
    ("kw", "planned"),
    [
        ({"start_cluster": 3}, [("t", 3), ("t-rf2", 2), ("t-rf1", 1)]),
        ({"start_cluster": 5}, [("t", 3), ("t-rf2", 2), ("t-rf1", 1)]),
        ({"start_cluster": 2}, [("t", 2), ("t-rf1", 1)]),
        ({"start_cluster": 1}, [("t", 1)]),
        # An explicit replication factor keeps the run to its one topic.
        ({"start_cluster": 3, "replication_factor": 3}, [("t", 3)]),
        ({"start_cluster": 3, "replication_factor": 1}, [("t", 1)]),
        ({"start_broker": True}, [("t", 1)]),
        ({"bootstrap": "localhost:9092"}, [("t", 1)]),
        ({"bootstrap": "localhost:9092", "replication_factor": 3}, [("t", 3)]),
    ],
)
def test_planned_topics(kw: dict[str, Any], planned: list[tuple[str, int]]) -> None:
    assert plan_topics(config(**kw), "t") == planned


def test_the_round_robin_changes_topic_at_every_step_and_covers_every_partition() -> None:
    topics = ["t", "t-rf2", "t-rf1"]
    steps = [spread(n, topics, 3) for n in range(9)]
    assert sorted(steps) == sorted((t, p) for t in topics for p in range(3))
    for a, b in itertools.pairwise(steps):
        assert a[0] != b[0]
    assert spread(9, topics, 3) == steps[0]
    assert [spread(n, ["t"], 2) for n in range(3)] == [("t", 0), ("t", 1), ("t", 0)]


def spec(**kw: Any) -> WorkerSpec:
    base: dict[str, Any] = dict(
        role="txn",
        name="txn0",
        bootstrap="b:1",
        topic="t",
        output_topic="t-out",
        partitions=3,
        per_client_rate=10.0,
        abort_probability=0.2,
        txn_base=10,
    )
    return WorkerSpec(**{**base, **kw})


def test_a_writer_spreads_its_own_sends_over_the_topics() -> None:
    """Each writer has a round robin of its own, so a transaction of 2 sends spans 2 topics
    and one of 3 all three, whatever the other writers' pace (a shared one let each of three
    writers stick to one topic)."""
    run = WorkerRun(spec(topics=["t", "t-rf2", "t-rf1"]))
    txn = TransactionalProducer("txn0", run)  # type: ignore[arg-type]
    other = IdempotentProducer("producer0", run)  # type: ignore[arg-type]
    first = [txn.next_target() for _ in range(3)]
    other.next_target()
    assert {t for t, _ in first} == {"t", "t-rf2", "t-rf1"}
    assert [txn.next_target() for _ in range(2)] == [("t", 1), ("t-rf2", 1)]


def test_worker_spec_carries_the_topics() -> None:
    s = spec(topics=["t", "t-rf2", "t-rf1"])
    back = WorkerSpec.from_json(s.to_json())
    assert back == s and WorkerRun(back).topics == ["t", "t-rf2", "t-rf1"]
    # A spec without topics (one topic) writes the main topic only.
    assert WorkerRun(spec()).topics == ["t"]


def test_a_started_clusters_run_reads_writes_and_hands_on_every_topic() -> None:
    run = Run(config(start_cluster=3, copiers=1, topic="v", progress=False))
    assert run.topics == ["v", "v-rf2", "v-rf1"]
    assert run.read_topics == ["v", "v-rf2", "v-rf1", "v-out"]
    assert run.worker_spec("txn", "txn0", 0).topics == ["v", "v-rf2", "v-rf1"]
    assert run.worker_spec("txn", "txn0", 0).topic == "v"
    single = Run(config(start_cluster=3, replication_factor=3, topic="v", progress=False))
    assert single.read_topics == ["v"]


def test_topics_are_created_with_their_own_min_insync_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An RF 1 topic under the cluster's min.insync.replicas 2 would refuse every acks=all
    write: the spread topics get no more than their replicas."""
    created: list[Any] = []
    monkeypatch.setattr(workload, "AdminClient", lambda conf: None)
    monkeypatch.setattr(workload, "create_topics", lambda admin, topics: created.extend(topics))
    monkeypatch.setattr(Run, "wait_ready", lambda self, timeout=60.0: None)
    Run(config(start_cluster=3, copiers=1, topic="v", progress=False)).create_topic()
    got = {t.topic: (t.num_partitions, t.replication_factor, t.config) for t in created}
    assert got == {
        "v": (3, 3, {}),
        "v-rf2": (3, 2, {"min.insync.replicas": "2"}),
        "v-rf1": (3, 1, {"min.insync.replicas": "1"}),
        "v-out": (3, 3, {}),
    }
    created.clear()
    Run(config(start_cluster=3, min_insync_replicas=1, topic="v", progress=False)).create_topic()
    assert {t.topic: t.config for t in created}["v-rf2"] == {"min.insync.replicas": "1"}
