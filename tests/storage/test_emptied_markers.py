"""A marker the cleaner empties: once its transaction's data is gone and its delete horizon
passed, a marker that is its producer's last batch stays as a control batch without records
(Kafka's RETAIN_EMPTY, for the producer's epoch). Kafka's followers and producer-state
replay take such a batch as "the whole transaction was cleaned": nothing to end. A follower
fetching the cleaned log, and a restart replaying over it, must not fail on it."""

from __future__ import annotations

from pathlib import Path

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.protocol.records.batch import iter_batches
from oncelog.storage.cleaner import CleanerSettings, LogCleaner
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from oncelog.storage.partition_log import PartitionLog
from tests.storage.cleaner_util import Producer, send_plain
from tests.storage.test_replication import open_at
from tests.storage.util import T0, TP, read_all

COMPACT = LogConfig(
    segment_bytes=400,
    cleanup_policy=("compact",),
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=1000,
    retention_ms=-1,
)


def emptied_marker_log(root: Path, clock: ManualClock) -> PartitionLog:
    """A log whose first transaction was aborted with a bumped epoch (as a coordinator
    aborts a timed-out one): its data is cleaned away, then its marker's horizon passes, and
    the marker, the producer's last batch, stays empty. Another transaction commits."""
    plog = open_at(root, clock, COMPACT, replicated=True)
    txn = Producer(plog, 7, transactional=True)
    txn.send([(b"k", b"in-txn")])
    plog.append(EndTxnMarker(7, 1, 0, False), 0, AppendOrigin.COORDINATOR)
    other = Producer(plog, 8, transactional=True)
    other.send([(b"j", b"kept")])
    other.end(commit=True)
    send_plain(plog, [(b"k", b"plain")])
    cleaner = LogCleaner(CleanerSettings(), clock)
    for i in range(3):  # drop the data; stamp the marker's horizon; past it, empty the marker
        plog.roll()
        plog.set_high_watermark(plog.log_end_offset)
        cleaner.clean_now(plog)
        clock.advance(2000)
        send_plain(plog, [(b"k", f"plain-{i}".encode())])
    plog.set_high_watermark(plog.log_end_offset)
    emptied = [h for _, h in iter_batches(read_all(plog)) if h.is_control and h.record_count == 0]
    assert [h.producer_id for h in emptied] == [7]
    return plog


def test_a_follower_takes_an_emptied_marker(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    leader = emptied_marker_log(tmp_path / "leader", clock)
    follower = open_at(tmp_path / "follower", clock, COMPACT, replicated=True)
    data = read_all(leader)
    follower.append(data, origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == leader.log_end_offset
    follower.set_high_watermark(leader.high_watermark)
    assert read_all(follower) == data
    assert follower.producer_state.ongoing_transactions() == {}


def test_a_restart_replays_producer_state_over_an_emptied_marker(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    plog = emptied_marker_log(tmp_path, clock)
    end = plog.log_end_offset
    plog.close(flush=False)
    for snapshot in (tmp_path / str(TP)).glob("*.snapshot"):
        snapshot.unlink()  # replay from the log start, over the emptied marker
    again = PartitionLog.load(tmp_path / str(TP), TP, COMPACT, clock, clean=False)
    assert again.log_end_offset == end
    assert again.producer_state.ongoing_transactions() == {}
    assert again.last_stable_offset == end
