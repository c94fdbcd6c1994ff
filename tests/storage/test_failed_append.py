"""A refused append leaves nothing behind (issue 10 B audit).

The log bytes may be written and the index write after them fail (a full disk takes the
8-byte index entry after the batch fit). The partition then answers KAFKA_STORAGE_ERROR; the
batch must not stay in the log, or the next append gets the same offsets and a fetch serves
the refused batch in place of the acknowledged one.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from oncelog.config import LogConfig
from oncelog.protocol.records.batch import iter_batches
from oncelog.storage.log_info import AppendOrigin, EndTxnMarker
from tests.storage.util import append, batch_offsets, open_log, read_all


def _values(data: bytes) -> list[int]:
    return [h.record_count for _, h in iter_batches(data)]


@pytest.mark.parametrize("failing", ["index", "time_index"])
def test_index_write_failure_takes_the_batch_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    plog = open_log(tmp_path, LogConfig(index_interval_bytes=1))  # every batch is indexed
    append(plog, [b"a"])
    target = getattr(plog.active, failing)
    method = "append" if failing == "index" else "maybe_append"

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(target, method, full)
    with pytest.raises(OSError):
        append(plog, [b"refused", b"refused"])
    monkeypatch.undo()
    assert plog.log_end_offset == 1
    assert _values(read_all(plog)) == [1]

    info = append(plog, [b"b", b"b", b"b"])
    assert (info.base_offset, info.last_offset) == (1, 3)
    assert batch_offsets(read_all(plog)) == [(0, 0), (1, 3)]
    assert _values(read_all(plog)) == [1, 3]
    assert _values(plog.read(1, 1 << 20).records) == [3]
    directory = plog.directory
    plog.close()
    for clean in (True, False):
        again = open_log(tmp_path, clean=clean)
        assert again.directory == directory
        assert batch_offsets(read_all(again)) == [(0, 0), (1, 3)]
        again.close()


def test_abort_index_write_failure_takes_the_marker_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An ABORT marker whose `.txnindex` entry cannot be written is refused whole: kept, it
    would close the transaction while read_committed fetches never learn it was aborted."""
    from tests.storage.test_transactions import committed_view, produce

    plog = open_log(tmp_path)
    produce(plog, 7, 0, 0)  # 0-1, open
    produce(plog, 8, 0, 0)  # 2-3, open

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(plog.active.txn_index, "append", full)
    with pytest.raises(OSError):
        plog.append(EndTxnMarker(7, 0, 0, False), 0, AppendOrigin.COORDINATOR)
    monkeypatch.undo()
    assert plog.log_end_offset == 4
    assert plog.last_stable_offset == 0  # both transactions still open
    assert plog.producer_state.ongoing_transactions() == {7: 0, 8: 2}

    info = plog.append(EndTxnMarker(7, 0, 0, False), 0, AppendOrigin.COORDINATOR)  # the retry
    assert info.base_offset == 4
    plog.append(EndTxnMarker(8, 0, 0, True), 0, AppendOrigin.COORDINATOR)  # 5
    batches, aborted = committed_view(plog)
    assert batches == [0, 2, 4, 5]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(7, 0, 4)]
    plog.close()


def test_torn_txn_index_write_is_cut_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Part of an entry written before the disk filled up must not shift the later entries."""
    import os

    from oncelog.storage import txn_index
    from oncelog.storage.txn_index import AbortedTxn, TransactionIndex

    index = TransactionIndex(tmp_path / "0.txnindex")
    index.open()
    real_write = os.write

    def torn(fd: int, data: bytes) -> int:
        real_write(fd, data[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(txn_index.os, "write", torn)
    with pytest.raises(OSError):
        index.append(AbortedTxn(1, 0, 4, 5))
    monkeypatch.undo()
    good = AbortedTxn(2, 6, 9, 10)
    index.append(good)
    index.close()
    again = TransactionIndex(tmp_path / "0.txnindex")
    again.open()
    assert again.entries == [good]
