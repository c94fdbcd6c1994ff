"""The partition side of transactions: open transactions, markers, LSO, aborted index."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.errors import (
    InvalidProducerEpoch,
    InvalidTxnState,
    ProducerFenced,
    TransactionCoordinatorFenced,
)
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, build_batch, iter_batches
from oncelog.protocol.records.control import parse_marker
from oncelog.protocol.records.record import encode_record
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from oncelog.storage.partition_log import PartitionLog
from oncelog.storage.txn_index import AbortedTxn
from tests.storage.util import T0, append, open_log, validated


def txn_batch(pid: int, epoch: int, seq: int, count: int = 2, transactional: bool = True) -> bytes:
    body = b"".join(
        encode_record(offset_delta=i, key=None, value=f"{pid}:{seq + i}".encode())
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


def produce(plog: PartitionLog, pid: int, epoch: int, seq: int, **kw: object) -> int:
    return plog.append(validated(txn_batch(pid, epoch, seq, **kw)), 0).base_offset  # type: ignore[arg-type]


def committed_view(plog: PartitionLog, offset: int = 0) -> tuple[list[int], list[AbortedTxn]]:
    result = plog.read(offset, 1 << 20, read_committed=True)
    return [h.base_offset for _, h in iter_batches(result.records)], result.aborted or []


def test_open_transaction_holds_back_the_lso(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    append(plog, [b"plain"])  # offset 0
    assert produce(plog, 7, 0, 0) == 1  # offsets 1-2, transaction open from 1
    append(plog, [b"after"])  # offset 3
    assert plog.high_watermark == 4 and plog.last_stable_offset == 1
    assert committed_view(plog) == ([0], [])
    uncommitted = plog.read(0, 1 << 20)
    assert [h.base_offset for _, h in iter_batches(uncommitted.records)] == [0, 1, 3]
    assert uncommitted.aborted is None


def test_commit_releases_the_lso(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    produce(plog, 7, 0, 0)
    info = plog.append(EndTxnMarker(7, 0, 3, True), 0, AppendOrigin.COORDINATOR)
    assert info.base_offset == 2
    assert plog.last_stable_offset == plog.high_watermark == 3
    batches, aborted = committed_view(plog)
    assert batches == [0, 2] and aborted == []
    marker = plog.read(2, 1 << 20).records
    assert parse_marker(marker) == (True, 3)


def test_abort_is_indexed_and_returned_to_read_committed(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    produce(plog, 7, 0, 0)  # 0-1
    produce(plog, 8, 0, 0)  # 2-3
    assert plog.last_stable_offset == 0
    plog.append(EndTxnMarker(7, 0, 0, False), 0, AppendOrigin.COORDINATOR)  # 4
    assert plog.last_stable_offset == 2  # producer 8 still open
    plog.append(EndTxnMarker(8, 0, 0, True), 0, AppendOrigin.COORDINATOR)  # 5
    assert plog.last_stable_offset == 6
    batches, aborted = committed_view(plog)
    assert batches == [0, 2, 4, 5]
    assert aborted == [AbortedTxn(7, 0, 4, 2)]
    assert (tmp_path / "t-0" / f"{0:020d}.txnindex").stat().st_size == 34
    # a fetch that starts after the aborted range does not get it
    assert committed_view(plog, 5)[1] == []


def test_fencing_of_markers_and_writes(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    produce(plog, 7, 1, 0)
    with pytest.raises(ProducerFenced):
        plog.append(EndTxnMarker(7, 0, 0, True), 0, AppendOrigin.COORDINATOR)
    plog.append(EndTxnMarker(7, 1, 5, False), 0, AppendOrigin.COORDINATOR)
    with pytest.raises(TransactionCoordinatorFenced):
        plog.append(EndTxnMarker(7, 1, 4, True), 0, AppendOrigin.COORDINATOR)
    # a timeout abort bumps the epoch: the zombie's old epoch is then refused
    produce(plog, 7, 1, 2)
    plog.append(EndTxnMarker(7, 2, 5, False), 0, AppendOrigin.COORDINATOR)
    with pytest.raises(InvalidProducerEpoch):
        produce(plog, 7, 1, 4)
    end = plog.log_end_offset
    assert plog.last_stable_offset == end


def test_plain_write_inside_an_open_transaction_is_refused(tmp_path: Path) -> None:
    plog = open_log(tmp_path)
    produce(plog, 7, 0, 0)
    with pytest.raises(InvalidTxnState):
        produce(plog, 7, 0, 2, transactional=False)
    assert plog.log_end_offset == 2


@pytest.mark.parametrize("clean", [True, False])
@pytest.mark.parametrize("lose_txn_index", [False, True])
def test_transactions_survive_restart(tmp_path: Path, clean: bool, lose_txn_index: bool) -> None:
    plog = open_log(tmp_path)
    produce(plog, 7, 0, 0)  # 0-1
    plog.append(EndTxnMarker(7, 0, 0, False), 0, AppendOrigin.COORDINATOR)  # 2
    produce(plog, 8, 0, 0)  # 3-4, left open
    plog.close(flush=clean)
    if lose_txn_index:
        (tmp_path / "t-0" / f"{0:020d}.txnindex").unlink()
        for snap in (tmp_path / "t-0").glob("*.snapshot"):
            snap.unlink()
    plog = open_log(tmp_path, clean=clean)
    assert plog.last_stable_offset == 3
    assert plog.producer_state.ongoing_transactions() == {8: 3}
    plog.append(EndTxnMarker(8, 0, 0, True), 0, AppendOrigin.COORDINATOR)  # 5
    batches, aborted = committed_view(plog)
    assert batches == [0, 2, 3, 5]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(7, 0, 2)]
