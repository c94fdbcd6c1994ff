"""A coordinator that loads `__consumer_offsets` must end with the offsets the leader served.

What a new leader loads (`read_entries(..., to_log_end=True)`: the log as a cleaning would
leave it) went through replication, restarts, compaction and truncation; transactional offsets
of several producers interleave with commits, aborts (some with a bumped epoch, as a
coordinator's timeout abort) and plain commits. A committed offset the load misses is one a
consumer reads as "none" and starts over from (`auto.offset.reset`): an exactly-once copier
copies the partition again. Random workloads, each checked three ways:

1. the leader's own log, loaded after every operation (with cleanings between them);
2. a follower that fetched the leader's log in pieces and restarted on the way;
3. a follower that held another leader's diverging suffix, truncated to the common prefix
   (restarting before or after) and then fetched the new leader's history.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from oncelog.broker.group_runtime import OFFSETS_TOPIC
from oncelog.broker.internal_topics import read_entries
from oncelog.clock import ManualClock
from oncelog.coordinator.group import GroupCoordinator, GroupSettings
from oncelog.coordinator.group.records import OffsetValue, TxnEnd, decode_entries
from oncelog.coordinator.txn import Marker
from oncelog.protocol.records.batch import iter_batches, span_batches
from oncelog.storage.cleaner import CleanerSettings, LogCleaner
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from oncelog.storage.partition_log import PartitionLog
from oncelog.types import TopicPartition
from tests.unit.metrics_broker import Broker

G = "copier"
OFFSETS = TopicPartition(OFFSETS_TOPIC, 0)
SOURCE = [TopicPartition("src", i) for i in range(3)]
PIDS = (1000, 1001, 1002)
State = tuple[dict[TopicPartition, int], set[TopicPartition]]


def served(coordinator: GroupCoordinator) -> State:
    """The committed offsets and the partitions with pending ones (UNSTABLE_OFFSET_COMMIT)."""
    offsets = coordinator.fetch_offsets(G, None)
    committed = {tp: v.offset for tp, v in offsets.items() if v is not None}
    return committed, coordinator.unstable_partitions(G)


def loaded(plog: PartitionLog) -> State:
    """What a coordinator that became the leader of `plog` serves (GroupRuntime._load)."""
    coordinator = GroupCoordinator(GroupSettings(partitions=1), ManualClock())
    for entry in read_entries(plog, decode_entries, to_log_end=True):
        if isinstance(entry, TxnEnd):
            coordinator.complete_txn_offsets(entry.producer_id, 0, entry.commit)
        else:
            coordinator.replay(entry)
    return served(coordinator)


def stored(plog: PartitionLog, start: int | None = None) -> bytes:
    """Every batch from `start` (the log start) to the log end, as a follower fetches it."""
    out = bytearray()
    offset = plog.log_start_offset if start is None else start
    while offset < plog.log_end_offset:
        records: Any = plog.read(offset, 1 << 20, plog.log_end_offset, for_follower=True).records
        data = bytes(records.read() if hasattr(records, "read") else records)
        _, offset = span_batches(data)
        assert offset > 0
        out += data
    return bytes(out)


def leader(root: Path, rnd: random.Random) -> Broker:
    segment = rnd.choice([200, 300, 600, 4000])
    broker = Broker(
        root,
        **{"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": str(segment)},
    )
    broker.create_topic("src", 3)
    broker.replicas.producer_ids.ensure_above(max(PIDS) + 1)
    return broker


def operations(rnd: random.Random, n: int) -> list[tuple[Any, ...]]:
    ops: list[tuple[Any, ...]] = []
    for _ in range(n):
        pid, r = rnd.choice(PIDS), rnd.random()
        if r < 0.45:
            tps = rnd.sample(SOURCE, rnd.randint(1, 3))
            ops.append(("txn", pid, {tp: rnd.randint(0, 1000) for tp in tps}))
        elif r < 0.8:
            ops.append(("marker", pid, rnd.random() < 0.6, rnd.random() < 0.2))
        elif r < 0.88:
            ops.append(("plain", {rnd.choice(SOURCE): rnd.randint(0, 1000)}))
        else:
            ops.append(("clean", rnd.choice([1000, 70_000, 2 * 86_400_000]), rnd.random() < 0.5))
    return ops


class Writer:
    """Drives the leader's group runtime as the handlers and the marker writer do."""

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.runtime = broker.groups
        self.plog = broker.replicas.partition(OFFSETS)
        self.cleaner = LogCleaner(CleanerSettings(), broker.clock)
        self.epochs = dict.fromkeys(PIDS, 0)
        self.open: set[int] = set()

    def apply(self, op: tuple[Any, ...], leader_epoch: int = 0) -> None:
        coordinator = self.runtime.coordinator
        if op[0] == "txn":
            pid, offsets = op[1], {tp: OffsetValue(o) for tp, o in op[2].items()}
            result = coordinator.commit_txn_offsets(G, pid, self.epochs[pid], -1, "", None, offsets)
            self.runtime.complete(result)
            self.open.add(pid)
        elif op[0] == "marker" and op[1] in self.open:
            pid, commit, bump = op[1:]
            if bump and not commit:
                self.epochs[pid] += 1
            self.plog.append(
                EndTxnMarker(pid, self.epochs[pid], 0, commit),
                leader_epoch,
                AppendOrigin.COORDINATOR,
            )
            self.runtime.on_marker(Marker(OFFSETS, pid, self.epochs[pid], commit, 0))
            self.open.discard(pid)
        elif op[0] == "plain":
            offsets = {tp: OffsetValue(o) for tp, o in op[1].items()}
            self.runtime.complete(coordinator.commit_offsets(G, -1, "", None, offsets))
        elif op[0] == "clean":
            self.broker.clock.advance(op[1])
            if op[2]:
                self.plog.roll()
            self.cleaner.clean_now(self.plog)

    def served(self) -> State:
        return served(self.runtime.coordinator)


def follower(root: Path, plog: PartitionLog, *, clean: bool = True) -> PartitionLog:
    return PartitionLog.load(
        root / str(OFFSETS), OFFSETS, plog.config, ManualClock(), clean=clean, replicated=True
    )


def restart(root: Path, plog: PartitionLog, rnd: random.Random) -> PartitionLog:
    """Stopped cleanly or killed, then loaded again."""
    clean = rnd.random() < 0.5
    plog.close(flush=clean)
    return follower(root, plog, clean=clean)


@pytest.mark.parametrize("seed", range(20))
def test_a_new_leader_loads_the_offsets_the_old_one_served(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    broker = leader(tmp_path / "leader", rnd)
    try:
        writer = Writer(broker)
        for op in operations(rnd, rnd.randint(5, 50)):
            writer.apply(op)
            assert loaded(writer.plog) == writer.served(), op
        data = stored(writer.plog)
        ends = [pos + header.size for pos, header in iter_batches(data)]
        replica = follower(tmp_path / "follower", writer.plog)
        pos = 0
        while pos < len(data):
            end = rnd.choice([e for e in ends if e > pos][:4])
            replica.append(data[pos:end], origin=AppendOrigin.REPLICATION)
            pos = end
            if rnd.random() < 0.2:
                replica = restart(tmp_path / "follower", replica, rnd)
        assert loaded(replica) == writer.served()
        replica.close()
    finally:
        broker.close()


@pytest.mark.parametrize("seed", range(20))
def test_a_follower_that_diverged_loads_the_new_leaders_offsets(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    # The old leader's suffix is above its high watermark (the new leader never had it), so
    # its cleaner never used it (nor anything it shares with the new leader's log).
    common = [op for op in operations(rnd, rnd.randint(0, 25)) if op[0] != "clean"]
    ours = [op for op in operations(rnd, rnd.randint(1, 15)) if op[0] != "clean"]
    theirs = operations(rnd, rnd.randint(0, 20))
    brokers = [leader(tmp_path / "old", random.Random(seed)), leader(tmp_path / "new", rnd)]
    try:
        old, new = (Writer(b) for b in brokers)
        for op in common:
            old.apply(op)
            new.apply(op)
        prefix_end = old.plog.log_end_offset
        for op in ours:
            old.apply(op, leader_epoch=1)
        for op in theirs:
            new.apply(op, leader_epoch=2)
        root = tmp_path / "follower"
        replica = follower(root, old.plog)
        diverged = stored(old.plog)
        ends = [0] + [pos + header.size for pos, header in iter_batches(diverged)]
        replica.append(diverged[: rnd.choice(ends)], origin=AppendOrigin.REPLICATION)
        if rnd.random() < 0.3:
            replica = restart(root, replica, rnd)
        replica.truncate_to(min(prefix_end, replica.log_end_offset))
        if rnd.random() < 0.3:
            replica = restart(root, replica, rnd)
        replica.append(stored(new.plog, replica.log_end_offset), origin=AppendOrigin.REPLICATION)
        assert loaded(replica) == new.served()
        replica.close()
    finally:
        for b in brokers:
            b.close()
