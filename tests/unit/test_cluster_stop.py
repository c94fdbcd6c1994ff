"""`ClusterRuntime.stop`: its background tasks are cancelled and awaited, but a cancellation
of whoever is stopping the runtime is not taken for one of theirs and lost."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.broker.replica_manager import ReplicaManager
from oncelog.server.cluster import ClusterRuntime
from tests.unit.metrics_broker import clustered_replicas


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[ReplicaManager]:
    with clustered_replicas(tmp_path, 1) as replicas:
        yield replicas


def runtime(replicas: ReplicaManager) -> ClusterRuntime:
    return ClusterRuntime(replicas.config, replicas, lambda _keys: None)


async def _slow_to_stop(stopping: asyncio.Event, release: asyncio.Event) -> None:
    """A task that, once cancelled, takes until `release` to finish."""
    try:
        await asyncio.Event().wait()
    finally:
        stopping.set()
        await release.wait()


def test_a_cancelled_stop_stays_cancelled(replicas: ReplicaManager) -> None:
    async def scenario() -> tuple[bool, bool]:
        cluster = runtime(replicas)
        stopping, release = asyncio.Event(), asyncio.Event()
        slow = asyncio.create_task(_slow_to_stop(stopping, release))
        await asyncio.sleep(0)
        cluster._tasks = [slow]
        stopper = asyncio.create_task(cluster.stop())
        await stopping.wait()  # stop() waits for the slow task now
        stopper.cancel()
        release.set()
        await asyncio.wait([stopper])
        return stopper.cancelled(), slow.done()

    cancelled, task_done = asyncio.run(scenario())
    assert cancelled, "the caller's cancellation was swallowed by stop()"
    assert task_done


def test_a_task_that_failed_is_logged_not_raised(
    replicas: ReplicaManager, caplog: pytest.LogCaptureFixture
) -> None:
    async def failing() -> None:
        raise RuntimeError("watch broke")

    async def scenario() -> None:
        cluster = runtime(replicas)
        task = asyncio.create_task(failing(), name="watch")
        await asyncio.sleep(0)
        cluster._tasks = [task]
        await cluster.stop()

    with caplog.at_level(logging.WARNING, logger="oncelog.server.cluster"):
        asyncio.run(scenario())
    assert "cluster task watch ended with RuntimeError('watch broke')" in caplog.text
