"""Markers, digests, seals and sink options of the exactly-once Kafka sink, without Spark."""

from __future__ import annotations

import pytest

from oncelog.spark.markers import (
    Action,
    CheckpointBehindOutput,
    Marker,
    MarkerError,
    NonDeterministicReplay,
    Seal,
    digest_of,
    marker_group,
    plan,
    seal_group,
    verify_replay,
)
from oncelog.spark.sink_options import SinkOptionError, SinkOptions

RECS = [
    ("t", None, b"k1", b"v1", None),
    ("t", 2, None, b"v2", [("h", b"x"), ("n", None)]),
    ("u", 0, b"", b"", []),
]


@pytest.mark.parametrize("ordered", [False, True])
def test_digest_is_deterministic(ordered: bool) -> None:
    assert digest_of(RECS, ordered) == digest_of(list(RECS), ordered)
    assert digest_of([], ordered) == digest_of([], ordered)
    assert digest_of(RECS, True) != digest_of(RECS, False)


@pytest.mark.parametrize("ordered", [False, True])
def test_digest_is_content_sensitive(ordered: bool) -> None:
    base = digest_of(RECS, ordered)
    assert digest_of(RECS[:2], ordered) != base
    assert digest_of([*RECS, RECS[0]], ordered) != base  # a duplicate changes it
    variants = [
        ("t", None, b"k1", b"v1", []),  # no headers vs empty headers
        ("t", 0, b"k1", b"v1", None),  # partition given vs unassigned
        ("t", None, None, b"v1", None),  # null key vs key
        ("t", None, b"k1v", b"1", None),  # same bytes, other boundary
        ("tt", None, b"k1", b"v1", None),
        ("t", None, b"k1", b"v1", [("h", None)]),
    ]
    for first in variants:
        assert digest_of([first, *RECS[1:]], ordered) != base, first


def test_digest_order() -> None:
    """Ordered digests see a reordering; the default (unordered) deliberately does not,
    because Spark's shuffle output order may differ on a replay of the same records."""
    flipped = list(reversed(RECS))
    assert digest_of(flipped, ordered=True) != digest_of(RECS, ordered=True)
    assert digest_of(flipped) == digest_of(RECS)
    assert len(digest_of(RECS)) == 32


def test_marker_roundtrip() -> None:
    m = Marker(7, 1000, digest_of(RECS))
    assert m.offset == 8
    assert Marker.decode(m.offset, m.metadata()) == m
    assert " " not in m.metadata()
    assert Marker.decode(-1001, None) is None  # librdkafka: no committed offset


@pytest.mark.parametrize(
    "offset,metadata",
    [
        (3, ""),
        (3, None),
        (3, "not json"),
        (3, '{"b": 2, "n": 1}'),
        (3, '{"b": "2", "n": 1, "d": "x"}'),
        (4, '{"v":1,"b":2,"n":1,"d":"x"}'),  # offset disagrees with the batch id
    ],
)
def test_bad_marker_metadata_is_a_clear_error(offset: int, metadata: str | None) -> None:
    with pytest.raises(MarkerError):
        Marker.decode(offset, metadata)


def test_decision_table() -> None:
    m = Marker(5, 3, "abc")
    assert plan(None, 0, 1) is Action.WRITE
    assert plan(m, 6, 1) is Action.WRITE
    assert plan(m, 5, 1) is Action.VERIFY
    with pytest.raises(CheckpointBehindOutput, match="batch 5 but Spark asks to write batch 4"):
        plan(m, 4, 1)
    verify_replay(m, 5, 1, "abc", 3)  # same records: skip
    with pytest.raises(
        NonDeterministicReplay, match="non-deterministic replay of batch 5 partition 1"
    ):
        verify_replay(m, 5, 1, "abd", 3)
    with pytest.raises(NonDeterministicReplay):
        verify_replay(m, 5, 1, "abc", 4)


def test_seal_roundtrip_and_groups() -> None:
    s = Seal(3, 2, 100, 1)
    assert Seal.decode(4, s.metadata()) == s
    assert Seal.decode(-1001, "") is None
    with pytest.raises(MarkerError):
        Seal.decode(5, s.metadata())
    assert marker_group("sink", "q", 3) == "sink-q-3"
    assert seal_group("sink", "q") == "sink-q-seal"


def test_options() -> None:
    o = SinkOptions.parse(
        {
            "kafka.bootstrap.servers": "h:1",
            "topic": "out",
            "kafka.linger.ms": "10",
            "oncelog.testing.failTaskAttempt0": "2:1",
            "oncelog.testing.killPidInCommit": "123:4",
        }
    )
    assert (o.sink_id, o.marker_topic, o.semantics) == ("out", "out", "exactly-once")
    assert o.client_conf() == {
        "reconnect.backoff.ms": "10",
        "linger.ms": "10",
        "bootstrap.servers": "h:1",
    }
    # The sink's client defaults give way to the user's.
    mine = SinkOptions.parse(
        {"kafka.bootstrap.servers": "h:1", "topic": "out", "kafka.reconnect.backoff.ms": "250"}
    )
    assert mine.client_conf()["reconnect.backoff.ms"] == "250"
    assert o.fail_attempt0 == (2, 1) and o.kill_in_commit == (123, 4)
    lax = SinkOptions.parse(
        {"kafka.bootstrap.servers": "h", "sinkId": "s", "semantics": "at-least-once"}
    )
    assert not lax.exactly_once and lax.topic is None and not lax.ordered_digest
    assert SinkOptions.parse(
        {"kafka.bootstrap.servers": "h", "topic": "t", "digestOrder": "ordered"}
    ).ordered_digest
    for bad in (
        {"topic": "t"},
        {"kafka.bootstrap.servers": "h", "sinkId": "s"},  # exactly-once without marker topic
        {"kafka.bootstrap.servers": "h", "topic": "t", "semantics": "maybe"},
        {"kafka.bootstrap.servers": "h", "topic": "t", "digestOrder": "sorted"},
        {"kafka.bootstrap.servers": "h", "topic": "t", "kafka.transactional.id": "x"},
        {"kafka.bootstrap.servers": "h", "topic": "t", "oncelog.testing.failTaskAttempt0": "x"},
    ):
        with pytest.raises(SinkOptionError):
            SinkOptions.parse(bad)
