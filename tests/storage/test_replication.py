"""PartitionLog as a replica: a follower's appends, truncation, the replicated high watermark,
and the leader epochs kept across restarts."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.errors import CorruptMessage, InvalidRecord, OffsetOutOfRange
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, build_batch, iter_batches
from oncelog.protocol.records.record import encode_record
from oncelog.storage.leader_epoch_cache import CHECKPOINT_FILE, EpochEntry
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from oncelog.storage.log_manager import LogManager
from oncelog.storage.partition_log import PartitionLog, UnexpectedAppendOffset
from oncelog.storage.replication_checkpoint import REPLICATION_CHECKPOINT_FILE, read_offsets
from tests.storage.util import T0, TP, make_batch, read_all, validated

SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


def producer_batch(
    pid: int, epoch: int, seq: int, count: int = 2, *, transactional: bool = False
) -> bytes:
    body = b"".join(
        encode_record(offset_delta=i, key=None, value=f"{pid}:{seq + i}".encode() * 3)
        for i in range(count)
    )
    return build_batch(
        base_offset=0,
        records=body,
        record_count=count,
        last_offset_delta=count - 1,
        base_timestamp=T0,
        max_timestamp=T0,
        attributes=TRANSACTIONAL_FLAG if transactional else 0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def open_at(
    root: Path,
    clock: ManualClock,
    config: LogConfig | None = None,
    *,
    clean: bool = True,
    log_start_offset: int = 0,
    replicated: bool = False,
    high_watermark: int | None = None,
) -> PartitionLog:
    return PartitionLog.load(
        root / str(TP),
        TP,
        config or LogConfig(),
        clock,
        clean=clean,
        log_start_offset=log_start_offset,
        replicated=replicated,
        high_watermark=high_watermark,
    )


class Workload:
    """A leader's appends over several leader epochs: plain, idempotent and transactional
    batches, COMMIT and ABORT markers, and a transaction left open at the end."""

    def __init__(self, leader: PartitionLog) -> None:
        self.leader = leader
        self.seq: dict[int, int] = {}
        self.last_batch: dict[int, bytes] = {}

    def plain(self, epoch: int, n: int = 1) -> None:
        for i in range(n):
            self.leader.append(validated(make_batch([b"plain-%d" % i] * (1 + i % 3))), epoch)

    def produce(self, pid: int, epoch: int, *, transactional: bool = False, count: int = 2) -> None:
        seq = self.seq.get(pid, 0)
        batch = producer_batch(pid, 0, seq, count, transactional=transactional)
        self.leader.append(validated(batch), epoch)
        self.seq[pid] = seq + count
        self.last_batch[pid] = batch

    def end(self, pid: int, epoch: int, *, commit: bool) -> None:
        self.leader.append(EndTxnMarker(pid, 0, 1, commit), epoch, AppendOrigin.COORDINATOR)

    def run(self, epochs: tuple[int, ...] = (0, 2, 5)) -> None:
        for epoch in epochs:
            self.plain(epoch, 2)
            self.produce(1, epoch)  # idempotent
            self.produce(2, epoch, transactional=True)
            self.produce(3, epoch, transactional=True, count=3)
            self.plain(epoch)
            self.produce(2, epoch, transactional=True)
            self.end(2, epoch, commit=True)
            self.produce(1, epoch, count=4)
            self.end(3, epoch, commit=False)
        self.produce(4, epochs[-1], transactional=True)  # left open


def catch_up(
    follower: PartitionLog, leader: PartitionLog, rng: random.Random, *, cut: bool = True
) -> int:
    """Fetch from the leader in random sizes, cutting batches, until the ends meet."""
    rounds = 0
    while follower.log_end_offset < leader.log_end_offset:
        rounds += 1
        assert rounds < 10_000
        data = bytes(
            leader.read(
                follower.log_end_offset, rng.choice([1, 100, 300, 1000, 5000]), for_follower=True
            ).records
        )
        if cut and rng.random() < 0.5:
            data = data[: rng.randrange(len(data) + 1)]
        info = follower.append(data, origin=AppendOrigin.REPLICATION)
        if info.batches:
            assert info.first_offset >= 0 and info.last_offset == follower.log_end_offset - 1
            assert info.valid_bytes <= len(data)
    return rounds


def files_of(plog: PartitionLog) -> dict[str, bytes]:
    return {
        p.name: p.read_bytes() for p in sorted(plog.directory.iterdir()) if p.suffix in SUFFIXES
    }


def assert_same_replica(follower: PartitionLog, leader: PartitionLog) -> None:
    assert follower.log_end_offset == leader.log_end_offset
    assert files_of(follower) == files_of(leader)
    assert follower.producer_state.producers == leader.producer_state.producers
    ongoing = leader.producer_state.ongoing_transactions()
    assert follower.producer_state.ongoing_transactions() == ongoing
    assert follower.last_stable_offset == leader.last_stable_offset
    end = leader.log_end_offset
    assert follower.aborted_transactions(0, end) == leader.aborted_transactions(0, end)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


SMALL = LogConfig(segment_bytes=700, index_interval_bytes=200)


@pytest.mark.parametrize("seed", range(4))
def test_follower_ends_byte_identical_with_equal_state(
    tmp_path: Path, clock: ManualClock, seed: int
) -> None:
    leader = open_at(tmp_path / "leader", clock, SMALL)
    follower = open_at(tmp_path / "follower", clock, SMALL)
    work = Workload(leader)
    work.run()
    assert len(leader.segments) > 3
    assert [e.epoch for e in leader.leader_epoch_cache.entries] == [0, 2, 5]
    catch_up(follower, leader, random.Random(seed))
    assert_same_replica(follower, leader)
    assert follower.producer_state.first_unstable_offset() is not None  # pid 4 is open
    # A retried batch is a duplicate on either.
    for pid in (1, 2, 3):
        retry = validated(work.last_batch[pid])
        header = retry.batches[0][1]
        found = leader.producer_state.find_duplicate(header)
        assert found is not None
        assert follower.producer_state.find_duplicate(header) == found
    retry = validated(work.last_batch[1])
    answer = follower.append(retry, 6)
    assert answer.duplicate and answer == leader.append(retry, 6)
    # read_committed answers are the same.
    for offset in range(0, leader.log_end_offset, 7):
        a = follower.read(offset, 1 << 20, read_committed=True)
        b = leader.read(offset, 1 << 20, read_committed=True)
        assert bytes(a.records) == bytes(b.records) and a.aborted == b.aborted
    # The follower, now leader, goes on from the same state.
    follower.append(EndTxnMarker(4, 0, 1, True), 6, AppendOrigin.COORDINATOR)
    leader.append(EndTxnMarker(4, 0, 1, True), 6, AppendOrigin.COORDINATOR)
    assert_same_replica(follower, leader)


def test_a_restarted_follower_loads_what_it_was_sent(tmp_path: Path, clock: ManualClock) -> None:
    leader = open_at(tmp_path / "leader", clock, SMALL)
    follower = open_at(tmp_path / "follower", clock, SMALL)
    Workload(leader).run()
    catch_up(follower, leader, random.Random(1))
    follower.close()
    again = open_at(tmp_path / "follower", clock, SMALL, clean=False)
    assert again.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert again.producer_state.producers == leader.producer_state.producers
    assert again.last_stable_offset == leader.last_stable_offset
    assert again.aborted_transactions(0, again.log_end_offset) == leader.aborted_transactions(
        0, leader.log_end_offset
    )


def test_a_partial_batch_alone_stores_nothing(tmp_path: Path, clock: ManualClock) -> None:
    leader = open_at(tmp_path / "leader", clock)
    follower = open_at(tmp_path / "follower", clock)
    Workload(leader).run((0,))
    data = bytes(leader.read(0, 1 << 20, for_follower=True).records)
    first_size = next(iter(iter_batches(data)))[1].size
    for cut in (0, 1, 11, 12, 60, 61, first_size - 1):
        info = follower.append(data[:cut], origin=AppendOrigin.REPLICATION)
        assert info.batches == 0 and info.first_offset == -1 and info.valid_bytes == 0
    assert follower.log_end_offset == 0 and follower.active.size == 0
    info = follower.append(data[: first_size + 5], origin=AppendOrigin.REPLICATION)
    assert (info.first_offset, info.batches, info.valid_bytes) == (0, 1, first_size)


def _one_batch_log(tmp_path: Path, clock: ManualClock) -> tuple[PartitionLog, PartitionLog, bytes]:
    leader = open_at(tmp_path / "leader", clock)
    follower = open_at(tmp_path / "follower", clock)
    Workload(leader).run((3,))
    return leader, follower, bytes(leader.read(0, 1 << 20, for_follower=True).records)


def test_a_corrupt_batch_writes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    _, follower, data = _one_batch_log(tmp_path, clock)
    positions = [pos for pos, _ in iter_batches(data)]
    damaged = bytearray(data)
    damaged[positions[3] + 70] ^= 0xFF  # a record byte of the fourth batch
    with pytest.raises(CorruptMessage, match="CRC"):
        follower.append(bytes(damaged), origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == 0 and follower.active.size == 0
    assert follower.leader_epoch_cache.entries == []
    garbage = bytearray(data[: positions[2]]) + bytes(8) + (5).to_bytes(4, "big") + bytes(60)
    with pytest.raises(CorruptMessage, match="length"):
        follower.append(bytes(garbage), origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == 0 and not follower.producer_state.producers


def test_offsets_must_go_up_and_start_at_the_log_end(tmp_path: Path, clock: ManualClock) -> None:
    _, follower, data = _one_batch_log(tmp_path, clock)
    batches = list(iter_batches(data))
    (p0, h0), (p1, h1) = batches[0], batches[1]
    follower.append(data[p0 : p0 + h0.size], origin=AppendOrigin.REPLICATION)
    with pytest.raises(UnexpectedAppendOffset) as raised:
        follower.append(data, origin=AppendOrigin.REPLICATION)  # starts at 0, below the log end 1
    assert isinstance(raised.value, OffsetOutOfRange)
    assert raised.value.first_offset == 0
    assert follower.log_end_offset == h0.next_offset
    swapped = data[p1 : p1 + h1.size] + data[p0 : p0 + h0.size]
    with pytest.raises(InvalidRecord, match="out of order"):
        follower.append(swapped, origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == h0.next_offset
    follower.append(data[p1:], origin=AppendOrigin.REPLICATION)
    assert read_all(follower) == data


def test_gaps_left_by_the_cleaner_are_accepted(tmp_path: Path, clock: ManualClock) -> None:
    _, follower, data = _one_batch_log(tmp_path, clock)
    batches = list(iter_batches(data))
    kept = [batches[0], batches[2], batches[5]]
    sparse = b"".join(data[p : p + h.size] for p, h in kept)
    info = follower.append(sparse, origin=AppendOrigin.REPLICATION)
    assert (info.first_offset, info.last_offset) == (0, batches[5][1].last_offset)
    assert read_all(follower) == sparse
    assert follower.producer_state.map_end_offset == follower.log_end_offset


def test_a_roll_before_a_gap_starts_the_segment_at_the_next_batch(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader, _, data = _one_batch_log(tmp_path, clock)
    follower = open_at(tmp_path / "small", clock, LogConfig(segment_bytes=60))  # a batch each
    batches = list(iter_batches(data))
    kept = [batches[0], batches[2], batches[5]]
    info = follower.append(
        b"".join(data[p : p + h.size] for p, h in kept), origin=AppendOrigin.REPLICATION
    )
    assert info.batches == 3
    assert [s.base_offset for s in follower.segments] == [h.base_offset for _, h in kept]
    rest = data[batches[7][0] :]
    follower.append(rest, origin=AppendOrigin.REPLICATION)
    assert read_all(follower, batches[7][1].base_offset) == rest
    assert follower.segments[3].base_offset == batches[7][1].base_offset
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries


def _diverge(tmp_path: Path, clock: ManualClock) -> tuple[PartitionLog, PartitionLog]:
    """A follower that led epoch 2 and wrote batches the new leader (epoch 3) never got."""
    leader = open_at(tmp_path / "leader", clock, SMALL)
    follower = open_at(tmp_path / "follower", clock, SMALL)
    work = Workload(leader)
    work.run((0, 1))
    catch_up(follower, leader, random.Random(7))
    # The follower, leading epoch 2, takes appends nobody replicated...
    follower.assign_leader_epoch(2, follower.log_end_offset)
    old = Workload(follower)
    old.seq = dict(work.seq)
    old.produce(1, 2)
    old.produce(9, 2, transactional=True)
    old.plain(2, 12)  # and rolls a segment or two
    old.end(9, 2, commit=False)
    # ...while the leader, elected for epoch 3, takes others.
    leader.assign_leader_epoch(3, leader.log_end_offset)
    work.plain(3, 4)
    work.produce(1, 3)
    work.produce(2, 3, transactional=True)
    work.end(2, 3, commit=False)
    return leader, follower


def test_a_diverged_follower_truncates_to_the_leaders_epoch_end(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader, follower = _diverge(tmp_path, clock)
    assert follower.latest_leader_epoch == 2
    epoch, end = leader.end_offset_for_epoch(follower.latest_leader_epoch)
    assert epoch == 1  # the leader never had epoch 2
    assert end == leader.leader_epoch_cache.entries[-1].start_offset
    assert follower.local_end_offset_for_epoch(epoch) == end
    follower.truncate_to(min(end, follower.local_end_offset_for_epoch(epoch)))
    assert follower.log_end_offset == end
    assert follower.latest_leader_epoch == 1
    last = follower.leader_epoch_cache.entries[-1]
    follower.leader_epoch_cache.wait_for_writes()  # a truncation's write is in the background
    assert (follower.directory / CHECKPOINT_FILE).read_text().endswith(f"1 {last.start_offset}\n")
    catch_up(follower, leader, random.Random(3))
    assert_same_replica(follower, leader)


def test_truncate_to_at_the_end_drops_an_epoch_begun_without_data(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = open_at(tmp_path, clock)
    plog.append(validated(make_batch([b"a"])), 1)
    plog.assign_leader_epoch(4, plog.log_end_offset)
    assert plog.latest_leader_epoch == 4
    plog.truncate_to(plog.log_end_offset)
    assert plog.leader_epoch_cache.entries == [EpochEntry(1, 0)]
    assert plog.log_end_offset == 1


def test_truncate_fully_and_start_at(tmp_path: Path, clock: ManualClock) -> None:
    leader = open_at(tmp_path / "leader", clock, SMALL)
    follower = open_at(tmp_path / "follower", clock, SMALL)
    work = Workload(leader)
    work.run((0, 1))
    work.end(4, 1, commit=True)  # no transaction open across the new log start
    catch_up(follower, leader, random.Random(0), cut=False)
    follower.flush()
    follower.producer_state.take_snapshot(follower.directory)
    work.run((4,))
    boundaries = [h.base_offset for _, h in iter_batches(read_all(leader))]
    start = next(b for b in boundaries if b > follower.log_end_offset + 5)
    leader.delete_records_before(start)
    with pytest.raises(OffsetOutOfRange):
        leader.read(follower.log_end_offset, 1 << 20, for_follower=True)
    follower.truncate_fully_and_start_at(leader.log_start_offset)
    assert follower.log_start_offset == follower.log_end_offset == start
    assert follower.recovery_point == start
    assert follower.leader_epoch_cache.entries == []
    assert not follower.producer_state.producers
    assert [p.name for p in follower.directory.glob("*.snapshot")] == []
    assert sorted(p.name for p in follower.directory.glob("*.log")) == [f"{start:020d}.log"]
    catch_up(follower, leader, random.Random(0))
    assert read_all(follower) == read_all(leader)
    assert follower.leader_epoch_cache.entries == leader.leader_epoch_cache.entries
    assert follower.last_stable_offset == leader.last_stable_offset
    follower.close()
    again = open_at(tmp_path / "follower", clock, SMALL, clean=False)
    assert again.log_start_offset == start and again.log_end_offset == leader.log_end_offset


def test_a_fetch_from_a_log_start_inside_a_batch(tmp_path: Path, clock: ManualClock) -> None:
    """The leader's log start moved into a batch (DeleteRecords): the follower's first fetch
    returns that batch, the follower starts its log at its base (Kafka's fetcher)."""
    leader = open_at(tmp_path / "leader", clock)
    follower = open_at(tmp_path / "follower", clock)
    Workload(leader).run((0,))
    batches = list(iter_batches(read_all(leader)))
    mid = next(h for _, h in batches if h.record_count > 2)
    leader.delete_records_before(mid.base_offset + 1)
    follower.truncate_fully_and_start_at(leader.log_start_offset)
    data = bytes(leader.read(follower.log_end_offset, 1 << 20, for_follower=True).records)
    with pytest.raises(UnexpectedAppendOffset) as raised:
        follower.append(data, origin=AppendOrigin.REPLICATION)
    follower.truncate_fully_and_start_at(raised.value.first_offset)
    follower.append(data, origin=AppendOrigin.REPLICATION)
    assert follower.log_end_offset == leader.log_end_offset


# -- the high watermark ----------------------------------------------------------------------


def test_a_single_node_log_follows_the_end(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_at(tmp_path, clock)
    plog.append(validated(make_batch([b"a", b"b"])), 0)
    assert not plog.replicated
    assert plog.high_watermark == plog.log_end_offset == 2
    assert not plog.update_high_watermark(1)
    assert plog.set_high_watermark(0) == 2
    assert plog.high_watermark == 2
    assert plog.leader_epoch_cache.entries == [EpochEntry(0, 0)]


def test_high_watermark_rules(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_at(tmp_path, clock)
    for i in range(5):
        plog.append(validated(make_batch([b"%d" % i] * 2)), 0)  # offsets 2i, 2i+1
    plog.enable_replication()
    assert plog.replicated and plog.high_watermark == 10  # unchanged at the switch
    plog.set_high_watermark(0)
    assert plog.high_watermark == 0
    assert plog.read(0, 1 << 20).records == b""
    assert len(list(iter_batches(plog.read(0, 1 << 20, for_follower=True).records))) == 5
    assert plog.update_high_watermark(4)
    assert not plog.update_high_watermark(4)
    assert not plog.update_high_watermark(3)  # never back
    assert plog.high_watermark == 4
    assert [h.base_offset for _, h in iter_batches(plog.read(0, 1 << 20).records)] == [0, 2]
    assert plog.last_stable_offset == 4
    assert plog.update_high_watermark(99) and plog.high_watermark == 10  # clamped to the end
    assert plog.set_high_watermark(6) == 6  # back, for truncation or a new leader
    plog.append(validated(make_batch([b"x"])), 0)
    assert plog.high_watermark == 6  # appends do not move it
    with pytest.raises(OffsetOutOfRange):
        plog.delete_records_before(8)
    assert plog.delete_records_before(4) == 4
    assert plog.set_high_watermark(0) == 4  # clamped to the log start
    plog.set_high_watermark(8)
    plog.truncate_to(6)
    assert plog.log_end_offset == 6 and plog.high_watermark == 6
    plog.truncate_to(5)  # whole batches only: 4-5 goes
    assert plog.high_watermark == 4 == plog.log_end_offset


def test_lso_is_bounded_by_the_high_watermark(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_at(tmp_path, clock)
    plog.enable_replication(0)
    plog.append(validated(producer_batch(7, 0, 0, transactional=True)), 0)
    marker = plog.append(EndTxnMarker(7, 0, 1, True), 0, AppendOrigin.COORDINATOR).base_offset
    assert plog.last_stable_offset == 0
    # The data is below the high watermark, the COMMIT is not: still undecided to a
    # read_committed reader (Kafka's unreplicated transactions).
    plog.update_high_watermark(marker)
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(marker + 1)
    assert plog.last_stable_offset == marker + 1
    assert plog.read(0, 1 << 20, read_committed=True).records == plog.read(0, 1 << 20).records


def test_a_transaction_is_undecided_until_its_marker_is_below_the_high_watermark(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Kafka's unreplicated transactions: an ABORT (or COMMIT) written here but not yet
    replicated keeps the LSO at the transaction's start, whichever transaction ends first."""
    plog = open_at(tmp_path, clock)
    plog.enable_replication(0)
    plog.append(validated(producer_batch(7, 0, 0, transactional=True)), 0)  # 0-1
    plog.append(validated(producer_batch(8, 0, 0, transactional=True)), 0)  # 2-3
    abort = plog.append(EndTxnMarker(8, 0, 1, False), 0, AppendOrigin.COORDINATOR).base_offset  # 4
    commit = plog.append(EndTxnMarker(7, 0, 1, True), 0, AppendOrigin.COORDINATOR).base_offset  # 5
    plog.update_high_watermark(abort)
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(abort + 1)  # the ABORT is replicated, the COMMIT is not
    assert plog.last_stable_offset == 0
    plog.update_high_watermark(commit + 1)
    assert plog.last_stable_offset == commit + 1
    assert not plog.producer_state._unreplicated  # forgotten once passed


def test_transactions_passed_by_the_high_watermark_are_forgotten_as_new_ones_end(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Nothing but a new marker need ask: the set stays as small as what is in flight."""
    plog = open_at(tmp_path, clock)
    plog.enable_replication(0)
    for i in range(50):
        plog.append(validated(producer_batch(7, 0, 2 * i, transactional=True)), 0)
        plog.append(EndTxnMarker(7, 0, 1, True), 0, AppendOrigin.COORDINATOR)
        plog.update_high_watermark(plog.log_end_offset)
    assert len(plog.producer_state._unreplicated) == 1  # the last one, noted before its HW


def test_a_single_node_log_decides_a_transaction_with_its_marker(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = open_at(tmp_path, clock)
    plog.append(validated(producer_batch(7, 0, 0, transactional=True)), 0)
    assert plog.last_stable_offset == 0
    plog.append(EndTxnMarker(7, 0, 1, True), 0, AppendOrigin.COORDINATOR)
    assert plog.last_stable_offset == plog.log_end_offset


def test_a_follower_and_a_replay_keep_an_unreplicated_marker_undecided(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A replay of the log (recovery after a crash) notes the markers again. A clean stop's
    snapshot does not hold them (nor does Kafka's): that start trusts the markers below the
    log end."""
    leader = open_at(tmp_path / "leader", clock)
    leader.enable_replication(0)
    leader.append(validated(producer_batch(7, 0, 0, transactional=True)), 0)
    marker = leader.append(EndTxnMarker(7, 0, 1, True), 0, AppendOrigin.COORDINATOR).base_offset
    follower = open_at(tmp_path / "follower", clock, replicated=True, high_watermark=0)
    follower.append(
        bytes(leader.read(0, 1 << 20, for_follower=True).records), origin=AppendOrigin.REPLICATION
    )
    follower.update_high_watermark(marker)
    assert follower.last_stable_offset == 0
    follower.close(flush=False)  # as a crash: no snapshot at the end
    follower = open_at(
        tmp_path / "follower", clock, clean=False, replicated=True, high_watermark=marker
    )
    assert follower.high_watermark == marker
    assert follower.last_stable_offset == 0
    follower.update_high_watermark(marker + 1)
    assert follower.last_stable_offset == marker + 1
    follower.close()
    leader.close()


def test_retention_keeps_segments_above_the_high_watermark(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig(segment_bytes=200, retention_ms=1000)
    plog = open_at(tmp_path, clock, config)
    for i in range(6):
        plog.append(validated(make_batch([b"v" * 100], timestamp=T0 + i)), 0)
    plog.enable_replication(0)
    segments = len(plog.segments)
    clock.advance(10_000)
    assert plog.apply_retention() == 0 and len(plog.segments) == segments
    plog.update_high_watermark(plog.segments[2].base_offset)
    assert plog.apply_retention() == 2
    assert plog.log_start_offset == plog.segments[0].base_offset
    assert plog.leader_epoch_cache.entries == [EpochEntry(0, plog.log_start_offset)]


# -- restart ---------------------------------------------------------------------------------


def test_restart_keeps_the_high_watermark_and_the_epochs(
    tmp_path: Path, clock: ManualClock
) -> None:
    config = LogConfig()
    manager = LogManager([tmp_path], clock, replication=True)
    manager.startup(lambda topic: config)
    plog = manager.create(TP, config)
    assert plog.replicated and plog.high_watermark == 0
    for epoch in (0, 0, 3, 3, 4):
        plog.append(validated(make_batch([b"a", b"b"])), epoch)
    plog.update_high_watermark(6)
    manager.checkpoint()
    assert read_offsets(tmp_path / REPLICATION_CHECKPOINT_FILE) == {TP: 6}
    plog.update_high_watermark(8)
    assert manager.finish_checkpoints([]) == 0
    manager.write_changed_files(manager.checkpoint_contents())  # the broker: in a worker
    assert read_offsets(tmp_path / REPLICATION_CHECKPOINT_FILE) == {TP: 8}
    manager.shutdown()
    again = LogManager([tmp_path], clock)  # not clustered: the checkpoint says it is replicated
    again.startup(lambda topic: config)
    reloaded = again.get(TP)
    assert reloaded is not None and reloaded.replicated
    assert reloaded.high_watermark == 8
    epochs = [EpochEntry(0, 0), EpochEntry(3, 4), EpochEntry(4, 8)]
    assert reloaded.leader_epoch_cache.entries == epochs
    fresh = again.reload(TP)
    assert fresh is not None and fresh.replicated and fresh.high_watermark == 8
    again.shutdown()


def test_a_high_watermark_beyond_the_log_is_clamped(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_at(tmp_path, clock)
    plog.append(validated(make_batch([b"a", b"b"])), 0)
    plog.close()
    assert open_at(tmp_path, clock, replicated=True, high_watermark=50).high_watermark == 2
    assert open_at(tmp_path, clock, replicated=True).high_watermark == 0  # unknown: log start


def test_a_single_node_manager_writes_no_replication_checkpoint(
    tmp_path: Path, clock: ManualClock
) -> None:
    manager = LogManager([tmp_path], clock)
    manager.startup(lambda topic: LogConfig())
    plog = manager.create(TP, LogConfig())
    plog.append(validated(make_batch([b"a"])), 0)
    manager.checkpoint()
    manager.shutdown()
    assert not (tmp_path / REPLICATION_CHECKPOINT_FILE).exists()
    assert (tmp_path / str(TP) / CHECKPOINT_FILE).read_text() == "0\n1\n0 0\n"


def test_a_lost_epoch_checkpoint_is_rebuilt_from_the_batches(
    tmp_path: Path, clock: ManualClock
) -> None:
    leader = open_at(tmp_path / "leader", clock, SMALL)
    Workload(leader).run((0, 2, 5))
    leader.append(validated(make_batch([b"x"])), 7)
    expected = leader.leader_epoch_cache.entries
    assert len(expected) == 4
    leader.close(flush=False)  # as a SIGKILL leaves it
    path = tmp_path / "leader" / str(TP) / CHECKPOINT_FILE
    path.unlink()
    again = open_at(tmp_path / "leader", clock, SMALL, clean=False)
    assert again.leader_epoch_cache.entries == expected
    again.leader_epoch_cache.wait_for_writes()  # the rebuilt file is written in the background
    assert path.read_text() == "0\n4\n" + "".join(f"{e.epoch} {e.start_offset}\n" for e in expected)
    again.close()
    path.write_text("0\n9\ngarbage\n")
    assert open_at(tmp_path / "leader", clock, SMALL).leader_epoch_cache.entries == expected


def test_a_rebuilt_cache_starts_at_the_log_start(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_at(tmp_path, clock, LogConfig(segment_bytes=200))
    for _ in range(6):
        plog.append(validated(make_batch([b"v" * 100])), 0)
    plog.delete_records_before(3)
    start = plog.log_start_offset
    assert plog.leader_epoch_cache.entries == [EpochEntry(0, start)]
    plog.close()
    (plog.directory / CHECKPOINT_FILE).unlink()
    again = open_at(tmp_path, clock, LogConfig(segment_bytes=200), log_start_offset=start)
    assert again.leader_epoch_cache.entries == [EpochEntry(0, start)]


def test_stale_entries_in_the_checkpoint_are_trimmed_at_load(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = open_at(tmp_path, clock)
    plog.append(validated(make_batch([b"a"])), 0)
    plog.append(validated(make_batch([b"b"])), 2)
    plog.close()
    (plog.directory / CHECKPOINT_FILE).write_text("0\n3\n0 0\n2 1\n6 9\n")
    again = open_at(tmp_path, clock)
    assert again.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 1)]
    again.leader_epoch_cache.wait_for_writes()  # the trimmed file is written in the background
    assert (plog.directory / CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n2 1\n"


def test_a_truncation_whose_epoch_write_was_lost_in_a_crash_loads_right(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A truncation's leader-epoch-checkpoint write happens in the background: a SIGKILL
    before it leaves the old entries in the file, and the load trims them against the log;
    a new epoch's entry, written at once before its data, survives."""
    from tests.storage.test_leader_epoch_cache import BackgroundHeld

    plog = open_at(tmp_path, clock)
    for epoch in (0, 0, 2, 2, 5, 5):
        plog.append(validated(make_batch([b"v"])), epoch)
    assert [e.epoch for e in plog.leader_epoch_cache.entries] == [0, 2, 5]
    with BackgroundHeld():
        plog.truncate_to(3)  # drops epoch 5's entry; its write waits
        plog.close(flush=False)  # as a SIGKILL leaves it: the queued write never happens
        assert "5 4" in (plog.directory / CHECKPOINT_FILE).read_text()
    again = open_at(tmp_path, clock, clean=False)
    assert again.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(2, 2)]
    with BackgroundHeld():
        again.truncate_to(2)
        again.append(validated(make_batch([b"w"])), 7)  # epoch 7 from 2: written at once
        again.close(flush=False)
    third = open_at(tmp_path, clock, clean=False)
    assert third.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(7, 2)]
    third.close()


def test_a_gap_beyond_the_index_range_of_an_empty_segment(
    tmp_path: Path, clock: ManualClock
) -> None:
    follower = open_at(tmp_path, clock)
    far = 3 * 2**31
    batch = bytearray(make_batch([b"a", b"b"]))
    batch[0:8] = far.to_bytes(8, "big")
    follower.append(bytes(batch), origin=AppendOrigin.REPLICATION)
    assert [s.base_offset for s in follower.segments] == [far]
    assert follower.log_end_offset == far + 2
    assert bytes(follower.read(far, 1 << 20).records) == bytes(batch)
