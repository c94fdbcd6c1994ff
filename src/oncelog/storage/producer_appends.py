"""Where a partition log's appends meet its producer state, besides the appends themselves:
the answer to a retry from the producers' cached batches (`find_duplicate`), an ABORT's entry
in `.txnindex` with the last stable offset it noted (`index_abort`), and the producer-state
replay of a follower's stored batches (`replay_appended`, as recovery's replay in
`log_loader`)."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from oncelog.errors import InvalidRecord
from oncelog.producer_state.append import CompletedTxn
from oncelog.producer_state.entry import BatchMetadata
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.protocol.records.batch import BatchHeader
from oncelog.storage.log_info import AppendInfo
from oncelog.storage.txn_index import AbortedTxn, TransactionIndex
from oncelog.storage.validator import ValidatedRecords
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)


def find_duplicate(
    records: ValidatedRecords,
    state: ProducerStateManager,
    tp: TopicPartition,
    log_start_offset: int,
) -> AppendInfo | None:
    """The answer to a retry, from the cached batches: every batch must be one.

    An answer is one offset range for the whole request, so a request that is only partly
    duplicates (or whose duplicates are not stored one after another) cannot be answered
    truthfully: it is refused whole rather than acknowledged with batches left unwritten.
    Client data is one batch (validator); this guards every other caller.
    """
    cached: list[BatchMetadata] = []
    for _, header in records.batches:
        found = state.find_duplicate(header) if header.has_producer_id else None
        if found is not None:
            cached.append(found)
    if not cached:
        return None
    first = records.batches[0][1]
    if len(cached) < len(records.batches) or any(
        b.first_offset != a.last_offset + 1 for a, b in itertools.pairwise(cached)
    ):
        raise InvalidRecord(
            f"{tp}: {len(cached)} of {len(records.batches)} batches are duplicates of "
            "batches not stored as one range; one answer cannot acknowledge them"
        )
    log.debug(
        "%s: duplicate batch of producer %d epoch %d seq %d (offset %d, %d batches)",
        tp,
        first.producer_id,
        first.producer_epoch,
        first.base_sequence,
        cached[0].first_offset,
        len(cached),
    )
    return AppendInfo(
        cached[0].first_offset, cached[-1].last_offset, -1, log_start_offset, duplicate=True
    )


def index_abort(
    index: TransactionIndex, state: ProducerStateManager, txn: CompletedTxn, closing: bool
) -> None:
    """Record an aborted transaction in `index` (the `.txnindex` of the segment holding its
    last offset) unless it is there; `closing`: its marker was just written and the producer
    state does not show the transaction closed yet."""
    if any(
        t.producer_id == txn.producer_id and t.last_offset == txn.last_offset for t in index.entries
    ):
        return
    if closing:
        ongoing = state.ongoing_transactions()
        ongoing.pop(txn.producer_id, None)
        first_unstable = min(ongoing.values(), default=None)
    else:
        first_unstable = state.first_unstable_offset()
    lso = txn.last_offset + 1 if first_unstable is None else first_unstable
    index.append(AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso))


def replay_appended(
    state: ProducerStateManager,
    headers: list[BatchHeader],
    markers: dict[int, tuple[bool, int]],
    index_abort: Callable[[CompletedTxn], None],
) -> None:
    """Producer state for batches a follower just stored, as recovery replays it; each ABORT
    is indexed as its marker is replayed, so its last stable offset is the one the leader
    noted (`markers`: the control batches' markers by offset)."""

    def read_marker(header: BatchHeader) -> tuple[bool, int]:
        return markers[header.base_offset]

    start = 0
    for k, header in enumerate(headers):
        if header.is_control and header.has_producer_id:
            for txn in state.replay(headers[start : k + 1], read_marker):
                if txn.aborted:
                    index_abort(txn)
            start = k + 1
    if start < len(headers):
        state.replay(headers[start:], read_marker)
