"""Client quotas of a cluster, in etcd (AlterClientQuotas).

One key per entity, `client_quotas/<entity>`, holding `{"entity": [[type, name], ...],
"quotas": {key: value}}`; an entity left without quotas is deleted. Every broker applies them
from its watch to the `ClientQuotas` its requests are checked against, so a quota holds on
every broker; as in Kafka, each broker counts the rates of the requests it serves.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from oncelog.broker.cluster_view import PendingOp
from oncelog.broker.quotas import (
    ClientQuotas,
    Entity,
    QuotaOp,
    entity_from_json,
    entity_key,
    entity_text,
    entity_to_json,
)
from oncelog.metadata import cluster_state as cs
from oncelog.server.etcd import EtcdStore

_ids = itertools.count()


class ClusterQuotaOps:
    """The client quota half of a clustered broker (mixed into `ClusterRuntime`)."""

    store: EtcdStore | None
    _quota_entities: dict[str, tuple[Entity, dict[str, float]]]
    #: The broker context's quotas, once attached (the watch may run before).
    _client_quotas: ClientQuotas | None = None

    # ClusterAdminOps's, which comes first in ClusterRuntime's bases.
    def _spawn(self, op: PendingOp, work: Callable[[], Coroutine[Any, Any, None]]) -> PendingOp:
        raise NotImplementedError

    # ClusterConfigOps's.
    async def _rewrite(
        self, key: bytes, rewrite: Callable[[bytes | None], bytes | None], what: str
    ) -> None:
        raise NotImplementedError

    def attach_client_quotas(self, quotas: ClientQuotas) -> None:
        """Keep `quotas` (the broker context's) up to date with etcd from now on."""
        self._client_quotas = quotas
        quotas.replace_all(dict(self._known_quotas().values()))

    def _known_quotas(self) -> dict[str, tuple[Entity, dict[str, float]]]:
        if not hasattr(self, "_quota_entities"):
            self._quota_entities = {}
        return self._quota_entities

    def write_client_quotas(self, changes: Mapping[Entity, Sequence[QuotaOp]]) -> PendingOp:
        """Apply each entity's ops (set a value, or remove with None) to what etcd holds now,
        by compare-and-swap, so concurrent changes of other keys are kept (Kafka's controller
        applies each op to its current state); an entity left empty is deleted. Done once
        this broker's watch has the writes: from then on it enforces them."""
        op = PendingOp(key=("client-quotas", next(_ids)))

        async def work() -> None:
            for entity, ops in changes.items():
                await self._write_quota(entity, ops)

        return self._spawn(op, work)

    async def _write_quota(self, entity: Entity, ops: Sequence[QuotaOp]) -> None:
        key = cs.key_for_client_quota(entity_key(entity)).encode()

        def rewrite(value: bytes | None) -> bytes | None:
            values = _stored_values(key.decode(), value) if value is not None else {}
            for name, new in ops:
                if new is None:
                    values.pop(name, None)
                else:
                    values[name] = new
            if not values:
                return None
            return cs.dump_object({"entity": entity_to_json(entity), "quotas": values})

        await self._rewrite(key, rewrite, f"the quotas of {entity_text(entity)}")

    def _client_quota_event(self, key: str, value: bytes | None) -> None:
        """A put (value) or delete (None) of `client_quotas/...` seen by the watch."""
        full_key = f"client_quotas/{key}"
        if value is None:
            known = self._known_quotas().get(full_key)
            if known is not None:
                self._set_quota(full_key, known[0], {})
            return
        obj = cs.load_object(value, f"client quota {key}")
        try:
            entity = entity_from_json(obj.get("entity"))
        except ValueError as exc:
            raise cs.ClusterStateError(f"client quota {key}: {exc}") from None
        self._set_quota(full_key, entity, _stored_values(key, value))

    def _set_quota(self, key: str, entity: Entity, values: Mapping[str, float]) -> None:
        known = self._known_quotas()
        if values:
            known[key] = (entity, dict(values))
        else:
            known.pop(key, None)
        if self._client_quotas is not None:
            self._client_quotas.set_entity(entity, values)


def _stored_values(key: str, value: bytes) -> dict[str, float]:
    """The quotas of a stored `client_quotas/...` value."""
    quotas = cs.load_object(value, f"client quota {key}").get("quotas")
    try:
        if not isinstance(quotas, dict):
            raise ValueError("no quotas")
        return {str(k): float(v) for k, v in quotas.items()}
    except (ValueError, TypeError) as exc:
        raise cs.ClusterStateError(f"client quota {key}: {exc}") from None
