"""The cleaner's swap off the event loop, in the broker: in process, no fsync or rename of
`BrokerServer._clean` runs on the loop's thread; as a real process, a SIGKILL while a
worker thread is half-way through a swap restarts with the compacted data whole."""

from __future__ import annotations

import asyncio
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import Producer

from oncelog.broker.replica_manager import TopicSpec
from oncelog.config import BrokerConfig
from oncelog.server.app import BrokerServer
from oncelog.types import TopicPartition
from tests.broker_process import BrokerProcess
from tests.integration.helpers import create_topic, wait_until
from tests.integration.test_cleaner import (
    OVERRIDES,
    TOPIC,
    TOPIC_CONFIG,
    Idempotent,
    read_all,
    table,
)
from tests.storage.cleaner_util import record_fsyncs_and_renames, send_plain

pytestmark = pytest.mark.integration


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    return record_fsyncs_and_renames(monkeypatch)


def test_the_broker_cleans_and_swaps_off_its_event_loop(
    tmp_path: Path, calls: list[tuple[str, int]]
) -> None:
    server = BrokerServer(BrokerConfig({"log.dirs": str(tmp_path)}))
    replicas = server.replicas
    replicas.startup()
    pool = ThreadPoolExecutor(1)  # the round in a thread here, not a spawned process
    try:
        replicas.create_topic(TopicSpec(TOPIC, 1, 1, {**TOPIC_CONFIG, "segment.bytes": "600"}))
        plog = replicas.logs.get(TopicPartition(TOPIC, 0))
        assert plog is not None
        for n in range(60):
            send_plain(plog, [(f"k{n % 5}".encode(), f"v{n}".encode())])
        size = plog.size_bytes
        server.housekeeping._cleaner_pool = pool  # type: ignore[assignment]

        async def clean() -> int:
            calls.clear()
            await server.housekeeping.clean()
            return threading.get_ident()

        loop_thread = asyncio.run(clean())
        assert replicas.logs.cleaner.cleanings >= 1 and plog.size_bytes < size
        assert [name for name, _ in calls].count("fsync") >= 3  # the swap's directory fsyncs
        assert [name for name, ident in calls if ident == loop_thread] == []
    finally:
        replicas.shutdown()
        pool.shutdown()


#: Put in front of a broker process's path: holds its first swap of TOPIC at a step, after
#: noting which thread runs it, until the test kills the process.
SITECUSTOMIZE = """
import os, threading, time
from oncelog.storage import swap

_complete = swap.complete


def complete(directory, base, old_bases, crash=swap._no_crash):
    def hook(at):
        crash(at)
        if at == os.environ["SWAP_PAUSE_STEP"] and directory.name.startswith("{topic}-"):
            marker = os.environ["SWAP_PAUSE_MARKER"]
            with open(marker + ".tmp", "w") as f:
                f.write(str(threading.current_thread() is threading.main_thread()))
            os.rename(marker + ".tmp", marker)
            time.sleep(600)

    return _complete(directory, base, old_bases, hook)


swap.complete = complete
"""


def produce_workload(bootstrap: str) -> dict[bytes, bytes]:
    """Keys overwritten, a committed and an aborted transaction, a tombstone and fresh keys
    after them (so the interesting part is out of the active segment); the expected table."""
    model: dict[bytes, bytes | None] = {}
    idem = Idempotent(bootstrap)
    for n in range(60):
        key, value = f"k{n % 6}".encode(), f"p-{n}-".encode() + b"x" * 40
        idem.send(key, value)
        model[key] = value
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "swap-kill-txn"})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce(TOPIC, key=b"k1", value=b"committed-1")
    txn.commit_transaction(30)
    model[b"k1"] = b"committed-1"
    txn.begin_transaction()
    txn.produce(TOPIC, key=b"k2", value=b"aborted-2")
    txn.flush(10)
    txn.abort_transaction(30)
    idem.send(b"k3", None)
    model[b"k3"] = None
    for n in range(40):
        key, value = f"f{n}".encode(), b"f" * 100
        idem.send(key, value)
        model[key] = value
    assert idem.errors == []
    return {k: v for k, v in model.items() if v is not None}


@pytest.mark.parametrize("step", ["indexes-swap", "deleted-old", "log-renamed"])
def test_sigkill_half_way_through_a_swap_restarts_with_the_compacted_data(
    broker_factory: type[BrokerProcess],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    step: str,
) -> None:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(SITECUSTOMIZE.replace("{topic}", TOPIC))
    marker = tmp_path / "swap-paused"
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(hooks), os.environ.get("PYTHONPATH", "")])
    )
    monkeypatch.setenv("SWAP_PAUSE_STEP", step)
    monkeypatch.setenv("SWAP_PAUSE_MARKER", str(marker))
    broker = broker_factory(overrides=OVERRIDES).start()
    create_topic(broker.bootstrap, TOPIC, 1, TOPIC_CONFIG)
    expected = produce_workload(broker.bootstrap)
    wait_until(marker.exists, 60, "the broker to pause half-way through a swap")
    assert marker.read_text() == "False"  # the swap's file work is not on the loop's thread
    broker.kill()
    for name in ("PYTHONPATH", "SWAP_PAUSE_STEP", "SWAP_PAUSE_MARKER"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # as before the test
    log_before = len(broker.log_path.read_text())
    broker.start()
    restart_log = broker.log_path.read_text()[log_before:]
    # (past "log-renamed" only index `.swap` files are left: renamed without a warning)
    assert ("completed interrupted cleaner swaps" in restart_log) == (step != "log-renamed")
    (partition,) = broker.data_dir.rglob(f"{TOPIC}-0")
    assert not [p for p in os.listdir(partition) if p.endswith((".cleaned", ".swap"))]
    rows = read_all(broker.bootstrap, "read_committed")
    assert table(rows) == expected
    assert not any(v.startswith(b"aborted") for _, _, v in rows if v)

    def cleaned_again() -> bool:
        """The restarted broker cleans again: the aborted data goes, one record per key."""
        rows = read_all(broker.bootstrap, "read_uncommitted", quiet=0.5)
        keys = [key for _, key, _ in rows]
        return table(rows) == expected and len(keys) == len(set(keys))

    wait_until(cleaned_again, 60, "the restarted broker to clean the topic")
    assert f"Cleaned {TOPIC}-0" in broker.log_path.read_text()[log_before:]
    assert table(read_all(broker.bootstrap, "read_committed")) == expected
