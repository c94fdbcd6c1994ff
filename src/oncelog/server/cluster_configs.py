"""Topic configs and dynamic broker configs of a cluster, in etcd (AlterConfigs).

A topic's overrides live in its assignment (`topics/<name>`): an alteration rewrites that
value by compare-and-swap on the revision it was computed from, recomputing from the value
that won when a concurrent change (CreatePartitions, another AlterConfigs) got there first,
so no change is lost. Dynamic broker configs live in `broker_configs/default` (the cluster
default) and `broker_configs/<id>` (one broker's own), changed the same way; an empty set
deletes the key. Every broker applies both from its watch (`ReplicaManager.apply_topic`,
`ReplicaManager.set_broker_configs`); the answer waits until this broker's watch has the
write, so a DescribeConfigs sent next to the same broker sees it.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import replace
from typing import Any

from oncelog.broker.cluster_view import PendingOp
from oncelog.broker.replica_manager import ReplicaManager
from oncelog.errors import UnknownServerError, UnknownTopicOrPartition
from oncelog.metadata import cluster_state as cs
from oncelog.server.cluster_admin import topic_key
from oncelog.server.etcd import EtcdStore

log = logging.getLogger(__name__)

#: How often a lost CAS is recomputed from the value that won before giving up.
ATTEMPTS = 5
_ids = itertools.count()

ConfigChange = Callable[[Mapping[str, str]], dict[str, str]]


class ClusterConfigOps:
    """The config half of a clustered broker (mixed into `ClusterRuntime`)."""

    store: EtcdStore | None
    node_id: int
    replicas: ReplicaManager

    # ClusterAdminOps's, which comes first in ClusterRuntime's bases.
    def _spawn(self, op: PendingOp, work: Callable[[], Coroutine[Any, Any, None]]) -> PendingOp:
        raise NotImplementedError

    async def _seen(self, key: bytes, revision: int, present: bool = True) -> bool:
        raise NotImplementedError

    def alter_topic_configs(
        self, name: str, change: ConfigChange, validate_only: bool = False
    ) -> PendingOp:
        """Rewrite `name`'s overrides to `change(current)` (which validates, raising the
        KafkaError to answer); read from etcd, so a topic just created through another
        broker is found."""
        op = PendingOp(key=("alter-topic-configs", name, next(_ids)))
        key = topic_key(name)

        async def work() -> None:
            assert self.store is not None
            for _ in range(ATTEMPTS):
                known = await self.store.get(key)
                if known is None:
                    raise UnknownTopicOrPartition(f"Topic {name} does not exist")
                old = cs.TopicAssignment.from_bytes(known.value)
                new = replace(old, configs=change(old.configs))
                if validate_only:
                    return
                done = await self.store.compare_and_swap(key, known.mod_revision, new.to_bytes())
                if done is not None:
                    log.info("topic %s: configs %s (etcd)", name, dict(new.configs))
                    await self._seen(key, done.mod_revision)
                    return
            raise UnknownServerError(f"topic {name} kept changing; configs not altered")

        return self._spawn(op, work)

    def alter_broker_configs(self, entity: str, change: ConfigChange) -> PendingOp:
        """Set the dynamic configs of `entity` ("" the default, else a broker id) to
        `change(current)`."""
        op = PendingOp(key=("alter-broker-configs", entity, next(_ids)))
        key = cs.key_for_broker_configs(entity).encode()

        def rewrite(value: bytes | None) -> bytes | None:
            new = change(cs.broker_configs_from_bytes(value) if value is not None else {})
            return cs.broker_configs_to_bytes(new) if new else None

        async def work() -> None:
            await self._rewrite(key, rewrite, "broker configs")
            log.info("dynamic broker configs %r altered (etcd)", entity or "<default>")

        return self._spawn(op, work)

    async def _rewrite(
        self, key: bytes, rewrite: Callable[[bytes | None], bytes | None], what: str
    ) -> None:
        """Set `key` to `rewrite(its value now)` by compare-and-swap (None: delete it, or
        leave it absent), recomputed from the value that won when another write got there
        first; done once this broker's watch has the result."""
        assert self.store is not None
        for _ in range(ATTEMPTS):
            known = await self.store.get(key)
            new = rewrite(known.value if known is not None else None)
            revision = known.mod_revision if known is not None else 0
            if new is None:
                if known is None:
                    return
                if await self.store.delete(key, expected_mod_revision=revision):
                    await self._seen(key, 0, present=False)
                    return
                continue
            done = await self.store.compare_and_swap(key, revision, new)
            if done is not None:
                await self._seen(key, done.mod_revision)
                return
        raise UnknownServerError(f"{what} kept changing; not altered")

    def _broker_configs_event(self, entity: str, value: bytes | None) -> None:
        """The watch saw `broker_configs/<entity>` change: apply it if it concerns us."""
        name = "" if entity == "default" else entity
        if name not in ("", str(self.node_id)):
            return
        configs = cs.broker_configs_from_bytes(value) if value is not None else {}
        self.replicas.set_broker_configs(name, configs)
