"""Property: a coordinator loading `__consumer_offsets` the fast way ends where a full replay does.

`GroupRuntime._load` replays `read_entries(plog, decode_entries, to_log_end=...)`: the log as
a cleaning would leave it (`storage/latest.py`: a record superseded by a later one of its key
below the last stable offset is skipped, aborted data too). Random workloads on one offsets
partition (plain commits and offset tombstones, transactional offset commits of three
producers over several partitions and two groups with the same keys reused, COMMIT/ABORT
markers, some with a bumped producer epoch, some for a producer with nothing open,
transactions left open, group records, group deletions, rolls, cleanings, restarts) are
checked against two references that read nothing the fast way:

- the live coordinator, fed each record and marker as it is written (what the leader served);
- a replay of every batch stored in the log, in order (`replay_all`).

Both loads (`to_log_end` True and False; the C passes and `read_latest_python`, with small
read chunks) must give the same committed offsets, pending transactional offsets
(`unstable_partitions`) and group metadata, on:

1. the leader's log;
2. a follower that fetched it in pieces (appends of origin REPLICATION), restarting on the way, and
   then became the leader;
3. a follower that held a diverged suffix of an old leader, truncated to the common prefix
   and fetched the new leader's history.

Three cases are pinned by examples at the end: a deleted group's pending transactional
offsets (DeleteGroups writes their tombstones too), the members of an Empty group after a
replay, and a load to a high watermark below a COMMIT marker, which keeps the transaction
pending (its marker is not replicated yet). The follower of (3) comes back within
delete.retention.ms (one that stays away longer misses markers, as in Kafka).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from oncelog.broker import internal_topics
from oncelog.broker.internal_topics import read_entries
from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.coordinator.group import GroupCoordinator, GroupSettings, GroupState
from oncelog.coordinator.group.records import (
    GroupKey,
    GroupRecord,
    GroupValue,
    LogEntry,
    MemberValue,
    OffsetKey,
    OffsetValue,
    TxnEnd,
    decode_entries,
    encode_batch,
)
from oncelog.fileio import FileRegion
from oncelog.protocol.records.batch import iter_batches, span_batches
from oncelog.storage.cleaner import CleanerSettings, LogCleaner
from oncelog.storage.latest import read_latest, read_latest_python
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.validator import validate_produce_records
from oncelog.types import TopicPartition
from tests.storage.util import T0

OFFSETS_TP = TopicPartition("__consumer_offsets", 0)
SETTINGS = GroupSettings(partitions=1)
GROUPS = ("g1", "g2")
SOURCE = tuple(TopicPartition("src", i) for i in range(3))
PIDS = (1000, 1001, 1002)
DELETE_RETENTION_MS = 500

group_ids = st.sampled_from(GROUPS)
pids = st.sampled_from(PIDS)
commit_offsets = st.dictionaries(
    st.sampled_from(SOURCE), st.integers(0, 99), min_size=1, max_size=3
)
plain_offsets = st.dictionaries(
    st.sampled_from(SOURCE),
    st.one_of(st.integers(0, 99), st.none()),  # None: an offset tombstone
    min_size=1,
    max_size=3,
)


# (Each op strategy is built once per use: one_of weighs distinct strategies, not repeats.)
def txn_op() -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(st.just("txn"), pids, group_ids, commit_offsets)


def marker_op() -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(st.just("marker"), pids, st.booleans(), st.booleans())


def plain_op() -> st.SearchStrategy[tuple[Any, ...]]:
    return st.tuples(st.just("plain"), group_ids, plain_offsets)


group_op = st.tuples(st.just("group"), group_ids, st.integers(0, 2))
# The ops a diverging old leader writes above its high watermark (never cleaned, no restart).
suffix_ops = st.one_of(
    txn_op(), txn_op(), marker_op(), marker_op(), plain_op(), group_op, st.just(("roll",))
)


def leader_ops(clean_ms: list[int]) -> st.SearchStrategy[tuple[Any, ...]]:
    """What a leader writes, with cleanings after `clean_ms` (sampled) of time."""
    return st.one_of(
        txn_op(),
        txn_op(),
        txn_op(),
        marker_op(),
        marker_op(),
        marker_op(),
        plain_op(),
        plain_op(),
        group_op,
        st.tuples(st.just("delete"), group_ids),
        st.just(("roll",)),
        st.tuples(st.just("clean"), st.sampled_from(clean_ms), st.booleans()),
    )


ops = st.one_of(
    leader_ops([0, 100, DELETE_RETENTION_MS + 1]),
    st.tuples(st.just("restart"), st.sampled_from(["clean", "kill", "kill-after-snapshots"])),
)
"""("txn", pid, group, offsets): a TxnOffsetCommit; ("marker", pid, commit, bump epoch);
("plain", group, offsets or tombstones); ("group", group, members): a GroupValue (0 members:
Empty); ("delete", group): DeleteGroups (the coordinator refuses a group that is not
Empty); ("clean", ms, roll first); ("restart", how)."""


def log_config(segment_bytes: int) -> LogConfig:
    return LogConfig(
        segment_bytes=segment_bytes,
        cleanup_policy=("compact",),
        retention_ms=-1,
        min_cleanable_dirty_ratio=0.0,
        delete_retention_ms=DELETE_RETENTION_MS,
        index_interval_bytes=120,
    )


segment_sizes = st.sampled_from([250, 400, 800, 1 << 20])
read_chunks = st.sampled_from([80, 300, 1 << 20])


# -- what a coordinator serves ------------------------------------------------------------------

State = dict[str, tuple[Any, ...]]


def served(coordinator: GroupCoordinator) -> State:
    """Per group: committed offsets, pending transactional offsets (per producer) and the
    partitions they make unstable, and the group's metadata. Groups with none of these (a
    group whose offsets were all tombstoned) are left out: a replay that skipped the
    superseded records never creates them, and nothing served tells them apart."""
    out: State = {}
    for group_id, group in coordinator.groups.items():
        pending = {
            pid: {tp: value for tp, (value, _) in offsets.items()}
            for pid, offsets in group.pending_txn_offsets.items()
            if offsets
        }
        meta = (
            group.generation,
            group.protocol_type,
            group.protocol_name,
            group.leader_id,
            group.state.value,
            tuple(sorted((m.member_id, m.assignment) for m in group.members.values())),
        )
        unstable = coordinator.unstable_partitions(group_id)
        if group.offsets or pending or meta != (0, None, None, None, GroupState.EMPTY.value, ()):
            out[group_id] = (dict(group.offsets), pending, unstable, meta)
    return out


def apply_entry(coordinator: GroupCoordinator, entry: LogEntry) -> None:
    """What `GroupRuntime._load` does with one entry."""
    if isinstance(entry, TxnEnd):
        coordinator.complete_txn_offsets(entry.producer_id, OFFSETS_TP.partition, entry.commit)
    else:
        coordinator.replay(entry)


def new_coordinator() -> GroupCoordinator:
    return GroupCoordinator(SETTINGS, ManualClock(T0), new_member_id=lambda p: p)


def stored(plog: PartitionLog, start: int | None = None, end: int | None = None) -> bytes:
    """Every stored batch from `start` (the log start) below `end` (the log end)."""
    out = bytearray()
    offset = plog.log_start_offset if start is None else start
    end = plog.log_end_offset if end is None else end
    while offset < end:
        records = plog.read(offset, 1 << 20, end, for_follower=True).records
        data = records.read() if isinstance(records, FileRegion) else bytes(records)
        _, next_offset = span_batches(data)
        if next_offset < 0:
            break
        out += data
        offset = next_offset
    return bytes(out)


def replay_all(plog: PartitionLog, end: int | None = None) -> State:
    """The reference: every batch of the log, decoded and replayed in order."""
    coordinator = new_coordinator()
    entries, _ = decode_entries(stored(plog, end=end))
    for entry in entries:
        apply_entry(coordinator, entry)
    return served(coordinator)


def load(plog: PartitionLog, *, to_log_end: bool, chunk: int) -> State:
    """`GroupRuntime._load` on a fresh coordinator, reading `chunk` bytes at a time."""
    coordinator = new_coordinator()
    with patch.object(internal_topics, "READ_CHUNK", chunk):
        for entry in read_entries(plog, decode_entries, to_log_end=to_log_end):
            apply_entry(coordinator, entry)
    return served(coordinator)


def load_python(plog: PartitionLog, *, to_log_end: bool, chunk: int) -> State:
    """The same from `read_latest_python`, the reference of the C passes."""
    coordinator = new_coordinator()
    for data in read_latest_python(plog, chunk, to_log_end=to_log_end):
        entries, next_offset = decode_entries(data)
        assert next_offset >= 0
        for entry in entries:
            apply_entry(coordinator, entry)
    return served(coordinator)


def check_loads(plog: PartitionLog, expected: State, chunk: int, *, both: bool = True) -> None:
    assert replay_all(plog) == expected
    for to_log_end in (True, False) if both else (True,):
        assert b"".join(read_latest(plog, chunk, to_log_end=to_log_end)) == b"".join(
            read_latest_python(plog, chunk, to_log_end=to_log_end)
        )
        assert load(plog, to_log_end=to_log_end, chunk=chunk) == expected, to_log_end
        assert load_python(plog, to_log_end=to_log_end, chunk=chunk) == expected, to_log_end


# -- the writer: a leader's group runtime and transaction marker writer ---------------------------


@dataclass
class Writer:
    """Writes ops to an offsets partition log as the leader does (`GroupRuntime._persist`:
    one batch per producer, origin COORDINATOR; markers as `EndTxnMarker`s), and feeds a live
    coordinator as the runtime does."""

    root: Path
    config: LogConfig
    clock: ManualClock
    plog: PartitionLog = field(init=False)
    live: GroupCoordinator = field(default_factory=new_coordinator)
    epochs: dict[int, int] = field(default_factory=lambda: dict.fromkeys(PIDS, 0))
    generations: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    cleaner: LogCleaner = field(init=False)

    def __post_init__(self) -> None:
        self.plog = self._open(clean=True)
        self.cleaner = LogCleaner(CleanerSettings(), self.clock)

    def _open(self, *, clean: bool) -> PartitionLog:
        return PartitionLog.load(
            self.root / str(OFFSETS_TP), OFFSETS_TP, self.config, self.clock, clean=clean
        )

    def close(self) -> None:
        self.plog.close(flush=False)

    def apply(self, op: tuple[Any, ...], leader_epoch: int = 0) -> None:
        kind = op[0]
        now = self.clock.wall_ms()
        if kind == "plain":
            _, group_id, offsets = op
            records = [
                GroupRecord(
                    OffsetKey(group_id, tp.topic, tp.partition),
                    None if o is None else OffsetValue(o, commit_timestamp=now),
                )
                for tp, o in offsets.items()
            ]
            self._persist(records, -1, -1, leader_epoch)
        elif kind == "txn":
            _, pid, group_id, offsets = op
            epoch = self.epochs[pid]
            records = [
                GroupRecord(
                    OffsetKey(group_id, tp.topic, tp.partition),
                    OffsetValue(o, commit_timestamp=now),
                    pid,
                    epoch,
                )
                for tp, o in offsets.items()
            ]
            self._persist(records, pid, epoch, leader_epoch)
        elif kind == "marker":
            _, pid, commit, bump = op
            if bump:  # a timeout abort or a fenced producer's abort; KIP-890 bumps on every end
                self.epochs[pid] += 1
            self.plog.append(
                EndTxnMarker(pid, self.epochs[pid], 0, commit),
                leader_epoch,
                AppendOrigin.COORDINATOR,
            )
            self.live.complete_txn_offsets(pid, OFFSETS_TP.partition, commit)
        elif kind == "group":
            _, group_id, n = op
            self.generations[group_id] += 1
            members = tuple(
                MemberValue(f"{group_id}-m{i}", None, "c", "/h", 30_000, 10_000, b"s", b"a%d" % i)
                for i in range(n)
            )
            value = GroupValue(
                "consumer",
                self.generations[group_id],
                "range" if n else None,
                members[0].member_id if n else None,
                now,
                members,
            )
            self._persist([GroupRecord(GroupKey(group_id), value)], -1, -1, leader_epoch)
        elif kind == "delete":
            records = self.live.delete_groups([op[1]]).records
            if records:
                self._persist(records, -1, -1, leader_epoch)
        elif kind == "roll":
            self.plog.roll()
        elif kind == "clean":
            _, ms, roll = op
            self.clock.advance(ms)
            if roll:
                self.plog.roll()
            self.cleaner.clean_now(self.plog)
        elif kind == "restart":
            self.restart(op[1])

    def restart(self, how: str) -> None:
        checkpoint = self.plog.cleaner_checkpoint
        if how == "kill-after-snapshots":
            self.plog.flush_rolled()
        self.plog.close(flush=how == "clean")
        self.plog = self._open(clean=how == "clean")
        self.plog.cleaner_checkpoint = checkpoint

    def _persist(self, records: list[GroupRecord], pid: int, epoch: int, leader_epoch: int) -> None:
        data = encode_batch(records, self.clock.wall_ms(), pid, epoch)
        validated = validate_produce_records(data, 1 << 30, client=False)
        self.plog.append(validated, leader_epoch, origin=AppendOrigin.COORDINATOR)
        for record in records:
            self.live.replay(record)


@contextmanager
def scratch() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="coord-load-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def open_follower(root: Path, config: LogConfig, *, clean: bool = True) -> PartitionLog:
    return PartitionLog.load(
        root / str(OFFSETS_TP), OFFSETS_TP, config, ManualClock(T0), clean=clean, replicated=True
    )


def fetch_into(
    replica: PartitionLog,
    data: bytes,
    pieces: list[int],
    restarts: list[str],
    root: Path,
    config: LogConfig,
) -> PartitionLog:
    """Append `data` (whole batches) to `replica` as replica fetches do: `pieces[i]` batches
    at a time (cycled), restarting after fetch i as `restarts[i]` says."""
    ends = [pos + header.size for pos, header in iter_batches(data)]
    pos, i = 0, 0
    while pos < len(data):
        count = pieces[i % len(pieces)] if pieces else len(ends)
        later = [e for e in ends if e > pos]
        end = later[min(count, len(later)) - 1]
        replica.append(data[pos:end], origin=AppendOrigin.REPLICATION)
        pos = end
        how = restarts[i] if i < len(restarts) else "none"
        if how != "none":
            if how == "kill-after-snapshots":
                replica.flush_rolled()
            replica.close(flush=how == "clean")
            replica = open_follower(root, config, clean=how == "clean")
        i += 1
    return replica


restart_choices = st.lists(
    st.sampled_from(["none", "none", "clean", "kill", "kill-after-snapshots"]), max_size=6
)
fetch_pieces = st.lists(st.integers(1, 4), min_size=1, max_size=5)


def describe(plog: PartitionLog) -> None:
    kinds = set()
    for _, header in iter_batches(stored(plog)):
        if header.is_control:
            kinds.add("marker")
        elif header.is_transactional:
            kinds.add("txn")
    event(f"log has {len(plog.segments)} segment(s); {sorted(kinds)}")
    if plog.producer_state.first_unstable_offset() is not None:
        event("a transaction is open at the end")


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    workload=st.lists(ops, min_size=3, max_size=40),
    segment_bytes=segment_sizes,
    chunk=read_chunks,
    pieces=fetch_pieces,
    restarts=restart_choices,
)
# A committed offset, then a transaction that rewrites it and is still open: the committed
# record must not count as superseded (the last stable offset bounds the shortcut).
@example(
    workload=[
        ("plain", "g1", {SOURCE[0]: 5}),
        ("txn", PIDS[0], "g1", {SOURCE[0]: 6}),
        ("roll",),
    ],
    segment_bytes=1 << 20,
    chunk=1 << 20,
    pieces=[1],
    restarts=["kill"],
)
def test_leader_and_follower_loads_equal_a_full_replay(
    workload: list[tuple[Any, ...]],
    segment_bytes: int,
    chunk: int,
    pieces: list[int],
    restarts: list[str],
) -> None:
    config = log_config(segment_bytes)
    with scratch() as root:
        writer = Writer(root / "leader", config, ManualClock(T0))
        try:
            for op in workload:
                writer.apply(op)
            expected = served(writer.live)
            describe(writer.plog)
            # 1. the leader's own log (a single node loads to the high watermark, here the
            # log end; a cluster to the log end)
            check_loads(writer.plog, expected, chunk)
            # 2. a follower fetched it in pieces and became the leader
            replica = open_follower(root / "follower", config)
            replica = fetch_into(
                replica, stored(writer.plog), pieces, restarts, root / "follower", config
            )
            try:
                assert replica.log_end_offset == writer.plog.log_end_offset
                check_loads(replica, expected, chunk, both=False)
                replica.update_high_watermark(replica.log_end_offset)
                check_loads(replica, expected, chunk)
            finally:
                replica.close(flush=False)
        finally:
            writer.close()


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    common=st.lists(leader_ops([0, 100, DELETE_RETENTION_MS + 1]), max_size=25),
    ours=st.lists(suffix_ops, min_size=1, max_size=12),
    # The follower is back within delete.retention.ms: a follower away longer misses the
    # markers the new leader's cleaner removed meanwhile and keeps its copy of their
    # transactions open (as in Kafka: the retention bounds how far a reader may lag).
    theirs=st.lists(leader_ops([0]), max_size=20),
    segment_bytes=segment_sizes,
    chunk=read_chunks,
    had=st.integers(0, 50),
    pieces=fetch_pieces,
    restarts=st.tuples(*[st.sampled_from(["none", "clean", "kill"])] * 2),
)
# The old leader aborted a transaction open across the common prefix; the new leader
# commits it. The follower's `.txnindex` must lose the abort with the truncated marker.
@example(
    common=[("txn", PIDS[0], "g1", {SOURCE[0]: 0})],
    ours=[("txn", PIDS[0], "g1", {SOURCE[0]: 1}), ("marker", PIDS[0], False, False)],
    theirs=[("marker", PIDS[0], True, False)],
    segment_bytes=400,
    chunk=80,
    had=3,
    pieces=[1],
    restarts=("none", "none"),
)
def test_a_truncated_follower_loads_the_new_leaders_state(
    common: list[tuple[Any, ...]],
    ours: list[tuple[Any, ...]],
    theirs: list[tuple[Any, ...]],
    segment_bytes: int,
    chunk: int,
    had: int,
    pieces: list[int],
    restarts: tuple[str, str],
) -> None:
    config = log_config(segment_bytes)
    with scratch() as root:
        old = Writer(root / "old", config, ManualClock(T0))
        new = Writer(root / "new", config, ManualClock(T0))
        try:
            for op in common:
                old.apply(op)
                new.apply(op)
            prefix_end = old.plog.log_end_offset
            assert prefix_end == new.plog.log_end_offset
            for op in ours:
                old.apply(op, leader_epoch=1)
            for op in theirs:
                new.apply(op, leader_epoch=2)
            expected = served(new.live)
            follower_root = root / "follower"
            replica = open_follower(follower_root, config)
            # the follower had the old leader's log up to some batch past the common prefix
            diverged = stored(old.plog)
            ends = [0] + [pos + h.size for pos, h in iter_batches(diverged)]
            cut = ends[min(had, len(ends) - 1)]
            replica = fetch_into(
                replica, diverged[:cut], [1 << 30], [restarts[0]], follower_root, config
            )
            replica.truncate_to(min(prefix_end, replica.log_end_offset))
            if restarts[1] != "none":
                replica.close(flush=restarts[1] == "clean")
                replica = open_follower(follower_root, config, clean=restarts[1] == "clean")
            try:
                replica = fetch_into(
                    replica,
                    stored(new.plog, max(replica.log_end_offset, new.plog.log_start_offset)),
                    pieces,
                    [],
                    follower_root,
                    config,
                )
                assert replica.log_end_offset == new.plog.log_end_offset
                check_loads(replica, expected, chunk, both=False)
            finally:
                replica.close(flush=False)
        finally:
            old.close()
            new.close()


# -- cases the property found ---------------------------------------------------------------------


@pytest.mark.parametrize("then", ["group record", "cleaning"])
def test_a_deleted_groups_pending_offsets_stay_deleted(then: str) -> None:
    with scratch() as root:
        writer = Writer(root, log_config(1 << 20), ManualClock(T0))
        try:
            writer.apply(("txn", PIDS[0], "g1", {SOURCE[0]: 5}))
            writer.apply(("delete", "g1"))  # Empty: only pending offsets
            writer.apply(("marker", PIDS[0], True, False))
            if then == "group record":
                writer.apply(("group", "g1", 0))
            else:
                for _ in range(3):
                    writer.apply(("clean", DELETE_RETENTION_MS + 1, True))
            expected = served(writer.live)
            assert all(not v[0] for v in expected.values())
            assert load(writer.plog, to_log_end=True, chunk=1 << 20) == expected
        finally:
            writer.close()


def test_an_empty_group_record_replayed_after_a_stable_one_leaves_no_members() -> None:
    coordinator = new_coordinator()
    member = MemberValue("m", None, "c", "/h", 30_000, 10_000, b"s", b"a")
    for members in ((member,), ()):
        value = GroupValue("consumer", 1 + len(coordinator.groups), None, None, T0, members)
        coordinator.replay(GroupRecord(GroupKey("g1"), value))
    assert coordinator.groups["g1"].in_state(GroupState.EMPTY)
    assert not coordinator.groups["g1"].members


def test_a_load_to_a_high_watermark_below_a_commit_marker_keeps_the_committed_offset() -> None:
    with scratch() as root:
        writer = Writer(root, log_config(1 << 20), ManualClock(T0))
        try:
            writer.plog.enable_replication()
            writer.apply(("plain", "g1", {SOURCE[0]: 1}))
            writer.apply(("txn", PIDS[0], "g1", {SOURCE[0]: 2}))
            hw = writer.plog.log_end_offset
            writer.apply(("marker", PIDS[0], True, False))
            writer.plog.set_high_watermark(hw)
            expected = replay_all(writer.plog, end=hw)
            assert expected["g1"][0] == {SOURCE[0]: OffsetValue(1, commit_timestamp=T0)}
            assert load(writer.plog, to_log_end=False, chunk=1 << 20) == expected
        finally:
            writer.close()
