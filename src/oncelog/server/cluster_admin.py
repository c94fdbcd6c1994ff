"""The etcd writes behind the cluster's admin requests (topics, partitions, elections).

`ClusterRuntime` inherits these; handlers reach them through `broker.cluster_view.ClusterOps`.
Each returns at once with a `PendingOp` the handler waits on (a `Delayed` woken by the op's
key); the write runs as a task of the broker's loop and wakes that key when done.

1. DeleteTopics: the topic key and every key under `partitions/<name>/` go in ONE etcd
   transaction, guarded by the topic key's mod revision (a topic deleted and created again
   meanwhile is not deleted by mistake). The topic key is deleted first within it, so every
   watcher sees the topic vanish before its partitions and no controller recreates a
   partition state of a topic that is going away. Each broker's watch removes its logs.
2. CreatePartitions: `Controller.add_partitions` grows the assignment (Kafka's placement);
   it is written to `topics/<name>` by CAS on the revision it was computed from. A CAS lost
   to a concurrent change is recomputed from the new assignment (which may then say
   INVALID_PARTITIONS, as Kafka would). The controller creates the new partition states.
3. ElectLeaders: only the active controller answers; `Controller.elect_leaders` gives the
   writes and the per-partition refusals; each write is a CAS, a lost CAS is recomputed from
   the state that won (ELECTION_NOT_NEEDED if someone else elected the same leader). The
   answer waits until this broker's view has the written state.
4. AlterPartitionReassignments: `Controller.reassign` gives the topic's new assignment (the
   moving partitions' replicas become target plus original, the move is recorded with the
   topic) and the per-partition refusals; it is written to `topics/<name>` by CAS, and a
   lost CAS is recomputed. The controller ends each move once its targets are in the ISR.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Coroutine, Hashable, Iterable, Mapping, Sequence
from typing import Any

from oncelog.broker.cluster_view import ClusterView, PendingOp
from oncelog.errors import (
    InvalidReplicaAssignment,
    InvalidRequest,
    KafkaError,
    NotController,
    RequestTimedOut,
    UnknownServerError,
    UnknownTopicOrPartition,
)
from oncelog.metadata import cluster_state as cs
from oncelog.metadata.controller import Controller, ControllerNotActive, PartitionWrite
from oncelog.server.etcd import EtcdError, EtcdStore, Versioned
from oncelog.types import TopicPartition

log = logging.getLogger(__name__)

#: How often a lost CAS is recomputed from the state that won before giving up.
ATTEMPTS = 5
#: How long an answer waits for this broker's watch to show a write it made.
VIEW_WAIT_S = 5.0
_POLL_S = 0.02
_ids = itertools.count()


async def delete_topic_keys(
    store: EtcdStore, name: str, topic_mod_revision: int, *, timeout_s: float | None = None
) -> bool:
    """Delete `topics/<name>` and everything under `partitions/<name>/` in one transaction,
    if the topic key is still at `topic_mod_revision`; False if it was not."""
    return await store.delete_tree(
        cs.key_for_topic(name).encode(),
        topic_mod_revision,
        cs.prefix_for_partitions(name).encode(),
        timeout_s=timeout_s,
    )


def topic_key(name: str) -> bytes:
    """etcd's key of topic `name`; UNKNOWN_TOPIC_OR_PARTITION for a name no topic can have
    (an admin request naming one is answered, not dropped)."""
    try:
        return cs.key_for_topic(name).encode()
    except cs.ClusterStateError:
        raise UnknownTopicOrPartition(f"Topic {name} does not exist.") from None


class ClusterAdminOps:
    """Admin operations of a clustered broker (mixed into `ClusterRuntime`)."""

    # Set by ClusterRuntime.__init__/start.
    store: EtcdStore | None
    view: ClusterView
    controller: Controller
    node_id: int
    wake: Callable[[Sequence[Hashable]], None]
    _versions: dict[bytes, Versioned]

    def _spawn(
        self, op: PendingOp, work: Callable[[], Coroutine[Any, Any, None]]
    ) -> PendingOp:
        """Run `work()` (a coroutine) for `op`; whatever happens, finish it and wake it."""

        async def run() -> None:
            try:
                await work()
            except KafkaError as exc:
                op.finish(exc)
            except EtcdError as exc:
                op.finish(UnknownServerError(f"etcd: {exc}"))
            except Exception as exc:
                log.exception("admin operation %s failed", op.key)
                op.finish(UnknownServerError(f"{type(exc).__name__}: {exc}"))
            if not op.done:
                op.finish(None)
            self.wake([op.key])

        asyncio.get_running_loop().create_task(run())
        return op

    async def _seen(self, key: bytes, revision: int, present: bool = True) -> bool:
        """Wait until this broker's watch has applied `key` at `revision` or later (or, with
        `present=False`, its deletion); False after VIEW_WAIT_S."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + VIEW_WAIT_S
        while loop.time() < deadline:
            known = self._versions.get(key)
            if present and known is not None and known.mod_revision >= revision:
                return True
            if not present and known is None:
                return True
            await asyncio.sleep(_POLL_S)
        return False

    # -- DeleteTopics ------------------------------------------------------------------------

    def delete_topic_atomically(self, name: str) -> PendingOp:
        """Delete the topic and its partition states in one etcd transaction."""
        op = PendingOp(key=("delete-topic", name, next(_ids)))
        key = topic_key(name)
        seen = self.view.topics.get(name)
        topic_id = seen.topic_id if seen is not None else None

        async def work() -> None:
            assert self.store is not None
            for _ in range(ATTEMPTS):
                known = await self.store.get(key)
                if known is None:
                    raise UnknownTopicOrPartition(f"Topic {name} does not exist")
                current_topic = cs.TopicAssignment.from_bytes(known.value)
                if current_topic.internal:
                    raise InvalidRequest(f"Topic {name} is internal and cannot be deleted")
                current = current_topic.topic_id
                if topic_id is not None and current != topic_id:
                    # Deleted and created again meanwhile: the topic asked for is gone.
                    raise UnknownTopicOrPartition(f"Topic {name} ({topic_id}) does not exist")
                if await delete_topic_keys(self.store, name, known.mod_revision):
                    log.info("deleted topic %s from etcd", name)
                    await self._seen(key, 0, present=False)
                    return
                # Changed between the read and the delete (CreatePartitions): again.
            raise UnknownServerError(f"topic {name} kept changing; not deleted")

        return self._spawn(op, work)

    # -- CreatePartitions --------------------------------------------------------------------

    def create_partitions(
        self,
        name: str,
        total: int,
        manual: Sequence[Sequence[int]] | None,
        validate_only: bool,
    ) -> PendingOp:
        """Grow `name` to `total` partitions; the op fails with Kafka's refusal. Checked
        against etcd's topic once this broker's view has it, not against whatever the watch
        delivered so far: a topic just created through another broker is there."""
        key = topic_key(name)
        op = PendingOp(key=("create-partitions", name, next(_ids)))

        async def work() -> None:
            assert self.store is not None
            await self._caught_up(name)
            if validate_only:
                self._grown(name, total, manual)
                return
            for _ in range(ATTEMPTS):
                grown, revision = self._grown(name, total, manual)
                done = await self.store.compare_and_swap(key, revision, grown.to_bytes())
                if done is not None:
                    log.info("topic %s: %d partitions (etcd)", name, grown.partitions)
                    await self._seen(key, done.mod_revision)
                    await self._states_seen(name, grown.partitions)
                    return
                await self._seen(key, revision + 1)  # a concurrent change: recompute from it
            raise UnknownServerError(f"topic {name} kept changing; partitions not added")

        return self._spawn(op, work)

    def _grown(
        self, name: str, total: int, manual: Sequence[Sequence[int]] | None
    ) -> tuple[cs.TopicAssignment, int]:
        if name not in self.controller.topics:  # (a name no topic can have included)
            raise UnknownTopicOrPartition(f"Topic {name} does not exist.")
        known = self._versions.get(cs.key_for_topic(name).encode())
        if known is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist.")
        try:
            return self.controller.add_partitions(name, total, manual), known.mod_revision
        except InvalidRequest as exc:
            # The placement checks say INVALID_REQUEST; Kafka's code for them is this one.
            raise InvalidReplicaAssignment(str(exc)) from None

    async def _caught_up(self, name: str) -> Versioned:
        """etcd's `topics/<name>`, once this broker's watch has applied it. An admin request
        must see what an acknowledged earlier one wrote, through whichever broker: the
        watch brings another broker's write a moment later (CreateTopics on broker 1, then
        CreatePartitions on broker 2 found no topic)."""
        assert self.store is not None
        key = topic_key(name)
        known = await self.store.get(key)
        if known is None:
            raise UnknownTopicOrPartition(f"Topic {name} does not exist.")
        if not await self._seen(key, known.mod_revision):
            raise RequestTimedOut(f"this broker's view of etcd did not reach topic {name} in time")
        return known

    async def _states_seen(self, name: str, partitions: int) -> None:
        """Wait (bounded) until every partition of `name` has a state in this broker's view,
        so a client that asks Metadata of this broker next finds the new partitions."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + VIEW_WAIT_S
        while loop.time() < deadline:
            if all(TopicPartition(name, p) in self.view.partitions for p in range(partitions)):
                return
            await asyncio.sleep(_POLL_S)

    # -- ElectLeaders ------------------------------------------------------------------------

    def elect_leaders(
        self, partitions: Iterable[TopicPartition] | None, preferred: bool
    ) -> tuple[dict[TopicPartition, KafkaError | None], PendingOp] | None:
        """Start the elections; None when this broker is not the active controller.

        The map holds each partition's outcome: an error at once, or None, later replaced
        by an error if its write does not happen. `partitions=None`: every partition.
        """
        if partitions is None:
            partitions = [
                TopicPartition(t.name, p)
                for t in self.controller.topics.values()
                for p in range(t.partitions)
            ]
        try:
            writes, results = self.controller.elect_leaders(list(partitions), preferred)
        except ControllerNotActive:
            return None
        op = PendingOp(key=("elect-leaders", next(_ids)))
        if not writes:
            op.finish(None)
            return results, op

        async def work() -> None:
            outcomes = await asyncio.gather(
                *(self._elect_one(w, preferred) for w in writes), return_exceptions=True
            )
            for w, outcome in zip(writes, outcomes, strict=True):
                if isinstance(outcome, KafkaError) or outcome is None:
                    results[w.tp] = outcome
                elif isinstance(outcome, EtcdError):
                    results[w.tp] = UnknownServerError(f"etcd: {outcome}")
                else:
                    results[w.tp] = UnknownServerError(str(outcome))

        return results, self._spawn(op, work)

    async def _elect_one(self, write: PartitionWrite, preferred: bool) -> KafkaError | None:
        assert self.store is not None
        key = cs.key_for_partition(write.topic, write.partition).encode()
        for _ in range(ATTEMPTS):
            done = await self.store.compare_and_swap(
                key, write.expected_mod_revision, write.new_state.to_bytes()
            )
            if done is not None:
                log.info("controller: %s -> %s (%s)", write.tp, write.new_state, write.reason)
                if not await self._seen(key, done.mod_revision):
                    return RequestTimedOut(f"the election of {write.tp} was not seen in time")
                return None
            # Lost to another write: recompute from the state that won, once it is here.
            await self._seen(key, write.expected_mod_revision + 1)
            try:
                again, errors = self.controller.elect_leaders([write.tp], preferred)
            except ControllerNotActive:
                return NotController("this broker stopped being the controller")
            if not again:
                return errors.get(write.tp)
            write = again[0]
        return UnknownServerError(f"{write.tp} kept changing; no election")

    # -- AlterPartitionReassignments ---------------------------------------------------------

    def reassign_partitions(
        self,
        name: str,
        targets: Mapping[int, Sequence[int] | None],
        allow_replication_factor_change: bool,
    ) -> tuple[dict[int, KafkaError | None], PendingOp]:
        """Start, replace or cancel (target None) the moves of `name`'s partitions: each
        partition's outcome (refusals at once; a write that fails later replaces the
        successes) and the op that writes the topic."""
        _, outcome = self.controller.reassign(
            name, targets, allow_replication_factor_change=allow_replication_factor_change
        )
        wanted = {p: t for p, t in targets.items() if outcome.get(p) is None}
        op = PendingOp(key=("reassign", name, next(_ids)))
        if not wanted:  # an unknown topic (or a name no topic can have) ends here
            op.finish(None)
            return outcome, op
        key = cs.key_for_topic(name).encode()

        async def work() -> None:
            assert self.store is not None
            for _ in range(ATTEMPTS):
                known = self._versions.get(key)
                if known is None:
                    raise UnknownTopicOrPartition(f"Topic {name} does not exist.")
                moved, again = self.controller.reassign(
                    name, wanted, allow_replication_factor_change=allow_replication_factor_change
                )
                outcome.update(again)
                if moved is None:
                    return
                done = await self.store.compare_and_swap(key, known.mod_revision, moved.to_bytes())
                if done is not None:
                    log.info("topic %s: reassigning %s (etcd)", name, dict(moved.reassignments))
                    await self._seen(key, done.mod_revision)
                    return
                await self._seen(key, known.mod_revision + 1)  # recompute from the change
            raise UnknownServerError(f"topic {name} kept changing; not reassigned")

        return outcome, self._spawn(op, work)
