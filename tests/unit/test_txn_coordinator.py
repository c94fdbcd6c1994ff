"""The transaction coordinator as a state machine, driven directly with a ManualClock.

Records a TxnResult returns are replayed right away, as the broker does after appending
them; `complete` stands for "markers written" (the runtime's step 2 of the commit).
`replay rebuilds` feeds the whole record log, through the `__transaction_state` codec, to a
fresh coordinator and expects the same transactions.
"""

from __future__ import annotations

import itertools

import pytest

from oncelog.clock import ManualClock
from oncelog.coordinator.txn import TransactionCoordinator, TxnSettings, TxnState
from oncelog.coordinator.txn.coordinator import MAX_EPOCH, TxnRecord, TxnResult
from oncelog.coordinator.txn.records import decode_batches, encode_batch
from oncelog.coordinator.txn.state import IllegalTxnTransition, check_transition
from oncelog.errors import ErrorCode as E
from oncelog.types import TopicPartition

T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)
TIMEOUT = 60_000


class Harness:
    def __init__(self, expiration_ms: int = 604_800_000) -> None:
        self.clock = ManualClock()
        ids = itertools.count(1000)
        self.coordinator = TransactionCoordinator(
            TxnSettings(max_timeout_ms=900_000, id_expiration_ms=expiration_ms),
            self.clock,
            lambda: next(ids),
        )
        self.log: list[TxnRecord] = []

    def apply(self, records: list[TxnRecord]) -> None:
        for record in records:
            self.coordinator.replay(record)
        self.log += records

    def run(self, result: TxnResult, *, finish: bool = True) -> TxnResult:
        """Persist `result`; with `finish`, also write its markers and complete it."""
        self.apply(result.records)
        if finish and result.complete is not None:
            self.apply(self.coordinator.complete(result.complete))
        return result

    def init(self, txn_id: str = "tx", timeout: int = TIMEOUT) -> tuple[int, int]:
        result = self.run(self.coordinator.init_producer_id(txn_id, timeout))
        assert result.error is E.none
        return result.producer_id, result.producer_epoch

    def state(self, txn_id: str = "tx") -> TxnState:
        return self.coordinator.transactions[txn_id].state


def test_transition_table_refuses_illegal_moves() -> None:
    check_transition(TxnState.ONGOING, TxnState.PREPARE_COMMIT)
    for current, target in [
        (TxnState.EMPTY, TxnState.PREPARE_COMMIT),
        (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_ABORT),
        (TxnState.PREPARE_ABORT, TxnState.ONGOING),
        (TxnState.DEAD, TxnState.EMPTY),
    ]:
        with pytest.raises(IllegalTxnTransition):
            check_transition(current, target)


def test_init_assigns_an_id_and_bumps_the_epoch_on_reinit() -> None:
    h = Harness()
    pid, epoch = h.init()
    assert (pid, epoch) == (1000, 0)
    assert h.init() == (pid, 1)
    assert h.state() is TxnState.EMPTY
    assert h.coordinator.transactional_id_of(pid) == "tx"


def test_invalid_timeout_is_refused() -> None:
    h = Harness()
    assert h.coordinator.init_producer_id("tx", 0).error is E.invalid_transaction_timeout
    assert h.coordinator.init_producer_id("tx", 900_001).error is E.invalid_transaction_timeout


def test_epoch_exhaustion_gives_a_new_producer_id() -> None:
    h = Harness()
    pid, _ = h.init()
    meta = h.coordinator.transactions["tx"]
    h.apply([("tx", meta.to(TxnState.EMPTY, 0, producer_epoch=MAX_EPOCH - 1))])
    new_pid, epoch = h.init()
    assert new_pid != pid and epoch == 0


def test_old_epoch_is_fenced_everywhere() -> None:
    h = Harness()
    pid, old = h.init()
    _, new = h.init()
    c = h.coordinator
    assert c.add_partitions("tx", pid, old, [T0]).error is E.producer_fenced
    assert c.end_txn("tx", pid, old, commit=True).error is E.producer_fenced
    assert c.verify_partition(pid, old, T0) is E.invalid_producer_epoch
    assert c.add_partitions("tx", pid, new, [T0]).error is E.none
    assert c.add_partitions("tx", 99, new, [T0]).error is E.invalid_producer_id_mapping
    # KIP-360: a client naming a stale id/epoch in InitProducerId is fenced too.
    assert c.init_producer_id("tx", TIMEOUT, pid, old).error is E.producer_fenced


def test_add_partitions_then_commit_writes_markers_and_completes() -> None:
    h = Harness()
    pid, epoch = h.init()
    c = h.coordinator
    h.run(c.add_partitions("tx", pid, epoch, [T0]))
    h.run(c.add_partitions("tx", pid, epoch, [T1]))
    assert c.add_partitions("tx", pid, epoch, [T0]).records == []  # already in
    assert h.state() is TxnState.ONGOING
    assert c.verify_partition(pid, epoch, T0) is E.none
    assert c.verify_partition(pid, epoch, TopicPartition("other", 0)) is E.invalid_txn_state
    result = h.run(c.end_txn("tx", pid, epoch, commit=True), finish=False)
    assert result.complete == "tx" and h.state() is TxnState.PREPARE_COMMIT
    markers = c.markers("tx")
    assert [(m.tp, m.commit, m.producer_epoch) for m in markers] == [
        (T0, True, epoch),
        (T1, True, epoch),
    ]
    assert c.pending() == ["tx"]
    h.apply(c.complete("tx"))
    assert h.state() is TxnState.COMPLETE_COMMIT and not c.pending()
    assert c.verify_partition(pid, epoch, T0) is E.invalid_txn_state
    assert c.next_deadline_ms() is None


def test_end_txn_retries_and_wrong_decisions() -> None:
    h = Harness()
    pid, epoch = h.init()
    c = h.coordinator
    assert c.end_txn("tx", pid, epoch, commit=True).error is E.invalid_txn_state  # nothing open
    assert c.end_txn("tx", pid, epoch, commit=False).error is E.none  # aborting nothing
    h.run(c.add_partitions("tx", pid, epoch, [T0]))
    h.run(c.end_txn("tx", pid, epoch, commit=True), finish=False)
    # While the markers are being written: a retry waits, the opposite decision is refused.
    assert c.end_txn("tx", pid, epoch, commit=True).error is E.concurrent_transactions
    assert c.end_txn("tx", pid, epoch, commit=False).error is E.invalid_txn_state
    assert c.add_partitions("tx", pid, epoch, [T1]).error is E.concurrent_transactions
    h.apply(c.complete("tx"))
    retry = c.end_txn("tx", pid, epoch, commit=True)
    assert retry.error is E.none and retry.records == []  # the retry of a completed commit
    assert c.end_txn("tx", pid, epoch, commit=False).error is E.invalid_txn_state


def test_concurrent_transactions_are_independent() -> None:
    h = Harness()
    c = h.coordinator
    a_pid, a_epoch = h.init("a")
    b_pid, b_epoch = h.init("b")
    assert a_pid != b_pid
    h.run(c.add_partitions("a", a_pid, a_epoch, [T0]))
    h.run(c.add_partitions("b", b_pid, b_epoch, [T0, T1]))
    h.run(c.end_txn("a", a_pid, a_epoch, commit=False))
    assert h.state("a") is TxnState.COMPLETE_ABORT
    assert h.state("b") is TxnState.ONGOING
    assert c.verify_partition(b_pid, b_epoch, T1) is E.none
    h.run(c.end_txn("b", b_pid, b_epoch, commit=True))
    assert h.state("b") is TxnState.COMPLETE_COMMIT


def test_reinit_aborts_the_open_transaction_with_a_bumped_epoch() -> None:
    h = Harness()
    pid, epoch = h.init()
    c = h.coordinator
    h.run(c.add_partitions("tx", pid, epoch, [T0]))
    result = h.run(c.init_producer_id("tx", TIMEOUT), finish=False)
    assert result.error is E.concurrent_transactions  # the client retries
    assert h.state() is TxnState.PREPARE_ABORT
    markers = c.markers("tx")
    assert [(m.tp, m.commit, m.producer_epoch) for m in markers] == [(T0, False, epoch + 1)]
    assert c.init_producer_id("tx", TIMEOUT).error is E.concurrent_transactions
    h.apply(c.complete("tx"))
    assert h.init() == (pid, epoch + 2)


def test_timeout_aborts_with_an_epoch_bump_and_the_late_commit_is_fenced() -> None:
    h = Harness()
    pid, epoch = h.init(timeout=5_000)
    c = h.coordinator
    h.run(c.add_partitions("tx", pid, epoch, [T0]))
    assert c.next_deadline_ms() == h.clock.wall_ms() + 5_000
    h.clock.advance(4_999)
    assert c.expire() == []
    h.clock.advance(1)
    (result,) = c.expire()
    h.run(result)
    meta = c.transactions["tx"]
    assert meta.state is TxnState.COMPLETE_ABORT and meta.producer_epoch == epoch + 1
    # A commit racing the abort is fenced, never a fatal state error.
    assert c.end_txn("tx", pid, epoch, commit=True).error is E.producer_fenced
    assert c.verify_partition(pid, epoch, T0) is E.invalid_producer_epoch


def test_idle_transactional_ids_expire() -> None:
    h = Harness(expiration_ms=10_000)
    pid, _ = h.init("idle")
    b_pid, b_epoch = h.init("busy")
    h.run(h.coordinator.add_partitions("busy", b_pid, b_epoch, [T0]))
    h.clock.advance(10_000)
    for result in h.coordinator.expire():
        if result.complete is None:  # the id expiry, not the busy one's timeout
            h.run(result)
    assert "idle" not in h.coordinator.transactions
    assert "busy" in h.coordinator.transactions
    assert h.coordinator.transactional_id_of(pid) is None
    # The id starts over with a fresh producer id.
    assert h.init("idle")[0] != pid


def test_replay_rebuilds_the_same_state() -> None:
    h = Harness()
    c = h.coordinator
    pid, epoch = h.init("a")
    h.run(c.add_partitions("a", pid, epoch, [T0, T1]))
    h.run(c.end_txn("a", pid, epoch, commit=True))
    h.run(c.add_partitions("a", pid, epoch, [T1]))
    b_pid, b_epoch = h.init("b")
    h.run(c.add_partitions("b", b_pid, b_epoch, [T0]))
    h.run(c.end_txn("b", b_pid, b_epoch, commit=False), finish=False)  # left prepared
    h.init("gone")
    h.apply([("gone", None)])
    records, _ = decode_batches(encode_batch(h.log, h.clock.wall_ms()))
    assert records == h.log
    fresh = TransactionCoordinator(TxnSettings(), h.clock, lambda: 1)
    for record in records:
        fresh.replay(record)
    assert fresh.transactions == c.transactions
    assert fresh.pending() == ["b"]  # the restart finishes it
    assert fresh.transactional_id_of(pid) == "a"
    assert fresh.verify_partition(pid, epoch, T1) is E.none
