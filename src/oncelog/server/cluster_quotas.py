"""Client quotas of a cluster, in etcd (AlterClientQuotas).

One key per entity, `client_quotas/<entity>`, holding `{"entity": [[type, name], ...],
"quotas": {key: value}}`; an entity left without quotas is deleted. Every broker applies them
from its watch to the `ClientQuotas` its requests are checked against, so a quota holds on
every broker; as in Kafka, each broker counts the rates of the requests it serves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping, Sequence

from oncelog.broker.cluster_view import PendingOp
from oncelog.broker.quotas import ClientQuotas, Entity, entity_from_json, entity_key, entity_to_json
from oncelog.errors import UnknownServerError
from oncelog.metadata import cluster_state as cs
from oncelog.server.cluster_scram import put_latest
from oncelog.server.etcd import EtcdError, EtcdStore


class ClusterQuotaOps:
    """The client quota half of a clustered broker (mixed into `ClusterRuntime`)."""

    store: EtcdStore | None
    wake: Callable[[Sequence[Hashable]], None]
    _quota_entities: dict[str, tuple[Entity, dict[str, float]]]
    #: The broker context's quotas, once attached (the watch may run before).
    _client_quotas: ClientQuotas | None = None

    def attach_client_quotas(self, quotas: ClientQuotas) -> None:
        """Keep `quotas` (the broker context's) up to date with etcd from now on."""
        self._client_quotas = quotas
        quotas.replace_all(dict(self._known_quotas().values()))

    def _known_quotas(self) -> dict[str, tuple[Entity, dict[str, float]]]:
        if not hasattr(self, "_quota_entities"):
            self._quota_entities = {}
        return self._quota_entities

    def write_client_quotas(self, changes: Mapping[Entity, Mapping[str, float]]) -> PendingOp:
        """Put (or delete, when left empty) each entity's quotas; when done, this broker
        enforces them (every other broker's watch follows)."""
        op = PendingOp(key=("client-quotas", id(changes)))

        async def run() -> None:
            assert self.store is not None
            try:
                for entity, values in changes.items():
                    key = cs.key_for_client_quota(entity_key(entity)).encode()
                    if values:
                        value = {"entity": entity_to_json(entity), "quotas": dict(values)}
                        await put_latest(self.store, key, cs.dump_object(value))
                    else:
                        await self.store.delete(key)
            except EtcdError as exc:
                op.finish(UnknownServerError(f"etcd did not take the quotas: {exc}"))
            else:
                for entity, values in changes.items():
                    self._set_quota(cs.key_for_client_quota(entity_key(entity)), entity, values)
                op.finish(None)
            self.wake([op.key])

        asyncio.get_running_loop().create_task(run())
        return op

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
            quotas = obj.get("quotas")
            if not isinstance(quotas, dict):
                raise ValueError("no quotas")
            values = {str(k): float(v) for k, v in quotas.items()}
        except (ValueError, TypeError) as exc:
            raise cs.ClusterStateError(f"client quota {key}: {exc}") from None
        self._set_quota(full_key, entity, values)

    def _set_quota(self, key: str, entity: Entity, values: Mapping[str, float]) -> None:
        known = self._known_quotas()
        if values:
            known[key] = (entity, dict(values))
        else:
            known.pop(key, None)
        if self._client_quotas is not None:
            self._client_quotas.set_entity(entity, values)
