"""A broker's membership in an etcd cluster: registration, metadata watch, controller.

Theory of operation:

1. Start: the broker reads (or, first of all, writes) the cluster id, takes a lease of
   `broker.session.timeout.ms` and creates `brokers/<node.id>` under it. A registration of
   an earlier incarnation is waited out until its lease expires; a live broker with the same
   node.id stops this one from starting. A partition state older than this registration
   that names this broker leader was written for the earlier incarnation: it is not led
   (for at most twice the session) until the controller, which saw that incarnation's
   registration expire, writes the partition's new state.
2. Watch: everything under the cluster's prefix is listed once, then watched from the next
   revision; a broken watch is re-listed (deleted keys found by difference). Every event
   updates the `ClusterView` handlers answer from, the replica manager (topics, partition
   states: leader, follower or neither), the replica fetcher, and the controller's view.
3. Controller: every broker campaigns for `controller` under its lease; the winner's
   `Controller` (a sans-IO state machine, fed the same events) turns them into partition
   state writes, each a compare-and-swap on the key's mod revision. A failed write is not
   retried as such: the event that made it fail brings the state the controller recomputes
   from; a write etcd did not answer is followed by a full recompute.
4. ISR changes: a leader writes its partition's new ISR itself, by CAS against the state
   it leads in. If the controller changed the partition meanwhile the CAS fails and the
   leader keeps its committed ISR — so a deposed leader can never shrink the ISR to itself
   and go on acknowledging acks=all writes alone.
5. Session loss: when the lease is lost (etcd unreachable for a whole TTL, or expired) the
   broker keeps serving what it leads (writes still need its followers), registers again
   under a new lease as soon as etcd answers, and campaigns again.
6. Producer ids: blocks of 1000 reserved by CAS on `producer_ids`, one ahead of need.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Hashable, Mapping, Sequence

from oncelog.broker.cluster_view import ClusterView, PendingOp
from oncelog.broker.context import Node
from oncelog.broker.partition import Change, Partition, ReplicaView
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.config import BrokerConfig
from oncelog.errors import KafkaError, TopicAlreadyExists, UnknownServerError
from oncelog.metadata import cluster_state as cs
from oncelog.metadata.controller import (
    Controller,
    ControllerSettings,
    PartitionWrite,
    isr_change,
)
from oncelog.metadata.producer_id_blocks import next_block
from oncelog.server.cluster_acls import ClusterAclOps
from oncelog.server.cluster_admin import ClusterAdminOps
from oncelog.server.cluster_configs import ClusterConfigOps
from oncelog.server.cluster_quotas import ClusterQuotaOps
from oncelog.server.cluster_scram import ClusterScramOps
from oncelog.server.etcd import (
    EtcdError,
    EtcdStore,
    Lease,
    LeaseLost,
    Versioned,
    WatchEvent,
    WatchLost,
    parse_etcd_connect,
)
from oncelog.server.inter_broker import inter_broker_security
from oncelog.server.replica_fetcher import ReplicaFetcher
from oncelog.server.startup import StartupError
from oncelog.server.txn_verifier import TxnVerifier
from oncelog.server.waits import event_or_timeout
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

CLUSTER_ID_KEY = b"cluster_id"
RETRY_S = 0.5
#: What an etcd event tells the controller, called once the views have its whole revision.
_Feed = Callable[[], list[PartitionWrite]]


class ClusterRuntime(
    ClusterAdminOps, ClusterAclOps, ClusterConfigOps, ClusterScramOps, ClusterQuotaOps
):
    def __init__(
        self,
        config: BrokerConfig,
        replicas: ReplicaManager,
        wake: Callable[[Sequence[Hashable]], None],
        leadership_listener: Callable[[TopicPartition, bool], None] | None = None,
    ) -> None:
        """`wake`: complete the purgatory's operations watching these keys;
        `leadership_listener`: told (partition, now leader) when this broker's leadership of
        a partition begins or ends. The replica manager's ISR changes reach `propose_isr`
        through the server."""
        etcd_connect = config.get("etcd.connect")
        assert isinstance(etcd_connect, str)
        self.target = parse_etcd_connect(etcd_connect)
        self.config = config
        self.node_id = config.node_id
        self.replicas = replicas
        self.wake = wake
        self.session_s = max(1, config.get_int("broker.session.timeout.ms") // 1000)
        self.view = ClusterView(cluster_id="")
        self.controller = Controller(
            ControllerSettings(
                unclean_leader_election_enable=config.get("unclean.leader.election.enable")
                is True,
                auto_leader_rebalance_enable=config.get("auto.leader.rebalance.enable") is True,
                leader_imbalance_check_interval_ms=config.get_int(
                    "leader.imbalance.check.interval.seconds"
                )
                * 1000,
                leader_imbalance_per_broker_percentage=config.get_int(
                    "leader.imbalance.per.broker.percentage"
                ),
            )
        )
        self.fetcher = ReplicaFetcher(replicas, self._address_of)
        #: How this broker's clients reach its peers' inter-broker listener (TLS, SASL).
        self.channel_security = inter_broker_security(config)
        self.fetcher.security = self.channel_security
        self.verifier = TxnVerifier(
            self.view,
            config.get_int("replica.socket.timeout.ms") / 1000,
            wake,
            f"broker-{config.node_id}-txn-verifier",
            config.get_int("socket.receive.buffer.bytes"),
        )
        self.verifier.security = self.channel_security
        self.store: EtcdStore | None = None
        self.lease: Lease | None = None
        self.registration: cs.BrokerRegistration | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._versions: dict[bytes, Versioned] = {}
        self._recompute = asyncio.Event()
        #: The etcd revision of this incarnation's registration, and when it was made: a
        #: partition state older than it that names this broker leader was written for the
        #: previous incarnation (`_apply_partition`).
        self.registered_revision = 0
        self._registered_at = 0.0
        #: Told when this broker starts or stops leading a partition (the coordinators load
        #: and unload their internal partitions on it).
        self.leadership_listener = leadership_listener or _no_leadership_listener

    # -- 1. start ---------------------------------------------------------------------------

    async def start(self, node: Node) -> None:
        try:
            self.store = await EtcdStore.connect(self.target, timeout_s=self.session_s)
            await self._cluster_id()
            # host/port: the inter-broker listener's, which peers connect to
            self.registration = cs.BrokerRegistration(
                node.node_id, node.host, node.port, endpoints=node.endpoints
            )
            await self._register(wait_s=self.session_s * 2 + 5)
            items, revision = await self.store.get_prefix(b"")
        except EtcdError as exc:
            raise StartupError(f"etcd at {self._where()}: {exc}") from exc
        self._relisted(items)
        self._tasks = [
            asyncio.create_task(self._watch(revision + 1)),
            asyncio.create_task(self._campaign()),
            asyncio.create_task(self._housekeeping()),
            asyncio.create_task(self._producer_ids()),
        ]
        log.info(
            "joined cluster %s through etcd %s as broker %d",
            self.view.cluster_id,
            self._where(),
            self.node_id,
        )

    def _where(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.target.endpoints)
        return f"{hosts}{self.target.prefix}"

    async def _cluster_id(self) -> None:
        assert self.store is not None
        ours = self.replicas.metadata.cluster_id.encode()
        await self.store.create(CLUSTER_ID_KEY, ours)
        got = await self.store.get(CLUSTER_ID_KEY)
        if got is None:
            raise StartupError("etcd lost the cluster id just written")
        self.view.cluster_id = got.value.decode()

    async def _register(self, wait_s: float) -> None:
        """Create `brokers/<id>` under a new lease, waiting out an old incarnation's."""
        assert self.store is not None and self.registration is not None
        key = cs.key_for_broker(self.node_id).encode()
        self.lease = await self.store.grant_lease(self.session_s)
        deadline = time.monotonic() + wait_s
        while True:
            created = await self.store.compare_and_swap(
                key, 0, self.registration.to_bytes(), lease=self.lease
            )
            if created is not None:
                self.registered_revision = created.mod_revision
                self._registered_at = time.monotonic()
                return
            if time.monotonic() > deadline:
                raise StartupError(
                    f"node.id {self.node_id} is registered in etcd by a live broker; "
                    "each broker needs its own node.id"
                )
            await asyncio.sleep(RETRY_S)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            # Waits without taking a task's CancelledError for our own: a cancellation of the
            # caller meanwhile still reaches the caller (`await task` would swallow it).
            await asyncio.wait(self._tasks)
        for task in self._tasks:
            if not task.cancelled() and task.exception() is not None:
                log.warning("cluster task %s ended with %r", task.get_name(), task.exception())
        await self.fetcher.stop()
        self.verifier.close()
        if self.store is not None:
            if self.lease is not None:
                # A clean stop leaves at once: the controller moves leadership now rather than
                # after the session timeout (Kafka's controlled shutdown, in short).
                with contextlib.suppress(EtcdError):
                    await self.lease.revoke(timeout_s=2)
            await self.store.close()

    # -- 2. the watch ---------------------------------------------------------------------------

    async def _watch(self, revision: int) -> None:
        assert self.store is not None
        while True:
            try:
                watch = self.store.watch_prefix_revisions(b"", revision)
                async with contextlib.aclosing(watch) as revisions:
                    async for events in revisions:
                        revision = events[-1].mod_revision + 1
                        self._events([(event, None) for event in events])
            except (WatchLost, EtcdError) as exc:
                log.warning("etcd watch broke (%s); listing again", exc)
                while True:
                    await asyncio.sleep(RETRY_S)
                    try:
                        items, listed = await self.store.get_prefix(b"")
                    except EtcdError:
                        continue
                    self._relisted(items)
                    revision = listed + 1
                    break

    def _relisted(self, items: list[Versioned]) -> None:
        """Apply a full listing: puts for what is there, deletes for what vanished."""
        present = {v.key for v in items}
        for key in [k for k in self._versions if k not in present]:
            self._event(WatchEvent("delete", key, b"", 0))
        # Topics before their partitions (key order puts partitions first).
        order = {"brokers": 0, "controller": 1, "topics": 2, "partitions": 3}
        for v in sorted(items, key=lambda v: order.get(v.key.split(b"/")[0].decode(), 9)):
            known = self._versions.get(v.key)
            if known is None or known.mod_revision != v.mod_revision:
                self._event(WatchEvent("put", v.key, v.value, v.mod_revision), v)

    def _event(self, event: WatchEvent, versioned: Versioned | None = None) -> None:
        self._events([(event, versioned)])

    def _events(self, events: Sequence[tuple[WatchEvent, Versioned | None]]) -> None:
        """Apply the events of one etcd revision: one write, or a transaction's several keys.

        The views take them in etcd's order. A finished move writes the partition state, then
        the topic's replicas cut to the target (`_write_all`), so every broker sees the new
        leader and ISR while the replicas still hold both. The controller takes the topic
        events first: it must plan the partition with the replicas the revision leaves, or an
        unclean election picks a replica the cut removes. What it plans from the cut replicas
        and the partition's state before the revision is addressed to that state's
        mod_revision, and loses its compare-and-swap.
        """
        feeds = [feed for feed in map(self._view_event, events) if feed is not None]
        for key, feed in sorted(feeds, key=lambda f: f[0].kind == cs.KeyKind.PARTITION):
            try:
                writes = feed()
            except Exception:
                log.exception("the controller failed on the etcd event of %r", key)
                continue
            self._submit(writes)

    def _view_event(
        self, item: tuple[WatchEvent, Versioned | None]
    ) -> tuple[cs.ParsedKey, _Feed] | None:
        """Apply an event to the views; returns its key and what to tell the controller."""
        event, versioned = item
        if event.key == CLUSTER_ID_KEY:
            return None
        if event.kind == "put":
            self._versions[event.key] = versioned or Versioned(
                event.key, event.value, event.mod_revision, 0, 0
            )
        else:
            self._versions.pop(event.key, None)
        try:
            parsed = cs.parse_key(event.key)
            feed = self._apply(parsed, event)
        except cs.ClusterStateError as exc:
            log.error("ignoring etcd key %r: %s", event.key, exc)
            return None
        except Exception:
            log.exception("applying etcd event %s %r failed", event.kind, event.key)
            return None
        return parsed, feed

    def _apply(self, key: cs.ParsedKey, event: WatchEvent) -> _Feed:
        put = event.kind == "put"
        if key.kind == cs.KeyKind.BROKER:
            if put:
                reg = cs.BrokerRegistration.from_bytes(event.value)
                self.view.brokers[reg.node_id] = reg
                self.fetcher.broker_changed()
                # The registration's mod revision tells a restart from a re-read (Kafka's
                # broker epoch): a bounced broker leaves the ISR like a dead one.
                return lambda: self.controller.broker_registered(reg, event.mod_revision)
            self.view.brokers.pop(key.node_id, None)
            return lambda: self.controller.broker_expired(key.node_id)
        if key.kind == cs.KeyKind.CONTROLLER:
            info = cs.ControllerInfo.from_bytes(event.value) if put else None
            self.view.controller_id = info.node_id if info is not None else -1
            return list
        if key.kind == cs.KeyKind.TOPIC:
            return self._topic_event(key.topic, event)
        if key.kind == cs.KeyKind.PARTITION:
            return self._partition_event(key.topic, key.partition, event)
        if key.kind == cs.KeyKind.ACL:
            self._acl_event(key.parts[0], event.value if put else None)
        if key.kind == cs.KeyKind.SCRAM:
            self._scram_event("/".join(key.parts), event.value if put else None)
        if key.kind == cs.KeyKind.BROKER_CONFIGS:
            self._broker_configs_event(key.parts[0], event.value if put else None)
        if key.kind == cs.KeyKind.CLIENT_QUOTAS:
            self._client_quota_event(key.parts[0], event.value if put else None)
        return list

    def _topic_event(self, name: str, event: WatchEvent) -> _Feed:
        if event.kind == "delete":
            self.view.topics.pop(name, None)
            for tp in [tp for tp in self.view.partitions if tp.topic == name]:
                del self.view.partitions[tp]
                self.fetcher.unfollow(tp)
                self.leadership_listener(tp, False)
            self.replicas.remove_topic(name)
            return lambda: self.controller.topic_deleted(name)
        assignment = cs.TopicAssignment.from_bytes(event.value)
        self.view.topics[name] = assignment
        self.replicas.apply_topic(
            name, assignment.topic_id, assignment.replicas, assignment.configs, assignment.internal
        )
        # Partitions reassigned away from this broker (or strays left from before): stop
        # replicating them, then delete their logs, as Kafka's StopReplica(delete) does.
        for tp in self.replicas.unassigned(name, assignment.replicas):
            self.fetcher.unfollow(tp)
            self.leadership_listener(tp, False)
            self.replicas.drop_replica(tp)
            self.wake([tp])
        for p in range(assignment.partitions):
            self._apply_partition(TopicPartition(name, p))
        return lambda: self.controller.topic_changed(assignment, event.mod_revision)

    def _partition_event(self, topic: str, partition: int, event: WatchEvent) -> _Feed:
        tp = TopicPartition(topic, partition)
        state = cs.PartitionState.from_bytes(event.value) if event.kind == "put" else None
        if state is None:
            self.view.partitions.pop(tp, None)
        else:
            self.view.partitions[tp] = state
            self._apply_partition(tp)
        return lambda: self.controller.partition_changed(
            topic, partition, state, event.mod_revision
        )

    def _apply_partition(self, tp: TopicPartition) -> None:
        """Hand etcd's state of `tp` to the replica manager if this broker is a replica."""
        assignment = self.view.topics.get(tp.topic)
        state = self.view.partitions.get(tp)
        key = cs.key_for_partition(tp.topic, tp.partition).encode()
        versioned = self._versions.get(key)
        if assignment is None or state is None or versioned is None:
            return
        if tp.partition >= assignment.partitions:
            return
        replicas = assignment.replicas[tp.partition]
        if self.node_id not in replicas:
            return
        leader = state.leader
        if leader == self.node_id and versioned.mod_revision < self.registered_revision:
            # Written for this broker's previous incarnation: leading under that epoch would
            # serve what the dead incarnation wrote and never replicated (a coordinator's
            # unreplicated records, say) until the controller, which saw the old registration
            # expire, moves the partition (Kafka fences a restarted broker likewise). Wait for
            # its new state, but not forever: a controller that missed the restart leaves it.
            waited = time.monotonic() - self._registered_at
            if waited < self.session_s * 2:
                with contextlib.suppress(RuntimeError):  # no loop: a later change re-applies
                    asyncio.get_running_loop().call_later(
                        self.session_s * 2 - waited + 0.1, self._apply_partition, tp
                    )
                leader = -1
        view = ReplicaView(
            leader,
            state.leader_epoch,
            state.isr,
            state.partition_epoch,
            replicas,
            versioned.mod_revision,
        )
        change = self.replicas.apply_partition_state(tp, view)
        replica = self.replicas.replicas_by_tp.get(tp)
        if replica is None:
            return
        if change == Change.BECAME_FOLLOWER:
            self.fetcher.follow(replica)
        elif change in (Change.BECAME_LEADER, Change.STOPPED):
            self.fetcher.unfollow(tp)
        if change in (Change.BECAME_LEADER, Change.STOPPED, Change.BECAME_FOLLOWER):
            self.leadership_listener(tp, change == Change.BECAME_LEADER)
            self.wake([tp])  # waiting produce/fetch requests see the new role

    def _address_of(self, node_id: int) -> tuple[str, int] | None:
        reg = self.view.brokers.get(node_id)
        return None if reg is None else (reg.host, reg.port)

    # -- 3. the controller ------------------------------------------------------------------

    async def _campaign(self) -> None:
        assert self.store is not None
        while True:
            lease = self.lease
            if lease is None or lease.lost.is_set():
                await asyncio.sleep(RETRY_S)
                continue
            try:
                held = await self.store.campaign(
                    b"controller", cs.ControllerInfo(self.node_id).to_bytes(), lease
                )
            except (LeaseLost, EtcdError) as exc:
                log.debug("controller campaign: %s", exc)
                await asyncio.sleep(RETRY_S)
                continue
            log.info("broker %d is the controller (epoch %d)", self.node_id, held.create_revision)
            self._submit(self.controller.became_controller(_now_ms()))
            try:
                await self._lead(held, lease)
            finally:
                self.controller.lost_controller()
                log.info("broker %d is no longer the controller", self.node_id)

    async def _lead(self, held: Versioned, lease: Lease) -> None:
        """Act as controller until the lease is lost or the controller key is not ours."""
        seen = False
        while not lease.lost.is_set():
            current = self._versions.get(b"controller")
            if current is not None:
                if current.create_revision not in (0, held.create_revision):
                    return
                seen = True
            elif seen:
                return  # deleted: our lease expired in etcd's eyes
            self._recompute.clear()
            if await event_or_timeout(self._recompute, 1.0):
                self._submit(self.controller.became_controller(_now_ms()))
            else:
                self._submit(self.controller.tick(_now_ms()))

    def _submit(self, writes: list[PartitionWrite]) -> None:
        if writes:
            asyncio.get_running_loop().create_task(self._write_all(writes))

    async def _write_all(self, writes: list[PartitionWrite]) -> None:
        assert self.store is not None
        for w in writes:
            key = cs.key_for_partition(w.topic, w.partition).encode()
            try:
                if w.topic_update is None:
                    done: object = await self.store.compare_and_swap(
                        key, w.expected_mod_revision, w.new_state.to_bytes()
                    )
                else:
                    # A finished reassignment: the partition state first, so every broker
                    # sees the new leader and ISR before the replicas are cut.
                    written = await self.store.compare_and_swap_all(
                        [
                            (key, w.expected_mod_revision, w.new_state.to_bytes()),
                            (
                                cs.key_for_topic(w.topic).encode(),
                                w.topic_mod_revision,
                                w.topic_update.to_bytes(),
                            ),
                        ]
                    )
                    done = True if written else None
            except EtcdError as exc:
                log.warning("controller: writing %s failed (%s); recomputing", w.tp, exc)
                self._recompute.set()
                continue
            if done is None:
                if w.topic_update is not None:
                    # Most often the move has just ended: the controller planned its end
                    # again (on another event) before the first write came back.
                    log.debug("controller: ending the move of %s: not written", w.tp)
                else:
                    log.info(
                        "controller: %s changed meanwhile; recomputing from the new state", w.tp
                    )
            else:
                log.info("controller: %s -> %s (%s)", w.tp, w.new_state, w.reason)

    # -- 4. ISR changes by the leader --------------------------------------------------------

    def propose_isr(self, replica: Partition, isr: frozenset[int]) -> None:
        """Write a leader's ISR change to etcd (compare-and-swap), then tell the replica
        manager the outcome (`isr_change_done`)."""
        asyncio.get_running_loop().create_task(self._write_isr(replica, isr))

    async def _write_isr(self, replica: Partition, isr: frozenset[int]) -> None:
        assert self.store is not None
        view = replica.view
        tp = replica.tp
        state = self.view.partitions.get(tp)
        if view is None or state is None or state.leader_epoch != view.leader_epoch:
            self.replicas.isr_change_done(tp, None)
            return
        # Only registered brokers join (KIP-841): one whose session expired may still be
        # fetching, and adding it would only have the controller drop it again.
        ordered = [
            r for r in view.replicas if r in isr and (r == self.node_id or r in self.view.brokers)
        ]
        # An uncleanly elected leader (KIP-704 RECOVERING) has nothing more to recover: its
        # producer state and transaction index are rebuilt from its own log, so its first
        # ISR change also ends the recovery and lets the ISR grow again.
        new = isr_change(state, ordered, self.node_id, view.replicas, recovered=True)
        if isinstance(new, KafkaError) or new == state:
            self.replicas.isr_change_done(tp, None)
            return
        key = cs.key_for_partition(tp.topic, tp.partition).encode()
        try:
            done = await self.store.compare_and_swap(key, view.mod_revision, new.to_bytes())
        except EtcdError as exc:
            log.warning("%s: ISR change to %s not written: %s", tp, ordered, exc)
            done = None
        if done is None:
            self.replicas.isr_change_done(tp, None)
            return
        log.info("%s: ISR %s -> %s", tp, list(state.isr), list(new.isr))
        known = self._versions.get(key)
        if known is not None and known.mod_revision > done.mod_revision:
            # The watch already brought a newer state (say, the controller dropped a dead
            # follower right after our write): that one stands, ours is history.
            self.replicas.isr_change_done(tp, None)
            return
        self._versions[key] = done
        self.view.partitions[tp] = new
        self.replicas.isr_change_done(
            tp,
            ReplicaView(
                new.leader,
                new.leader_epoch,
                new.isr,
                new.partition_epoch,
                view.replicas,
                done.mod_revision,
            ),
        )
        self.wake([tp])

    # -- 5. session and periodic work --------------------------------------------------------

    async def _housekeeping(self) -> None:
        lag_ms = self.config.get_int("replica.lag.time.max.ms")
        interval = max(0.1, min(lag_ms / 2000, 1.0))
        while True:
            await asyncio.sleep(interval)
            try:
                self.replicas.maybe_shrink_isr()
                if self.lease is not None and self.lease.lost.is_set():
                    await self._register_again()
            except EtcdError as exc:
                log.warning("etcd: %s", exc)
            except Exception:
                log.exception("cluster housekeeping failed")

    async def _register_again(self) -> None:
        log.warning("broker %d lost its etcd session; registering again", self.node_id)
        await self._register(wait_s=self.session_s * 2 + 5)
        log.info("broker %d registered again", self.node_id)

    # -- 6. producer id blocks ---------------------------------------------------------------

    async def _producer_ids(self) -> None:
        assert self.store is not None
        pool = self.replicas.producer_ids
        key = cs.key_for_producer_ids().encode()
        while True:
            if not getattr(pool, "wants_block", False):
                await asyncio.sleep(0.2)
                continue
            try:
                current = await self.store.get(key)
                block, value = next_block(current.value if current else None)
                done = await self.store.compare_and_swap(
                    key, current.mod_revision if current else 0, value
                )
            except EtcdError as exc:
                log.warning("reserving producer ids: %s", exc)
                await asyncio.sleep(RETRY_S)
                continue
            if done is not None:
                pool.add_block(block.first, block.size)  # type: ignore[union-attr]
                log.info("reserved producer ids %d..%d", block.first, block.first + block.size - 1)

    # -- ClusterOps: writes handlers ask for ----------------------------------------------

    def create_topic(
        self,
        name: str,
        replicas: tuple[tuple[int, ...], ...],
        configs: Mapping[str, str],
        internal: bool,
    ) -> PendingOp:
        assignment = cs.TopicAssignment(name, uuid.uuid4(), replicas, dict(configs), internal)
        op = PendingOp(key=("create-topic", name))

        async def run() -> None:
            assert self.store is not None
            key = cs.key_for_topic(name).encode()
            try:
                made = await self.store.compare_and_swap(key, 0, assignment.to_bytes())
                if made is None:
                    op.finish(TopicAlreadyExists(f"Topic '{name}' already exists."))
                else:
                    # As Kafka's answer waits for the metadata cache: the client's next
                    # request to this broker (Metadata, CreatePartitions) finds the topic.
                    await self._seen(key, made.mod_revision)
                    await self._states_seen(name, len(replicas))
                    op.finish(None)
            except EtcdError as exc:
                op.finish(UnknownServerError(f"etcd did not take the topic: {exc}"))
            self.wake([op.key])

        asyncio.get_running_loop().create_task(run())
        return op

    def verify_transaction(
        self, transactional_id: str, producer_id: int, epoch: int, partitions: list[TopicPartition]
    ) -> PendingOp:
        return self.verifier.verify(transactional_id, producer_id, epoch, partitions)

    def random_placement(self) -> tuple[int, int]:
        """Kafka draws the round robin's start and shift at random per topic."""
        n = max(1, len(self.view.brokers))
        return random.randrange(n), random.randrange(n)


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


def _no_leadership_listener(_tp: TopicPartition, _leader: bool) -> None:
    pass
