"""Transaction states and the transitions allowed between them (Kafka's TransactionState).

Empty --AddPartitions--> Ongoing --EndTxn--> PrepareCommit|PrepareAbort --markers written-->
CompleteCommit|CompleteAbort --AddPartitions--> Ongoing ...; PrepareEpochFence is the step a
new InitProducerId or a timeout takes to fence the current epoch before aborting; Dead is an
expired transactional id about to be removed.
"""

from __future__ import annotations

from enum import IntEnum


class TxnState(IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_ALLOWED: dict[TxnState, frozenset[TxnState]] = {
    TxnState.EMPTY: frozenset(
        {TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE}
    ),
    TxnState.ONGOING: frozenset(
        {
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
            TxnState.PREPARE_EPOCH_FENCE,
        }
    ),
    TxnState.PREPARE_COMMIT: frozenset({TxnState.COMPLETE_COMMIT}),
    TxnState.PREPARE_ABORT: frozenset({TxnState.COMPLETE_ABORT}),
    TxnState.COMPLETE_COMMIT: frozenset(
        {TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE}
    ),
    TxnState.COMPLETE_ABORT: frozenset(
        {TxnState.EMPTY, TxnState.ONGOING, TxnState.DEAD, TxnState.PREPARE_EPOCH_FENCE}
    ),
    TxnState.PREPARE_EPOCH_FENCE: frozenset({TxnState.PREPARE_ABORT}),
    TxnState.DEAD: frozenset(),
}


class IllegalTxnTransition(Exception):
    """A bug: the coordinator tried a transition Kafka's state machine does not allow."""


def check_transition(current: TxnState, target: TxnState) -> None:
    if target not in _ALLOWED[current]:
        raise IllegalTxnTransition(f"transaction state {current.name} -> {target.name}")
