"""SCRAM credentials in etcd: one key per user and mechanism (`scram/<user>/<mechanism>`,
the user in url-safe base64), watched by every broker.

AlterUserScramCredentials puts or deletes the keys; the broker that wrote them applies the
change to its own credentials once etcd confirms, so the next login there sees it; every other
broker applies it from its watch a moment later (Kafka's brokers from the metadata log).
Only salted credentials are stored, never a password.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Sequence

from oncelog.broker.cluster_view import PendingOp
from oncelog.errors import UnknownServerError
from oncelog.metadata import cluster_state as cs
from oncelog.security.credentials import Change, ScramCredentials
from oncelog.security.scram import MECHANISMS, ScramCredential
from oncelog.server.etcd import EtcdError, EtcdStore


class ClusterScramOps:
    """The SCRAM half of a clustered broker (mixed into `ClusterRuntime`)."""

    store: EtcdStore | None
    wake: Callable[[Sequence[Hashable]], None]
    #: What the SASL listeners check logins against; the server hands in its own.
    scram: ScramCredentials = ScramCredentials()
    _scram_keys: dict[str, tuple[str, str]]

    def write_scram(self, changes: Sequence[Change]) -> PendingOp:
        op = PendingOp(key=("scram", id(changes)))

        async def run() -> None:
            assert self.store is not None
            try:
                for change in changes:
                    key = cs.key_for_scram(change.user, change.mechanism).encode()
                    if change.credential is None:
                        await self.store.delete(key)
                    else:
                        value = {
                            "name": change.user,
                            "mechanism": change.mechanism,
                            **change.credential.to_json(),
                        }
                        await _put(self.store, key, cs.dump_object(value))
            except EtcdError as exc:
                op.finish(UnknownServerError(f"etcd did not take the credentials: {exc}"))
            else:
                for change in changes:
                    _apply(self.scram, change.user, change.mechanism, change.credential)
                op.finish(None)
            self.wake([op.key])

        asyncio.get_running_loop().create_task(run())
        return op

    def _scram_event(self, key: str, value: bytes | None) -> None:
        """A put (value) or delete (None) of `scram/...` seen by the watch."""
        if not hasattr(self, "_scram_keys"):
            self._scram_keys = {}
        if value is None:
            gone = self._scram_keys.pop(key, None)
            if gone is not None:
                self.scram.remove(*gone)
            return
        obj = cs.load_object(value, f"SCRAM credential {key}")
        name, mechanism = obj.get("name"), obj.get("mechanism")
        if not isinstance(name, str) or mechanism not in MECHANISMS:
            raise cs.ClusterStateError(f"SCRAM credential {key}: no name or mechanism")
        try:
            credential = ScramCredential.from_json(obj)
        except ValueError as exc:
            raise cs.ClusterStateError(f"SCRAM credential {key}: {exc}") from None
        self._scram_keys[key] = (name, str(mechanism))
        self.scram.put(name, str(mechanism), credential)


def _apply(
    credentials: ScramCredentials, user: str, mechanism: str, credential: ScramCredential | None
) -> None:
    if credential is None:
        credentials.remove(user, mechanism)
    else:
        credentials.put(user, mechanism, credential)


async def _put(store: EtcdStore, key: bytes, value: bytes) -> None:
    """Put whatever the key holds now (etcd's plain put, as compare-and-swap on the revision
    just read; a concurrent writer makes it read again)."""
    for _ in range(5):
        current = await store.get(key)
        expected = current.mod_revision if current is not None else 0
        if await store.compare_and_swap(key, expected, value) is not None:
            return
    raise EtcdError(f"{key.decode()} kept changing")
