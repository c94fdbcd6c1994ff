"""A follower's append in one write (the common case) and run by run (when a batch rolls the
segment) store the same bytes, segments, indexes and state as the leader, for any segment size
and fetch size (issue 15: the one-write path is the lean one, the other the reference)."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.errors import CorruptMessage
from oncelog.protocol.records.batch import iter_batches
from oncelog.storage import follower_append
from oncelog.storage.log_info import AppendOrigin
from oncelog.storage.partition_log import PartitionLog
from tests.storage.test_replication import (
    Workload,
    assert_same_replica,
    catch_up,
    open_at,
)
from tests.storage.util import T0, append


def counting_runs(plog: PartitionLog, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batches of each follower append that went run by run (`write_runs`)."""
    calls: list[int] = []
    real = follower_append.write_runs

    def runs(
        log: PartitionLog, view: memoryview, batches: list[Any], markers: dict[int, Any]
    ) -> None:
        calls.append(len(batches))
        real(log, view, batches, markers)

    monkeypatch.setattr(follower_append, "write_runs", runs)
    return calls


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    segment_bytes=st.sampled_from([300, 700, 2_000, 1 << 20]),
    index_interval=st.sampled_from([1, 200, 4096]),
    cut=st.booleans(),
)
def test_any_fetch_sizes_give_the_leaders_replica(
    tmp_path_factory: pytest.TempPathFactory,
    seed: int,
    segment_bytes: int,
    index_interval: int,
    cut: bool,
) -> None:
    root = tmp_path_factory.mktemp("replica")
    clock = ManualClock(T0)
    config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval)
    leader = open_at(root / "leader", clock, config)
    follower = open_at(root / "follower", clock, config)
    Workload(leader).run()
    catch_up(follower, leader, random.Random(seed), cut=cut)
    assert_same_replica(follower, leader)
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]


def test_batches_that_fit_go_in_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = ManualClock(T0)
    leader = open_at(tmp_path / "leader", clock)
    follower = open_at(tmp_path / "follower", clock)
    Workload(leader).run()
    runs = counting_runs(follower, monkeypatch)
    data = bytes(leader.read(0, 1 << 20, for_follower=True).records)
    info = follower.append(data, origin=AppendOrigin.REPLICATION)
    assert runs == []  # markers, epochs and producers included: one write
    assert info.batches == len(list(iter_batches(data))) > 10
    assert info.records == leader.log_end_offset
    assert_same_replica(follower, leader)


def test_a_batch_that_rolls_the_segment_takes_the_run_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(T0)
    config = LogConfig(segment_bytes=700, index_interval_bytes=200)
    leader = open_at(tmp_path / "leader", clock, config)
    follower = open_at(tmp_path / "follower", clock, config)
    Workload(leader).run()
    assert len(leader.segments) > 3
    runs = counting_runs(follower, monkeypatch)
    while follower.log_end_offset < leader.log_end_offset:
        data = bytes(leader.read(follower.log_end_offset, 1 << 20, for_follower=True).records)
        follower.append(data, origin=AppendOrigin.REPLICATION)
    assert runs  # at least one append crossed a roll
    assert_same_replica(follower, leader)


def test_a_segment_rolled_by_time_rolls_on_the_follower(tmp_path: Path) -> None:
    """Later batch timestamps roll the leader's segment (segment.ms): a follower fetching
    them all at once rolls at the same batches."""
    clock = ManualClock(T0)
    config = LogConfig(segment_ms=1_000)
    leader = open_at(tmp_path / "leader", clock, config)
    follower = open_at(tmp_path / "follower", clock, config)
    for i in range(8):
        append(leader, [b"v%d" % i], timestamp=T0 + 600 * i)
    assert len(leader.segments) > 2
    data = b"".join(bytes(s.read_batches(s.base_offset, 1 << 20)[0]) for s in leader.segments)
    follower.append(data, origin=AppendOrigin.REPLICATION)
    assert_same_replica(follower, leader)
    assert [s.base_offset for s in follower.segments] == [s.base_offset for s in leader.segments]


def test_a_bad_crc_anywhere_writes_nothing(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    leader = open_at(tmp_path / "leader", clock)
    follower = open_at(tmp_path / "follower", clock)
    Workload(leader).run()
    data = bytearray(leader.read(0, 1 << 20, for_follower=True).records)
    last_pos, last = list(iter_batches(data))[-1]
    data[last_pos + last.size - 1] ^= 0xFF
    with pytest.raises(CorruptMessage):
        follower.append(data, origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == 0 and follower.segments[0].size == 0
    assert follower.leader_epoch_cache.entries == []
