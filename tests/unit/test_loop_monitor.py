"""The latency diagnostics of `oncelog.server.loop_monitor` (bench/latency.py reads them)."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from pathlib import Path

from oncelog.server import loop_monitor


def block_loop() -> None:
    time.sleep(0.3)  # a blocking call on the event loop, as an fsync there would be


def test_off_without_the_environment(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv(loop_monitor.ENV_PATH, raising=False)
    assert loop_monitor.from_environment() is None


def test_records_lag_stalls_with_their_stack_and_gc(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(loop_monitor.ENV_PATH, str(tmp_path / "stats-{pid}.json"))
    monitor = loop_monitor.from_environment()
    assert monitor is not None

    async def main() -> None:
        monitor.start()
        await asyncio.sleep(0.05)
        block_loop()
        # Let the monitor record the blocked tick before the collection: in a long test run
        # the heap is large and a full collection alone can take a third of a second of CPU,
        # which would land in that tick.
        await asyncio.sleep(0.02)
        gc.collect()
        await asyncio.sleep(0.05)
        monitor.stop()

    asyncio.run(main())
    (written,) = tmp_path.glob("stats-*.json")
    stats = json.loads(written.read_text())
    assert stats["lag"]["samples"] > 0
    assert stats["lag"]["max_ms"] >= 100
    # The blocked tick: lag, but the loop thread hardly ran meanwhile (it slept).
    blocked = next(e for e in stats["lag"]["slow"] if e[1] >= 100)  # the first: the sleep's
    _, lag, cpu_ms, _runqueue_ms, since_ms = blocked
    assert cpu_ms < lag / 2 and since_ms >= lag
    # The watchdog saw the loop held and took its stack there.
    assert any("block_loop" in " ".join(s["stack"]) for s in stats["stalls"])
    assert stats["gc"]["count"]["2"] >= 1
    assert not gc.callbacks or monitor._on_gc not in gc.callbacks
