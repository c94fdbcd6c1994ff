"""WriteTxnMarkers when the disk refuses a marker: that partition answers KAFKA_STORAGE_ERROR
(the sender retries), the request's other partitions are written and answered, and nothing
escapes the handler (an escaping error closed the whole request before)."""

from __future__ import annotations

import errno
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.broker.handlers import write_txn_markers
from oncelog.errors import ErrorCode
from oncelog.types import TopicPartition
from tests.storage.test_transactions import produce
from tests.storage.util import open_log


def test_a_marker_the_disk_refuses_is_a_storage_error_for_that_partition_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = {TopicPartition("t", p): open_log(tmp_path / f"t-{p}") for p in (0, 1)}
    for plog in logs.values():
        produce(plog, 7, 0, 0)  # producer 7's transaction open on both partitions

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(logs[TopicPartition("t", 0)].active.txn_index, "append", full)
    woken: list[Any] = []
    decided: list[Any] = []
    replicas = SimpleNamespace(
        logs=logs, notify_appended=woken.extend, leader_epoch=lambda tp: 0, clustered=False
    )
    ctx: Any = SimpleNamespace(
        broker=SimpleNamespace(replicas=replicas, groups=SimpleNamespace(on_marker=decided.append))
    )
    request = SimpleNamespace(
        markers=[
            SimpleNamespace(
                producer_id=7,
                producer_epoch=0,
                coordinator_epoch=0,
                transaction_result=False,  # ABORT: needs the .txnindex entry
                topics=[SimpleNamespace(name="t", partition_indexes=[0, 1])],
            )
        ]
    )
    answer = write_txn_markers.handle(ctx, request)
    codes = {
        p["partition_index"]: p["error_code"]
        for p in answer["markers"][0]["topics"][0]["partitions"]
    }
    assert codes == {0: ErrorCode.kafka_storage_error, 1: ErrorCode.none}
    assert woken == [TopicPartition("t", 1)] and len(decided) == 1
    assert logs[TopicPartition("t", 0)].last_stable_offset == 0  # still open: retried later
    assert logs[TopicPartition("t", 1)].last_stable_offset == 3
    for plog in logs.values():
        plog.close()
