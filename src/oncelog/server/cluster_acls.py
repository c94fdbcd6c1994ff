"""ACL bindings in etcd: one key per binding (`acls/<digest>`), watched by every broker.

CreateAcls puts the keys of its bindings (an existing one is left as it is, so creating an ACL
twice is a no-op, as in Kafka); DeleteAcls deletes them. The broker that wrote them updates its
own authorizer as soon as etcd confirms, so the client that created an ACL is authorized by the
next request it sends there; every other broker (and this one again, harmlessly) applies the
change from its watch, a moment later, as Kafka's brokers do from the metadata log.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Hashable, Sequence

from oncelog.broker.cluster_view import PendingOp
from oncelog.errors import UnknownServerError
from oncelog.metadata import cluster_state as cs
from oncelog.security.acl import AclBinding
from oncelog.security.authorizer import Authorizer
from oncelog.server.etcd import EtcdError, EtcdStore

log = logging.getLogger(__name__)
_writes = itertools.count()


class ClusterAclOps:
    """The ACL half of a clustered broker (mixed into `ClusterRuntime`)."""

    store: EtcdStore | None
    wake: Callable[[Sequence[Hashable]], None]
    #: Set by the server before the watch starts; None when authorization is off (the keys
    #: are then ignored).
    authorizer: Authorizer | None = None
    _acl_keys: dict[str, AclBinding]

    def write_acls(
        self, create: Sequence[AclBinding], delete: Sequence[AclBinding]
    ) -> PendingOp:
        op = PendingOp(key=("acls", next(_writes)))

        async def run() -> None:
            assert self.store is not None
            try:
                for binding in create:
                    key = cs.key_for_acl(binding.key()).encode()
                    await self.store.create(key, cs.dump_object(binding.to_json()))
                for binding in delete:
                    await self.store.delete(cs.key_for_acl(binding.key()).encode())
            except EtcdError as exc:
                op.finish(UnknownServerError(f"etcd did not take the ACLs: {exc}"))
            else:
                if self.authorizer is not None:
                    for binding in create:
                        self.authorizer.acls.add(binding)
                    for binding in delete:
                        self.authorizer.acls.remove(binding)
                op.finish(None)
            self.wake([op.key])

        asyncio.get_running_loop().create_task(run())
        return op

    def _acl_event(self, acl_id: str, value: bytes | None) -> None:
        """A put (value) or delete (None) of `acls/<acl_id>` seen by the watch."""
        if not hasattr(self, "_acl_keys"):
            self._acl_keys = {}
        if value is None:
            gone = self._acl_keys.pop(acl_id, None)
            if gone is not None and self.authorizer is not None:
                self.authorizer.acls.remove(gone)
            return
        obj = cs.load_object(value, f"ACL {acl_id}")
        obj.pop("version", None)
        try:
            binding = AclBinding.from_json(obj)
        except (KeyError, TypeError, ValueError) as exc:
            raise cs.ClusterStateError(f"ACL {acl_id}: {exc}") from None
        self._acl_keys[acl_id] = binding
        if self.authorizer is not None:
            self.authorizer.acls.add(binding)
