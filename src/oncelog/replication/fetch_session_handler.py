"""The follower's side of a fetch session with one leader (KIP-227; Kafka's
FetchSessionHandler), sans-IO.

A follower fetches all its partitions of a leader on every round, but most rounds move only
a few of them. The first request is a full one that asks the leader for a session (id 0,
epoch 0); once the answer carries a session id, each request names only the partitions whose
fetch position changed or that joined, and the ones that left as forgotten, and the answer
carries only partitions with news. The rest stay as the leader has them.

Anything that leaves the two sides unsure of each other (an answer lost with its connection,
an unknown session, a wrong epoch, any top-level error) makes the next request a full one
again, closing the old session if there was one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from oncelog.errors import ErrorCode
from oncelog.protocol.fast_fetch import FollowerFetchPartition
from oncelog.types import TopicPartition

#: Top-level errors that only mean the next request must be a full one.
SESSION_ERRORS = frozenset(
    {ErrorCode.fetch_session_id_not_found, ErrorCode.invalid_fetch_session_epoch}
)
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
_MAX_EPOCH = 2**31 - 1


class FetchPlan(NamedTuple):
    """One request: its session fields, the partitions to name (grouped by topic) and the
    partitions to forget."""

    session_id: int
    session_epoch: int
    topics: list[tuple[str, list[FollowerFetchPartition]]]
    forgotten: list[tuple[str, list[int]]]


#: Where a follower fetches a partition from: (leader epoch, fetch offset, log start).
Position = tuple[int, int, int]


class FetchSessionHandler:
    __slots__ = ("_full", "_pending", "_sent", "epoch", "partition_max_bytes", "session_id")

    def __init__(self, partition_max_bytes: int) -> None:
        self.partition_max_bytes = partition_max_bytes
        self.session_id = INVALID_SESSION_ID
        #: The epoch of the next request; INITIAL_EPOCH: a full one.
        self.epoch = INITIAL_EPOCH
        #: What the leader's session holds, as far as its last answer confirmed.
        self._sent: dict[TopicPartition, Position] = {}
        #: The request in flight: all it names (full) or what it changes (None: forgotten).
        self._pending: dict[TopicPartition, Position | None] = {}
        self._full = True

    def build(
        self, wanted: Mapping[TopicPartition, Position], changed: Iterable[TopicPartition]
    ) -> FetchPlan:
        """The next request for `wanted`, every partition to fetch now at its position.
        `changed`: the partitions whose position may differ from the previous request's, or
        that joined or left since; only they are looked at for an incremental request."""
        full = self._full = self.epoch == INITIAL_EPOCH
        topics: dict[str, list[FollowerFetchPartition]] = {}
        forgotten: dict[str, list[int]] = {}
        max_bytes = self.partition_max_bytes
        pending: dict[TopicPartition, Position | None] = {}
        if full:
            pending.update(wanted)
            listed: Iterable[TopicPartition] = wanted
        else:
            sent = self._sent
            listed = []
            for tp in changed:
                position = wanted.get(tp)
                if position is None:
                    if tp in sent:
                        pending[tp] = None
                        forgotten.setdefault(tp.topic, []).append(tp.partition)
                elif sent.get(tp) != position:
                    pending[tp] = position
                    listed.append(tp)
        for tp in listed:
            epoch, offset, start = wanted[tp]
            part = FollowerFetchPartition(tp.partition, epoch, offset, start, max_bytes)
            topics.setdefault(tp.topic, []).append(part)
        self._pending = pending
        return FetchPlan(
            self.session_id, self.epoch, list(topics.items()), list(forgotten.items())
        )

    def answered(self, error_code: int, session_id: int) -> None:
        """The answer to the request `build` made last arrived (its top-level fields)."""
        if error_code == ErrorCode.fetch_session_id_not_found:
            self._restart(close=False)
        elif error_code != ErrorCode.none:
            self._restart(close=True)
        elif self._full:
            self.session_id = session_id
            if session_id == INVALID_SESSION_ID:
                # No slot on the leader: the next request is full again and asks anew.
                self._restart(close=False)
                return
            self.epoch = 1
            self._sent = {tp: p for tp, p in self._pending.items() if p is not None}
        else:
            self.epoch = self.epoch + 1 if self.epoch < _MAX_EPOCH else 1
            sent = self._sent
            for tp, position in self._pending.items():
                if position is None:
                    sent.pop(tp, None)
                else:
                    sent[tp] = position

    def failed(self) -> None:
        """The request or its answer was lost (a broken connection, a timeout): the leader's
        session may or may not have moved, so start over."""
        self._restart(close=True)

    def _restart(self, close: bool) -> None:
        if not close:
            self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self._sent = {}
