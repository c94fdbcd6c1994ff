"""Model-based test of idempotence through the real partition log.

A reference model says, for every produce of an idempotent batch, whether the broker must
append it, answer it as a duplicate with its original offsets, or refuse it with a given
error. Hypothesis drives random sends, retries (inside and outside the five-batch window),
gaps, epoch bumps, stale epochs and broker restarts (clean and unclean, with and without
snapshots) against a PartitionLog on disk, and checks the answers and the log after each step.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.errors import InvalidProducerEpoch, OutOfOrderSequenceNumber
from oncelog.producer_state.snapshot import list_snapshots, snapshot_path
from oncelog.protocol.records.batch import build_batch, iter_batches
from oncelog.protocol.records.record import encode_record
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.validator import validate_produce_records
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)
T0 = 1_700_000_000_000
PIDS = (11, 12)


def idempotent_batch(pid: int, epoch: int, seq: int, count: int) -> bytes:
    body = b"".join(
        encode_record(offset_delta=i, key=None, value=f"{pid}/{epoch}/{seq + i}".encode())
        for i in range(count)
    )
    return build_batch(
        base_offset=0,
        records=body,
        record_count=count,
        last_offset_delta=count - 1,
        base_timestamp=T0,
        max_timestamp=T0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


@dataclass
class ProducerModel:
    epoch: int = 0
    next_seq: int = 0
    sent: list[tuple[int, int, int, int]] = field(default_factory=list)
    """(epoch, first seq, count, base offset) of every appended batch, in order."""


class IdempotenceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="oncelog-model-"))
        self.clock = ManualClock(wall_ms=T0)
        self.config = LogConfig(segment_bytes=600)  # small segments: rolls and snapshots
        self.log = PartitionLog.load(self.dir / "t-0", TP, self.config, self.clock, clean=True)
        self.model = {pid: ProducerModel() for pid in PIDS}
        self.next_offset = 0

    def teardown(self) -> None:
        self.log.close(flush=False)
        shutil.rmtree(self.dir, ignore_errors=True)

    def produce(self, pid: int, epoch: int, seq: int, count: int) -> tuple[int, bool]:
        info = self.log.append(
            validate_produce_records(idempotent_batch(pid, epoch, seq, count), 1 << 20), 0
        )
        return info.base_offset, info.duplicate

    @rule(pid=st.sampled_from(PIDS), count=st.integers(1, 3))
    def send_next(self, pid: int, count: int) -> None:
        m = self.model[pid]
        base, duplicate = self.produce(pid, m.epoch, m.next_seq, count)
        assert not duplicate and base == self.next_offset
        m.sent.append((m.epoch, m.next_seq, count, base))
        m.next_seq += count
        self.next_offset += count

    @precondition(lambda self: any(self.model[p].sent for p in PIDS))
    @rule(pid=st.sampled_from(PIDS), back=st.integers(1, 8))
    def retry(self, pid: int, back: int) -> None:
        m = self.model[pid]
        same_epoch = [s for s in m.sent if s[0] == m.epoch]
        if not same_epoch:
            return
        back = min(back, len(same_epoch))
        epoch, seq, count, base = same_epoch[-back]
        if back <= 5:
            got, duplicate = self.produce(pid, epoch, seq, count)
            assert duplicate and got == base
        else:
            try:
                self.produce(pid, epoch, seq, count)
            except OutOfOrderSequenceNumber:
                return
            raise AssertionError("a retry older than the window was appended")

    @rule(pid=st.sampled_from(PIDS), gap=st.integers(1, 5))
    def send_with_gap(self, pid: int, gap: int) -> None:
        m = self.model[pid]
        if not m.sent or m.sent[-1][0] != m.epoch:
            return  # the first batch of an epoch is where unknown producers may start
        try:
            self.produce(pid, m.epoch, m.next_seq + gap, 1)
        except OutOfOrderSequenceNumber:
            return
        raise AssertionError("a sequence gap was accepted")

    @rule(pid=st.sampled_from(PIDS))
    def bump_epoch(self, pid: int) -> None:
        m = self.model[pid]
        if m.sent:
            try:
                self.produce(pid, m.epoch + 1, 3, 1)
            except OutOfOrderSequenceNumber:
                pass
            else:
                raise AssertionError("a new epoch started at sequence 3")
        m.epoch += 1
        m.next_seq = 0

    @precondition(lambda self: any(self.model[p].epoch > 0 for p in PIDS))
    @rule(pid=st.sampled_from(PIDS))
    def zombie_epoch(self, pid: int) -> None:
        m = self.model[pid]
        if m.epoch == 0 or not any(s[0] == m.epoch for s in m.sent):
            return
        try:
            self.produce(pid, m.epoch - 1, 10_000, 1)
        except InvalidProducerEpoch:
            return
        raise AssertionError("a stale epoch was accepted")

    @rule(clean=st.booleans(), damage=st.sampled_from(["none", "delete", "corrupt"]))
    def restart(self, clean: bool, damage: str) -> None:
        self.log.close(flush=clean)
        snaps = list_snapshots(self.dir / "t-0")
        if snaps and damage == "delete":
            for offset in snaps:
                snapshot_path(self.dir / "t-0", offset).unlink()
        elif snaps and damage == "corrupt":
            path = snapshot_path(self.dir / "t-0", snaps[-1])
            data = bytearray(path.read_bytes())
            data[len(data) // 2] ^= 0x55
            path.write_bytes(bytes(data))
        self.log = PartitionLog.load(self.dir / "t-0", TP, self.config, self.clock, clean=clean)

    @invariant()
    def log_holds_each_batch_once_in_order(self) -> None:
        assert self.log.log_end_offset == self.next_offset
        seen = set()
        for segment in self.log.segments:
            data = segment.read(segment.base_offset, 1 << 30) if segment.size else b""
            for _, h in iter_batches(data):
                key = (h.producer_id, h.producer_epoch, h.base_sequence)
                assert key not in seen, f"batch {key} stored twice"
                seen.add(key)
        expected = {(pid, e, s) for pid in PIDS for e, s, _, _ in self.model[pid].sent}
        assert seen == expected


IdempotenceMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
test_idempotence_model = IdempotenceMachine.TestCase
