"""Producer-state snapshots: round trip, damaged files, choice of snapshot on load."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.fileio import CorruptFileError
from oncelog.producer_state import snapshot
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.protocol.records.batch import BatchHeader
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)


def header(pid: int, seq: int, offset: int, epoch: int = 0) -> BatchHeader:
    return BatchHeader(offset, 100, 0, 2, 0, 0, 0, 5, 5, pid, epoch, seq, 1)


def state_with(n_producers: int, batches: int) -> ProducerStateManager:
    mgr = ProducerStateManager(TP)
    offset = 0
    for seq in range(batches):
        for pid in range(n_producers):
            mgr.replay([header(pid, seq, offset)])
            offset += 1
    return mgr


def test_round_trip_keeps_all_five_batches(tmp_path: Path) -> None:
    mgr = state_with(3, 7)
    mgr.take_snapshot(tmp_path)
    loaded = ProducerStateManager(TP)
    assert loaded.load_snapshot(tmp_path, 10_000) == 21
    assert loaded.producers == mgr.producers
    assert len(loaded.producers[0].batches) == 5
    assert loaded.find_duplicate(header(1, 2, 0)) is not None


def test_damaged_snapshot_falls_back_to_an_older_one(tmp_path: Path) -> None:
    mgr = state_with(2, 2)
    mgr.take_snapshot(tmp_path)
    mgr.replay([header(0, 2, 4)])
    mgr.take_snapshot(tmp_path)
    newest = snapshot.snapshot_path(tmp_path, 5)
    data = bytearray(newest.read_bytes())
    data[-3] ^= 0xFF
    newest.write_bytes(bytes(data))
    loaded = ProducerStateManager(TP)
    assert loaded.load_snapshot(tmp_path, 100) == 4
    assert not newest.exists()


def test_snapshot_beyond_log_end_is_ignored(tmp_path: Path) -> None:
    state_with(1, 3).take_snapshot(tmp_path)
    loaded = ProducerStateManager(TP)
    assert loaded.load_snapshot(tmp_path, 2) is None
    assert snapshot.list_snapshots(tmp_path) == []


@pytest.mark.parametrize("cut", [0, 5, 13, 30])
def test_truncated_snapshot_is_corrupt(tmp_path: Path, cut: int) -> None:
    data = snapshot.encode(7, state_with(2, 2).producers.values())
    with pytest.raises(CorruptFileError):
        snapshot.decode(data[:cut])


def test_only_a_few_snapshots_are_kept(tmp_path: Path) -> None:
    mgr = ProducerStateManager(TP)
    for i in range(6):
        mgr.replay([header(0, i, i)])
        mgr.take_snapshot(tmp_path)
    assert snapshot.list_snapshots(tmp_path) == [4, 5, 6]
