"""`ProducerStateManager.next_in_line` / `append_next`, the short way of the common append,
against the rules (`find_duplicate`, `prepare`, `ProducerAppendInfo.append`, `update`): for
any history of batches and markers, taking the short way whenever it offers itself leaves
exactly the state, answers and errors the rules alone give. Both ways of the short way run:
the C helper's (`next_in_line`, when built) and the Python reference (`*_python`)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.errors import KafkaError
from oncelog.producer_state.manager import ProducerStateManager
from oncelog.producer_state.tracker import ProducerTracker
from oncelog.protocol.records.batch import TRANSACTIONAL_FLAG, BatchHeader
from oncelog.types import TopicPartition

TP = TopicPartition("t", 0)
PIDS = (1, 9, 1 + 2**20)
"""1 and 1 + 2**20 share the low bits of the id map's first probe."""


def header(
    pid: int, epoch: int, seq: int, delta: int, offset: int, ts: int, txn: bool
) -> BatchHeader:
    attributes = TRANSACTIONAL_FLAG if txn else 0
    return BatchHeader(offset, 100, 0, 2, 0, attributes, delta, ts, ts, pid, epoch, seq, delta + 1)


def by_rules(state: ProducerStateManager, batch: BatchHeader) -> object:
    found = state.find_duplicate(batch)
    if found is not None:
        return ("duplicate", found.first_offset, found.last_offset)
    info = state.prepare(batch.producer_id)
    try:
        info.append(batch)
    except KafkaError as exc:
        return ("error", exc.code)
    state.update(info)
    return "appended"


#: The short way's two implementations: the C helper's (the Python one when it is not
#: built) and the Python reference.
WAYS = [("next_in_line", "append_next"), ("next_in_line_python", "append_next_python")]


def short_way(state: ProducerStateManager, batch: BatchHeader, way: tuple[str, str]) -> object:
    slot = getattr(state, way[0])(batch)
    if not slot:
        return by_rules(state, batch)
    getattr(state, way[1])(slot, batch, batch.base_offset)
    return "appended"


def marker(state: ProducerStateManager, pid: int, epoch: int, offset: int, commit: bool) -> object:
    info = state.prepare(pid)
    try:
        info.end_transaction(epoch, 0, commit, offset, check=True)
    except KafkaError as exc:
        return ("error", exc.code)
    state.update(info)
    return "marker"


def sequence(how: str, last: int, delta: int) -> int:
    """A batch's first sequence after the producer's `last`: the next one, or another kind."""
    return {
        "next": (last + 1) % 2**31,
        "same": max(last - delta, 0),
        "gap": (last + 3) % 2**31,
        "zero": 0,
        "old": max(last - 7, 0),
        "wrap": 2**31 - 1,
        "none": -1,
    }[how]


step = st.tuples(
    st.sampled_from(PIDS),
    st.integers(0, 2),  # epoch
    st.sampled_from(["next", "next", "next", "same", "gap", "zero", "old", "wrap", "none"]),
    st.integers(0, 3),  # offset delta
    st.booleans(),  # transactional
    st.sampled_from([None, None, None, None, True, False]),  # a marker instead, commit?
)


@pytest.mark.parametrize("way", WAYS)
@settings(max_examples=300, deadline=None)
@given(st.lists(step, max_size=40))
def test_the_short_way_changes_nothing_the_rules_would_not(
    way: tuple[str, str], steps: list[tuple[int, int, str, int, bool, bool | None]]
) -> None:
    ours = ProducerStateManager(TP, tracker=ProducerTracker())
    rules = ProducerStateManager(TP, tracker=ProducerTracker())
    offset = 0
    last_seq: dict[int, int] = {}
    for pid, epoch, how, delta, txn, commit in steps:
        if commit is not None:
            ended = marker(ours, pid, epoch, offset, commit)
            assert ended == marker(rules, pid, epoch, offset, commit)
            offset += 1
            continue
        seq = sequence(how, last_seq.get(pid, -1), delta)
        batch = header(pid, epoch, seq, delta, offset, 1_000 + offset, txn)
        answer = short_way(ours, batch, way)
        assert answer == by_rules(rules, batch)
        if answer == "appended":
            last_seq[pid] = (seq + delta) % 2**31
            offset += delta + 1
        for p in PIDS:
            assert ours.entry(p) == rules.entry(p)
        assert ours.ongoing_transactions() == rules.ongoing_transactions()


@pytest.mark.parametrize("way", WAYS)
def test_the_next_batch_of_a_known_producer_takes_the_short_way(way: tuple[str, str]) -> None:
    state = ProducerStateManager(TP, tracker=ProducerTracker())
    next_in_line = getattr(state, way[0])
    assert by_rules(state, header(7, 0, 0, 4, 0, 1, False)) == "appended"
    assert next_in_line(header(7, 0, 5, 0, 5, 2, False))
    assert not next_in_line(header(7, 0, 0, 4, 0, 1, False))  # a retry
    assert not next_in_line(header(7, 1, 0, 0, 5, 2, False))  # a new epoch
    assert not next_in_line(header(7, 0, 5, 0, 5, 2, True))  # opens a transaction
    assert not next_in_line(header(8, 0, 0, 0, 5, 2, False))  # unknown producer


def test_after_a_batch_without_sequence_the_next_must_start_at_zero() -> None:
    state = ProducerStateManager(TP, tracker=ProducerTracker())
    assert by_rules(state, header(7, 0, -1, 2, 0, 1, False)) == "appended"
    after = header(7, 0, 2, 0, 3, 1, False)
    assert not state.next_in_line(after)
    assert by_rules(state, after)[0] == "error"  # type: ignore[index]


@pytest.mark.parametrize("way", WAYS)
def test_a_cached_batch_at_the_next_sequence_is_a_retry_not_the_next_batch(
    way: tuple[str, str],
) -> None:
    """Writes without sequence rules (a coordinator's) can leave cached batches that are not
    consecutive; a batch that matches one of them is a duplicate, never the short way."""
    state = ProducerStateManager(TP, tracker=ProducerTracker())
    for seq, offset in ((4, 0), (3, 1)):
        info = state.prepare(7)
        info.append(header(7, 0, seq, 0, offset, 1, False), check_sequence=False)
        state.update(info)
    retry = header(7, 0, 4, 0, 2, 1, False)
    assert not getattr(state, way[0])(retry)
    assert by_rules(state, retry) == ("duplicate", 0, 0)


def test_the_c_helper_takes_the_short_way_where_the_tests_run() -> None:
    """The C helper is built wherever the tests run, so WAYS holds both implementations."""
    from oncelog.producer_state import manager

    assert manager._c_next_in_line is not None
    assert manager._c_append_next is not None


replayed = st.tuples(
    st.sampled_from((*PIDS, -1)),
    st.integers(0, 2),  # epoch
    st.sampled_from(["next", "next", "next", "same", "gap", "zero", "wrap", "none"]),
    st.integers(0, 3),  # offset delta
    st.booleans(),  # transactional
    st.booleans(),  # an emptied control batch instead (the leader's cleaner left it)
)


@settings(max_examples=300, deadline=None)
@given(st.lists(replayed, max_size=40))
def test_a_follower_replay_takes_the_short_way_to_the_same_state(
    steps: list[tuple[int, int, str, int, bool, bool]],
) -> None:
    """`replay_data` (a follower's fetched batches) against `replay`, which applies every
    batch without validating: the same entries, transactions and map end for any history
    (a follower stores what the leader wrote, so sequences need not follow)."""
    ours = ProducerStateManager(TP, tracker=ProducerTracker())
    plain = ProducerStateManager(TP, tracker=ProducerTracker())
    offset = 0
    last_seq: dict[int, int] = {}
    headers = []
    for pid, epoch, how, delta, txn, control in steps:
        seq = sequence(how, last_seq.get(pid, -1), delta)
        if control:
            headers.append(BatchHeader(offset, 61, 0, 2, 0, 0x30, 0, 0, 0, pid, epoch, -1, 0))
            offset += 1
            continue
        headers.append(header(pid, epoch, seq, delta, offset, 1_000 + offset, txn))
        last_seq[pid] = (seq + delta) % 2**31
        offset += delta + 1
    for start in range(0, len(headers), 3):  # in fetches of up to three batches
        ours.replay_data(headers[start : start + 3])
        plain.replay(headers[start : start + 3])
        for p in PIDS:
            assert ours.entry(p) == plain.entry(p)
        assert ours.ongoing_transactions() == plain.ongoing_transactions()
        assert ours.map_end_offset == plain.map_end_offset
