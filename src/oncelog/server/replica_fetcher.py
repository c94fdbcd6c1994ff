"""Followers pull from leaders: one fetch loop per leader broker (Kafka's ReplicaFetcherThread).

Each loop serves the partitions this broker follows on one leader:

1. Partitions in the *truncating* phase ask the leader (OffsetForLeaderEpoch, with this
   broker's id) where their latest leader epoch ends there, truncate to the divergence
   point (`replication.follower.truncation_offset`) and move to *fetching*.
2. Fetching partitions are fetched together, as a follower (`replica_id` = this broker),
   at their log end with the leader epoch they know; the leader long-polls up to
   `replica.fetch.wait.max.ms`. The fetches run in a fetch session (KIP-227,
   `replication/fetch_session_handler.py`): after the first, a request names only the
   partitions whose position changed, and the answer only those with news. Batches are
   appended byte for byte; the follower's high watermark and log start follow the
   leader's (so what DeleteRecords removed stays removed under the next leader).
3. A fenced or stale epoch, or a leader that is no longer leader, parks the partition until
   etcd's newer state arrives (`follow` again). A leader that cannot be reached is retried
   after `replica.fetch.backoff.ms`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from kio.serial import entity_reader

from oncelog.broker.partition import Partition, Role
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.broker.replication_quota import UNLIMITED
from oncelog.errors import ErrorCode, KafkaError
from oncelog.protocol.codec import response_class
from oncelog.protocol.fast_fetch import (
    FOLLOWER_FETCH_VERSION,
    decode_fetch_response,
    encode_follower_fetch,
)
from oncelog.protocol.registry import ApiKey
from oncelog.replication.fetch_session_handler import (
    SESSION_ERRORS,
    FetchSessionHandler,
    Position,
)
from oncelog.replication.follower import FollowerPhase, truncation_offset
from oncelog.server.inter_broker import BrokerChannel, ChannelSecurity, PeerUnavailable
from oncelog.server.waits import event_or_timeout
from oncelog.storage.log_info import AppendOrigin
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

FETCH_VERSION = FOLLOWER_FETCH_VERSION
STOP_TIMEOUT_S = 5.0
OFFSET_FOR_LEADER_EPOCH_VERSION = 4


#: (host, port) of a broker id, from the cluster view; None when it is not registered.
AddressOf = Callable[[int], "tuple[str, int] | None"]


class ReplicaFetcher:
    def __init__(self, replicas: ReplicaManager, address_of: AddressOf) -> None:
        self.replicas = replicas
        self.node_id = replicas.config.node_id
        self.address_of = address_of
        config = replicas.config
        self.wait_ms = config.get_int("replica.fetch.wait.max.ms")
        self.min_bytes = config.get_int("replica.fetch.min.bytes")
        self.max_bytes = config.get_int("replica.fetch.response.max.bytes")
        self.partition_max_bytes = config.get_int("replica.fetch.max.bytes")
        self.backoff_s = config.get_int("replica.fetch.backoff.ms") / 1000
        self.timeout_s = config.get_int("replica.socket.timeout.ms") / 1000
        self.receive_buffer = config.get_int("replica.socket.receive.buffer.bytes")
        #: TLS / SASL to the leaders' inter-broker listener (set by the cluster runtime).
        self.security: ChannelSecurity | None = None
        self._links: dict[int, _Link] = {}
        self._loops: dict[int, asyncio.Task[None]] = {}
        self._kick: dict[int, asyncio.Event] = {}
        #: Leaders whose last round had a partition error: back off before the next one.
        self._errored: set[int] = set()

    def follow(self, replica: Partition) -> None:
        """Fetch `replica` from its current leader (after truncating against it)."""
        self.unfollow(replica.tp)
        follower = replica.follower
        if follower is None:
            return
        leader_id = follower.leader_id
        link = self._links.get(leader_id)
        if link is None:
            link = self._links[leader_id] = _Link(self.partition_max_bytes)
        link.following.add(replica.tp)
        link.dirty.add(replica.tp)
        if leader_id not in self._loops:
            self._kick[leader_id] = asyncio.Event()
            self._loops[leader_id] = asyncio.create_task(self._run(leader_id))
        self._kick[leader_id].set()

    def unfollow(self, tp: TopicPartition) -> None:
        for link in self._links.values():
            if tp in link.following:
                link.following.discard(tp)
                link.dirty.add(tp)

    def broker_changed(self) -> None:
        """A broker (re)registered: retry loops that were backing off."""
        for event in self._kick.values():
            event.set()

    async def stop(self) -> None:
        for task in self._loops.values():
            task.cancel()
        if self._loops:
            # Bounded: a loop must never hold up the broker's shutdown.
            await asyncio.wait(self._loops.values(), timeout=STOP_TIMEOUT_S)
        self._loops.clear()

    # -- one loop per leader -------------------------------------------------------------------

    async def _run(self, leader_id: int) -> None:
        channel: BrokerChannel | None = None
        kick = self._kick[leader_id]
        link = self._links[leader_id]
        while True:
            address = self.address_of(leader_id)
            if not link.following or address is None:
                kick.clear()
                await event_or_timeout(kick, self.backoff_s)
                continue
            if channel is None or channel.moved(*address):
                if channel is not None:
                    channel.close()
                channel = BrokerChannel(
                    leader_id,
                    address[0],
                    address[1],
                    self.timeout_s,
                    f"broker-{self.node_id}-fetcher",
                    self.security,
                    self.receive_buffer,
                    self.replicas.clock,
                )
            try:
                if not await self._round(channel, leader_id, link):
                    kick.clear()
                    await event_or_timeout(kick, self.backoff_s)
                if leader_id in self._errored:
                    self._errored.discard(leader_id)
                    await asyncio.sleep(self.backoff_s)
            except PeerUnavailable as exc:
                _raise_if_cancelling()
                log.info("replica fetcher: leader %d unavailable: %s", leader_id, exc)
                await asyncio.sleep(self.backoff_s)
            except asyncio.CancelledError:
                raise
            except Exception:
                _raise_if_cancelling()
                log.exception("replica fetcher for leader %d failed; retrying", leader_id)
                await asyncio.sleep(self.backoff_s)

    async def _round(self, channel: BrokerChannel, leader_id: int, link: _Link) -> bool:
        """Truncate what must be, then fetch; False when there was nothing to do."""
        by_tp, clock = self.replicas.replicas_by_tp, self.replicas.clock
        truncating = link.refresh(by_tp, leader_id, clock.monotonic_ms())
        if truncating:
            await self._truncate(channel, truncating)
            link.dirty.update(r.tp for r in truncating)
            link.refresh(by_tp, leader_id, clock.monotonic_ms())
        if link.fetching:
            wanted = self._unthrottled(link)
            if not wanted:  # every partition held back by the follower throttle
                await asyncio.sleep(self.backoff_s)
                return True
            await self._fetch(channel, leader_id, link, wanted)
            return True
        return bool(truncating)

    def _unthrottled(self, link: _Link) -> dict[TopicPartition, Position]:
        """The positions to fetch now: all of them, but while this broker's follower throttle
        is over its rate, not those it throttles that are out of the ISR (Kafka's fetcher
        leaves them out of its requests, and the session forgets them meanwhile). In sync is
        Kafka's test: in the ISR, or caught up with the leader's high watermark at the last
        answer (so a copy that has caught up can still tell the leader, and join the ISR)."""
        throttle = self.replicas.follower_throttle
        held: set[TopicPartition] = set()
        if throttle.limit < UNLIMITED and throttle.topics and throttle.exceeded():
            node = self.node_id
            held = {
                tp
                for tp, replica in link.fetching.items()
                if throttle.applies(tp) and node not in replica.isr and tp not in link.caught_up
            }
        if held != link.held:
            link.changed |= held ^ link.held
            link.held = held
        if not held:
            return link.positions
        return {tp: p for tp, p in link.positions.items() if tp not in held}

    async def _truncate(self, channel: BrokerChannel, replicas: list[Partition]) -> None:
        by_topic: dict[str, list[dict[str, Any]]] = {}
        asked: dict[TopicPartition, tuple[Partition, int]] = {}
        for r in replicas:
            assert r.follower is not None
            asked[r.tp] = (r, r.follower.leader_epoch)
            by_topic.setdefault(r.tp.topic, []).append(
                {
                    "partition": r.tp.partition,
                    "current_leader_epoch": r.follower.leader_epoch,
                    "leader_epoch": max(r.log.latest_leader_epoch, 0),
                }
            )
        body = {
            "replica_id": self.node_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
        }
        response = await channel.call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, OFFSET_FOR_LEADER_EPOCH_VERSION, body
        )
        for topic in response.topics:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition)
                replica, epoch = asked.get(tp, (None, -1))
                follower = replica.follower if replica is not None else None
                if replica is None or follower is None or follower.leader_epoch != epoch:
                    continue  # the state moved on while we asked
                if self.replicas.replicas_by_tp.get(tp) is not replica:
                    continue  # dropped here while we asked (reassigned away)
                if p.error_code != ErrorCode.none:
                    self._park(replica, p.error_code)
                    continue
                plog = replica.log
                offset = truncation_offset(
                    p.leader_epoch,
                    p.end_offset,
                    plog.log_end_offset,
                    plog.high_watermark,
                    plog.local_end_offset_for_epoch,
                )
                if offset < plog.log_end_offset:
                    log.info(
                        "%s: truncating from %d to %d (leader %d answered epoch %d ends at %d)",
                        tp,
                        plog.log_end_offset,
                        offset,
                        follower.leader_id,
                        p.leader_epoch,
                        p.end_offset,
                    )
                    plog.truncate_to(offset)
                follower.move(FollowerPhase.FETCHING)

    async def _fetch(
        self,
        channel: BrokerChannel,
        leader_id: int,
        link: _Link,
        wanted: dict[TopicPartition, Position],
    ) -> None:
        """One fetch from their leader of the partitions `link` has in the fetching phase
        (`wanted`: those not held back by the follower throttle)."""
        session = link.session
        plan = session.build(wanted, link.changed)
        link.changed = set()
        request = encode_follower_fetch(
            self.node_id,
            self.wait_ms,
            self.min_bytes,
            self.max_bytes,
            plan.topics,
            plan.session_id,
            plan.session_epoch,
            plan.forgotten,
        )
        try:
            frame, pos = await channel.call_raw(
                ApiKey.FETCH, FETCH_VERSION, request, self.timeout_s + self.wait_ms / 1000
            )
            # By hand, records as views of the frame; kio for anything unusual (tagged fields).
            response: Any = decode_fetch_response(FETCH_VERSION, frame, pos)
            if response is None:
                response, _ = _fetch_response_reader()(frame, pos)
            session.answered(response.error_code, response.session_id)
            self._answer(leader_id, link, response)
        except BaseException:
            # Whatever the leader sent may not all have been taken: start the session over.
            session.failed()
            raise

    def _answer(self, leader_id: int, link: _Link, response: Any) -> None:
        if response.error_code in SESSION_ERRORS:
            log.info(
                "replica fetcher: leader %d answered %s; fetching in full again",
                leader_id,
                ErrorCode(response.error_code).name,
            )
            return
        if response.error_code != ErrorCode.none:
            for parked in link.fetching.values():
                self._park(parked, response.error_code)
            link.dirty.update(link.fetching)
            return
        # An incremental answer carries only the partitions with news.
        positions = link.positions
        held = self.replicas.replicas_by_tp
        for topic in response.responses:
            name = topic.topic
            for p in topic.partitions:
                tp = TopicPartition(name, p.partition_index)
                replica = link.fetching.get(tp)
                if replica is None or held.get(tp) is not replica:
                    continue  # not fetched, or dropped here while asked (reassigned away)
                link.dirty.add(tp)  # its position moves, or it leaves the fetching phase
                epoch, offset, _ = positions[tp]
                follower = replica.follower
                if follower is None or follower.leader_epoch != epoch:
                    continue
                if replica.log.log_end_offset != offset:
                    continue  # truncated meanwhile
                self._fetched(replica, p)
                if replica.log.log_end_offset >= p.high_watermark:
                    link.caught_up.add(tp)
                else:
                    link.caught_up.discard(tp)

    def _fetched(self, replica: Partition, p: Any) -> None:
        code = p.error_code
        if code:
            if code == ErrorCode.offset_out_of_range:
                self._out_of_range(replica, p)
            else:
                self._park(replica, code)
            return
        tp = replica.tp
        records = p.records
        if records:
            try:
                self.replicas.append(tp, records, AppendOrigin.REPLICATION)
            except (KafkaError, OSError) as exc:
                log.error("%s: cannot append what leader sent: %s; truncating again", tp, exc)
                assert replica.follower is not None
                follower = replica.follower
                follower.new_leader(follower.leader_id, follower.leader_epoch)
                return
        self.replicas.follower_caught_up(tp, p.high_watermark, p.log_start_offset)

    def _out_of_range(self, replica: Partition, p: Any) -> None:
        """Our end is outside the leader's log: below its start (retention moved on), we start
        over at its start; otherwise we truncate against it again."""
        plog = replica.log
        follower = replica.follower
        assert follower is not None
        if 0 <= plog.log_end_offset < p.log_start_offset:
            log.warning(
                "%s: log end %d is below the leader's log start %d: starting over there",
                replica.tp,
                plog.log_end_offset,
                p.log_start_offset,
            )
            plog.truncate_fully_and_start_at(p.log_start_offset)
            return
        follower.new_leader(follower.leader_id, follower.leader_epoch)

    def _park(self, replica: Partition, code: int) -> None:
        """FENCED_LEADER_EPOCH: our state is older than the leader's, wait for etcd's newer
        one. Anything else (the leader has not seen its new state yet, say): truncate and
        try again after the backoff."""
        follower = replica.follower
        if follower is None or follower.phase == FollowerPhase.WAITING:
            return
        self._errored.add(follower.leader_id)
        log.info("%s: leader %d answered %s", replica.tp, follower.leader_id, ErrorCode(code).name)
        if code == ErrorCode.fenced_leader_epoch:
            follower.move(FollowerPhase.WAITING)
        else:
            follower.new_leader(follower.leader_id, follower.leader_epoch)


@functools.cache
def _fetch_response_reader() -> Any:
    return entity_reader(response_class(ApiKey.FETCH, FETCH_VERSION))


def _raise_if_cancelling() -> None:
    """On Python 3.11 `wait_for` may surface the peer's error instead of our cancellation
    when both happen at once; a loop being cancelled must stop, not retry."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


_FETCHING = FollowerPhase.FETCHING
_TRUNCATING = FollowerPhase.TRUNCATING
#: Every partition of a link is looked at again this often, whatever was marked: a
#: follower's log start moved by retention changes nothing the fetcher sees otherwise.
SWEEP_MS = 1000


class _Link:
    """What this broker fetches from one leader: the partitions it follows there, those in
    the fetching phase with their positions, and the fetch session.

    A round must not cost every followed partition (`__consumer_offsets` alone has 50, nearly
    all idle): positions are looked at again only for partitions marked `dirty`, which is
    everything that moves them here (an answer that carried the partition, a truncation, a
    park, `follow` and `unfollow`), and for all of them once per `SWEEP_MS`.
    """

    __slots__ = (
        "caught_up",
        "changed",
        "dirty",
        "fetching",
        "following",
        "held",
        "positions",
        "session",
        "swept",
    )

    def __init__(self, partition_max_bytes: int) -> None:
        self.following: set[TopicPartition] = set()
        #: Partitions whose phase or position may have changed since they were last looked at.
        self.dirty: set[TopicPartition] = set()
        #: The fetching ones, and where they fetch from.
        self.fetching: dict[TopicPartition, Partition] = {}
        self.positions: dict[TopicPartition, Position] = {}
        #: Partitions whose position changed (or that joined or left) since the last request.
        self.changed: set[TopicPartition] = set()
        self.session = FetchSessionHandler(partition_max_bytes)
        self.swept: int | None = None
        #: Fetching partitions the follower throttle holds back now, and those whose end
        #: reached the leader's high watermark at the last answer.
        self.held: set[TopicPartition] = set()
        self.caught_up: set[TopicPartition] = set()

    def refresh(
        self, by_tp: dict[TopicPartition, Partition], leader_id: int, now_ms: int
    ) -> list[Partition]:
        """Look again at the dirty partitions (all of them once per `SWEEP_MS`); return those
        that must truncate first. Partitions no longer following `leader_id` are let go."""
        dirty = self.dirty
        if self.swept is None or now_ms - self.swept >= SWEEP_MS:
            self.swept = now_ms
            dirty.update(self.following)
            dirty.update(self.fetching)
        if not dirty:
            return []
        self.dirty = set()
        truncating: list[Partition] = []
        following = self.following
        fetching = self.fetching
        positions = self.positions
        for tp in dirty:
            replica = by_tp.get(tp) if tp in following else None
            follower = replica.follower if replica is not None else None
            if (
                follower is None
                or follower.leader_id != leader_id
                or replica.role is not Role.FOLLOWER  # type: ignore[union-attr]
            ):
                following.discard(tp)
                phase = None
            else:
                phase = follower.phase
            if phase is _FETCHING:
                assert replica is not None and follower is not None
                plog = replica.log
                position = (follower.leader_epoch, plog.log_end_offset, plog.log_start_offset)
                fetching[tp] = replica
                if positions.get(tp) != position:
                    positions[tp] = position
                    self.changed.add(tp)
                continue
            if fetching.pop(tp, None) is not None:
                del positions[tp]
                self.changed.add(tp)
                self.caught_up.discard(tp)
                self.held.discard(tp)
            if phase is _TRUNCATING:
                assert replica is not None
                truncating.append(replica)
        return truncating
