"""The log cleaner on real segment files with a manual clock: dedupe, tombstones and their
delete horizon, transactions, producer state, the crash-safe swap, bounded memory."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.clock import ManualClock
from oncelog.config import LogConfig
from oncelog.protocol.records.batch import DELETE_HORIZON_FLAG, iter_batches
from oncelog.protocol.records.compression import Codec
from oncelog.storage import swap
from oncelog.storage.cleaner import CleanerSettings, LogCleaner, clean_segments
from oncelog.storage.local_log import LogHooks
from oncelog.storage.offset_map import OffsetMap
from oncelog.storage.partition_log import PartitionLog
from tests.storage.cleaner_util import Producer, consume, send_plain, table, tombstones
from tests.storage.util import T0, TP, open_log, read_all

COMPACT = LogConfig(
    segment_bytes=600,
    cleanup_policy=("compact",),
    min_cleanable_dirty_ratio=0.01,
    delete_retention_ms=1000,
    retention_ms=-1,
    index_interval_bytes=100,
)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def cleaner(clock: ManualClock, **settings: int) -> LogCleaner:
    return LogCleaner(CleanerSettings(**settings), clock)  # type: ignore[arg-type]


def reopen(plog: PartitionLog, *, clean: bool = False) -> PartitionLog:
    plog.close(flush=clean)
    reloaded = open_log(plog.directory.parent, plog.config, clock=plog.clock, clean=clean)  # type: ignore[arg-type]
    reloaded.cleaner_checkpoint = plog.cleaner_checkpoint
    return reloaded


def k(i: int) -> bytes:
    return f"k{i}".encode()


def v(i: int, n: int) -> bytes:
    return f"v{i}-{n}".encode()


def test_offset_map_is_bounded_and_finds_latest() -> None:
    m = OffsetMap(24 * 1000, load_factor=0.9)
    assert m.slots == 1000 and m.memory_bytes == 24_000 and m.max_entries == 900
    for i in range(900):
        m.put(k(i), i)
    m.put(k(5), 5000)
    assert m.size == 900 and m.full
    assert m.get(k(5)) == 5000 and m.get(k(899)) == 899 and m.get(b"absent") == -1
    assert m.latest_offset == 5000


def test_keeps_latest_value_per_key_and_offsets(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    for n in range(40):
        send_plain(plog, [(k(n % 5), v(n % 5, n))])
        clock.advance(1)
    before = consume(plog, read_committed=False)
    original = {off: (key, val) for off, key, val in before}
    active_base = plog.active.base_offset
    assert len(plog.segments) > 3
    result = cleaner(clock).clean_now(plog)
    assert result is not None and result.bytes_after < result.bytes_before
    after = consume(plog, read_committed=False)
    assert table(after) == table(before)
    for off, key, val in after:  # offsets are kept
        assert original[off] == (key, val)
    # the active segment is untouched, everything below it holds each key once
    assert plog.active.base_offset == active_base
    below = [r for r in after if r[0] < active_base]
    assert len({key for _, key, _ in below}) == len(below)
    assert plog.cleaner_checkpoint == active_base
    assert plog.last_clean_ms == clock.wall_ms()
    # a second round finds nothing dirty
    assert cleaner(clock).clean_now(plog) is None
    reloaded = reopen(plog, clean=True)
    assert consume(reloaded, read_committed=False) == after


def test_replaced_segments_are_renamed_and_left_to_the_discard_hook(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The swap renames the segments it replaced to `.deleted` and hands them over with the
    log's `file.delete.delay.ms`: their unlinks run in the broker's worker, not on the loop
    that swaps."""
    handed: list[tuple[list[Path], int]] = []
    hooks = LogHooks(discard=lambda paths, delay_ms: handed.append((paths, delay_ms)))
    plog = open_log(tmp_path, replace(COMPACT, file_delete_delay_ms=1234), clock, hooks=hooks)
    for n in range(40):
        send_plain(plog, [(k(n % 5), v(n % 5, n))])
    bases = [s.base_offset for s in plog.segments[:-1]]
    assert cleaner(clock).clean_now(plog) is not None
    assert handed and {delay for _, delay in handed} == {1234}
    paths = [path for group, _ in handed for path in group]
    assert paths and all(path.name.endswith(".deleted") and path.exists() for path in paths)
    assert {int(path.name[:20]) for path in paths if path.name.endswith(".log.deleted")} == set(
        bases
    )
    assert consume(reopen(plog, clean=True), read_committed=False)  # a load removes them
    assert not any(path.exists() for path in paths)


def test_tombstones_go_after_delete_retention(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    for n in range(12):
        send_plain(plog, [(k(n % 3), v(n % 3, n))])
    send_plain(plog, [(k(0), None)])
    for n in range(12):
        send_plain(plog, [(k(5), v(5, n))])
    plog.roll()
    c = cleaner(clock)
    assert c.clean_now(plog) is not None
    records = consume(plog, read_committed=False)
    assert table(records) == {k(1): v(1, 10), k(2): v(2, 11), k(5): v(5, 11)}
    (tomb,) = tombstones(records)
    # the tombstone's batch now carries its delete horizon (KIP-534)
    horizon_batches = [
        h for _, h in iter_batches(read_all(plog)) if h.attributes & DELETE_HORIZON_FLAG
    ]
    assert [h.base_timestamp for h in horizon_batches] == [T0 + COMPACT.delete_retention_ms]
    assert plog.delete_horizon_ms == T0 + 1000
    clock.advance(999)
    assert c.clean_now(plog) is None  # nothing dirty, horizon not reached
    clock.advance(1)
    assert c.clean_now(plog) is not None  # the horizon alone makes the log cleanable
    after = consume(plog, read_committed=False)
    assert tombstones(after) == [] and table(after) == table(records)
    assert tomb not in [off for off, _, _ in after]


def test_aborted_transactions_removed_committed_kept(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    txn = Producer(plog, producer_id=7, transactional=True)
    send_plain(plog, [(k(1), b"plain-1"), (k(2), b"plain-2")])
    txn.send([(k(1), b"aborted-1"), (k(3), b"aborted-3")])
    txn.end(commit=False)
    txn.send([(k(2), b"committed-2")])
    commit = txn.end(commit=True)
    txn.send([(k(4), b"aborted-4")])
    send_plain(plog, [(k(5), b"plain-5")])
    last_abort = txn.end(commit=False)
    plog.roll()
    before_rc = table(consume(plog, read_committed=True))
    before_ru = table(consume(plog, read_committed=False))
    assert before_rc == {k(1): b"plain-1", k(2): b"committed-2", k(5): b"plain-5"}
    c = cleaner(clock)
    assert c.clean_now(plog) is not None
    after_rc = consume(plog, read_committed=True)
    after_ru = consume(plog, read_committed=False)
    assert table(after_rc) == before_rc
    # aborted records are gone for read_uncommitted readers too
    assert table(after_ru) == before_rc != before_ru
    assert not any(val.startswith(b"aborted") for _, _, val in after_ru if val)
    # the markers stay this round (the round saw their transactions' data) ...
    markers = [h for _, h in iter_batches(read_all(plog)) if h.is_control]
    assert len(markers) == 3
    # ... and go once no data of theirs is left and their delete horizon passed
    clock.advance(10)
    send_plain(plog, [(k(9), b"x")])  # something dirty, so another round runs
    plog.roll()
    assert c.clean_now(plog) is not None  # markers get their horizon
    clock.advance(COMPACT.delete_retention_ms)
    assert c.clean_now(plog) is not None
    stored = [h for _, h in iter_batches(read_all(plog)) if h.producer_id == 7]
    # the first ABORT went; the COMMIT stays (committed-2 is live), and so does the last
    # ABORT: producer 7's last batch is kept, emptied, for its sequence, and it is data of
    # that transaction
    assert [(h.is_control, h.record_count) for h in stored] == [
        (False, 1),
        (True, 1),
        (False, 0),
        (True, 1),
    ]
    assert stored[1].base_offset == commit.base_offset
    assert [t.last_offset for s in plog.segments for t in s.txn_index.entries] == [
        last_abort.base_offset
    ]
    assert table(consume(plog, read_committed=True)) == {**before_rc, k(9): b"x"}


def test_open_transaction_is_not_touched(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    for n in range(6):
        send_plain(plog, [(k(1), v(1, n))])
    txn = Producer(plog, producer_id=3, transactional=True)
    txn.send([(k(1), b"open")])
    for n in range(6, 30):
        send_plain(plog, [(k(1), v(1, n))])
    assert len(plog.segments) > 2
    lso = plog.last_stable_offset
    c = cleaner(clock)
    assert c.clean_now(plog) is not None
    assert plog.cleaner_checkpoint <= lso
    data = consume(plog, read_committed=False)
    assert [off for off, _, val in data if val == b"open"] == [lso]
    assert all(off >= lso for off, _, _ in data[1:])  # only the last value below the LSO
    txn.end(commit=False)
    plog.roll()
    assert c.clean_now(plog) is not None
    assert b"open" not in [val for _, _, val in consume(plog, read_committed=False)]
    assert table(consume(plog, read_committed=True)) == {k(1): v(1, 29)}


def test_idempotent_producer_continues_after_its_batches_were_cleaned(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    producer = Producer(plog, producer_id=11)
    for n in range(20):
        producer.send([(k(0), v(0, n))])
    for n in range(20):
        send_plain(plog, [(k(0), v(0, 100 + n))])  # supersedes every record of producer 11
    plog.roll()
    assert cleaner(clock).clean_now(plog) is not None
    batches = [h for _, h in iter_batches(read_all(plog)) if h.producer_id == 11]
    assert [(h.record_count, h.base_sequence) for h in batches] == [(0, 19)]
    producer.send([(k(0), b"next")])  # sequence 20: accepted, in order
    for reloaded in (reopen(plog, clean=False),):
        # also without any producer snapshot: the kept empty batch carries the sequence
        for snap in reloaded.directory.glob("*.snapshot"):
            snap.unlink()
        reloaded.rebuild_producer_state()
        producer.plog = reloaded
        producer.send([(k(0), b"after-restart")])
        assert table(consume(reloaded, read_committed=False))[k(0)] == b"after-restart"


def test_compressed_batches_are_rewritten_with_their_codec(
    tmp_path: Path, clock: ManualClock
) -> None:
    plog = open_log(tmp_path, replace(COMPACT, segment_bytes=2000), clock)
    producer = Producer(plog, producer_id=5)
    for n in range(30):
        producer.send([(k(i), v(i, n)) for i in range(4)] + [(k(n + 10), None)], Codec.GZIP)
    plog.roll()
    before = table(consume(plog, read_committed=False))
    assert cleaner(clock).clean_now(plog) is not None
    assert table(consume(plog, read_committed=False)) == before
    assert all(
        h.compression == Codec.GZIP for _, h in iter_batches(read_all(plog)) if h.record_count
    )


def test_small_dedupe_buffer_cleans_a_prefix(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    for n in range(60):
        send_plain(plog, [(k(n), v(n, 0))])
    for n in range(60):
        send_plain(plog, [(k(n), v(n, 1))])
    plog.roll()
    before = table(consume(plog, read_committed=False))
    c = cleaner(clock, dedupe_buffer_size=24 * 50)  # 45 keys
    result = c.clean_now(plog)
    assert result is not None and result.end_offset < plog.active.base_offset
    assert table(consume(plog, read_committed=False)) == before
    rounds = 1
    while c.clean_now(plog) is not None:
        rounds += 1
    assert rounds > 2 and plog.cleaner_checkpoint == plog.active.base_offset
    assert table(consume(plog, read_committed=False)) == before


def test_min_compaction_lag_and_max_compaction_lag(tmp_path: Path, clock: ManualClock) -> None:
    config = replace(COMPACT, min_compaction_lag_ms=5000, max_compaction_lag_ms=60_000)
    plog = open_log(tmp_path, config, clock)
    for n in range(30):
        send_plain(plog, [(k(1), v(1, n))])
    c = cleaner(clock)
    assert c.clean_now(plog) is None  # every segment is younger than the minimum lag
    clock.advance(6000)
    assert c.clean_now(plog) is not None
    # KIP-354: the active segment rolls once it is older than max.compaction.lag.ms
    base = plog.active.base_offset
    send_plain(plog, [(k(2), b"a")])
    clock.advance(60_001)
    send_plain(plog, [(k(2), b"b")])
    assert plog.active.base_offset > base


def test_result_discarded_when_segments_changed(tmp_path: Path, clock: ManualClock) -> None:
    plog = open_log(tmp_path, replace(COMPACT, cleanup_policy=("compact", "delete")), clock)
    for n in range(30):
        send_plain(plog, [(k(n % 2), v(n % 2, n))])
    c = cleaner(clock)
    picked = c.grab_filthiest([plog])
    assert picked is not None
    _, job = picked
    result = clean_segments(job)
    assert list(plog.directory.glob("*.cleaned"))
    plog.delete_records_before(plog.segments[1].base_offset)  # deletes the first segment
    assert not c.finish(plog, job, result)
    assert not list(plog.directory.glob("*.cleaned")) and not c.in_progress


STEPS = ["log-swap", "indexes-swap", "deleted-old", "log-renamed", "done"]


class Crash(Exception):
    pass


@pytest.mark.parametrize("step", ["before-swap", *STEPS])
def test_crash_at_every_swap_step_leaves_a_whole_log(
    tmp_path: Path, clock: ManualClock, step: str
) -> None:
    plog = open_log(tmp_path, COMPACT, clock)
    txn = Producer(plog, producer_id=4, transactional=True)
    for n in range(40):
        send_plain(plog, [(k(n % 4), v(n % 4, n))])
        if n % 10 == 3:
            txn.send([(k(n % 4), b"aborted")])
            txn.end(commit=n % 20 == 3)
    send_plain(plog, [(k(1), None)])
    rc_before = table(consume(plog, read_committed=True))
    ru_before = consume(plog, read_committed=False)
    original = {off: (key, val) for off, key, val in ru_before}
    leo = plog.log_end_offset
    c = cleaner(clock)
    picked = c.grab_filthiest([plog])
    assert picked is not None
    _, job = picked
    result = clean_segments(job)

    def crash(at: str) -> None:
        if at == step:
            raise Crash(at)

    if step != "before-swap":
        with pytest.raises(Crash):
            c.finish(plog, job, result, crash)
    for segment in plog.segments:  # the process dies: nothing is flushed or closed cleanly
        segment.close()
    reloaded = open_log(tmp_path, COMPACT, clock, clean=False, recovery_point=0)
    assert not [p for p in os.listdir(reloaded.directory) if p.endswith((".cleaned", ".swap"))]
    assert reloaded.log_end_offset == leo
    after = consume(reloaded, read_committed=True)
    assert table(after) == rc_before
    for off, key, val in consume(reloaded, read_committed=False):
        assert original[off] == (key, val)
    # and the recovered log cleans again to the same table
    assert cleaner(clock).clean_now(reloaded) is not None
    assert table(consume(reloaded, read_committed=True)) == rc_before


def test_swap_recovery_of_partial_steps(tmp_path: Path) -> None:
    """`.cleaned` alone is forgotten; a `.log.swap` replaces the segments it covers."""
    d = tmp_path
    (d / f"{0:020d}.log").write_bytes(b"")
    (d / f"{0:020d}.index").write_bytes(b"")
    (d / f"{0:020d}.log.cleaned").write_bytes(b"x")
    (d / f"{0:020d}.index.cleaned").write_bytes(b"x")
    (d / f"{50:020d}.index").write_bytes(b"")  # a stray index without its log
    assert swap.recover(d) == []
    assert sorted(os.listdir(d)) == [f"{0:020d}.index", f"{0:020d}.log"]
    os.replace(d / f"{0:020d}.log", d / f"{0:020d}.log.swap")
    (d / f"{0:020d}.txnindex.swap").write_bytes(b"")
    assert swap.recover(d) == [0]
    assert sorted(os.listdir(d)) == [f"{0:020d}.log", f"{0:020d}.txnindex"]


def test_cleaner_checkpoint_survives_restart(tmp_path: Path, clock: ManualClock) -> None:
    from oncelog.storage.log_manager import LogManager

    manager = LogManager([tmp_path], clock)
    manager.startup(lambda topic: COMPACT)
    plog = manager.create(TP, COMPACT)
    for n in range(30):
        send_plain(plog, [(k(n % 3), v(n % 3, n))])
    assert cleaner(clock).clean_now(plog) is not None
    checkpoint = plog.cleaner_checkpoint
    manager.shutdown()
    again = LogManager([tmp_path], clock)
    again.startup(lambda topic: COMPACT)
    reloaded = again.get(TP)
    assert reloaded is not None and reloaded.cleaner_checkpoint == checkpoint > 0
    assert reloaded.dirty_ratio() == 0.0


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=20)),
            st.one_of(st.none(), st.binary(max_size=300)),
            st.integers(-(2**40), 2**40),
        ),
        min_size=1,
        max_size=20,
    )
)
def test_c_record_scan_matches_python(
    records: list[tuple[bytes | None, bytes | None, int]],
) -> None:
    from oncelog.protocol.records.record import encode_record
    from oncelog.storage.cleaned_batches import records_of, scan_records_python

    body = b"".join(
        encode_record(offset_delta=i, timestamp_delta=ts, key=key, value=value)
        for i, (key, value, ts) in enumerate(records)
    )
    assert records_of(body, len(records)) == scan_records_python(body, len(records))
