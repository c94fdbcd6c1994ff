"""The etcd IO adapter: the only oncelog code that talks to etcd.

The cluster code (broker registration, the controller, the metadata it publishes) sees bytes
keys, revisions and leases, never aetcd or gRPC: the client library can be swapped and what
happens when etcd is away is decided here, once.

Model. Every key lives under the target's prefix (`/oncelog` unless `etcd.connect` names
one), stored as `<prefix>/<key>`; callers pass and get keys without it, so clusters can share
an etcd. Values are opaque bytes. Writes are transactions on the key's `mod_revision` (the
store revision of its last write; 0 = absent), so a writer that read a stale value loses
instead of overwriting; only `delete` without an expected revision is unconditional. Keys
that must vanish with their owner (a live broker, the controller) are put under a `Lease`,
kept alive by the store; when the owner dies etcd deletes them after the TTL. An election
creates one key under the candidate's lease if it is absent; its `create_revision` grows
with every election and is the controller epoch.

etcd away. Every call has a deadline (the store's default or `timeout_s`) and raises
`EtcdUnavailable` once it passes or the connection is refused: a stopped, paused or
partitioned etcd never hangs a caller. A lease reports trouble on its own: `Lease.lost` is
set once etcd says the lease is gone or has not confirmed it for longer than its TTL; the
owner must then assume its keys are gone. A watch raises `WatchLost` when its stream breaks,
and the caller re-lists. With several endpoints, a call that finds one unavailable moves the
store to the next for later calls; it is not retried (a timed-out write may have happened).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import aetcd
import aetcd.rpc
import aetcd.transactions as txn
import aetcd.utils

from oncelog.config import parse_port
from oncelog.errors import InvalidConfig

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/oncelog"
DEFAULT_TIMEOUT_S = 5.0
_USAGE = "expected HOST:PORT[,HOST:PORT...][/prefix]"
# gRPC pings a quiet connection so a watch on a paused or partitioned etcd breaks (WatchLost,
# in about 15 s) instead of waiting forever; the ping timeout, not only the keepalive one,
# bounds the wait, and etcd refuses pings closer than 5 s apart. Reconnecting backs off to
# 2 s at most (gRPC's default is 120 s), so calls work soon after etcd is back.
_GRPC_OPTIONS = {
    "grpc.keepalive_time_ms": 10_000,
    "grpc.keepalive_timeout_ms": 5_000,
    "grpc.http2.ping_timeout_ms": 5_000,
    "grpc.http2.max_pings_without_data": 0,
    "grpc.initial_reconnect_backoff_ms": 200,
    "grpc.max_reconnect_backoff_ms": 2_000,
}
T = TypeVar("T")


class EtcdError(Exception):
    """etcd refused a request for a reason other than the ones below."""


class EtcdUnavailable(EtcdError):
    """etcd could not be reached or did not answer within the call's timeout."""


class LeaseLost(EtcdError):
    """A write or campaign named a lease that etcd no longer knows (expired or revoked)."""


class WatchLost(EtcdError):
    """A watch may have missed events (stream broken, start revision compacted): re-list."""


@dataclass(frozen=True)
class EtcdTarget:
    endpoints: tuple[tuple[str, int], ...]
    prefix: str = DEFAULT_PREFIX


def _parse_endpoint(entry: str, value: str) -> tuple[str, int]:
    if entry.startswith("["):  # [IPv6]:PORT
        host, sep, rest = entry[1:].partition("]")
        ok, port = bool(sep) and rest.startswith(":"), rest[1:]
    else:
        host, sep, port = entry.rpartition(":")
        ok = bool(sep) and ":" not in host
    if not ok or not host or any(c.isspace() for c in host) or not port.isdigit():
        raise ValueError(f"etcd.connect: {_USAGE}, got {value!r}")
    try:
        return host, parse_port(port, repr(value), lowest=1)
    except InvalidConfig as exc:
        raise ValueError(f"etcd.connect: {exc}") from None


def parse_etcd_connect(value: str) -> EtcdTarget:
    """`etcd.connect`, like ZooKeeper's `zookeeper.connect` with its chroot."""
    hosts, slash, path = value.strip().partition("/")
    prefix = DEFAULT_PREFIX
    if slash:
        prefix = "/" + path
        if not path or "//" in prefix or prefix.endswith("/") or any(c.isspace() for c in path):
            raise ValueError(f"etcd.connect: bad prefix {prefix!r} in {value!r}, {_USAGE}")
    endpoints = tuple(_parse_endpoint(e.strip(), value) for e in hosts.split(","))
    return EtcdTarget(endpoints, prefix)


@dataclass(frozen=True)
class Versioned:
    key: bytes  # without the store's prefix
    value: bytes
    mod_revision: int
    create_revision: int
    lease: int  # 0: none


@dataclass(frozen=True)
class WatchEvent:
    kind: Literal["put", "delete"]
    key: bytes
    value: bytes  # empty for a delete
    mod_revision: int  # for a delete, the revision of the deletion


class Lease:
    """A granted lease, refreshed every TTL/3 by a background task until revoked or lost.

    `lost` is set once the lease can no longer be relied on: etcd answered a keep-alive with
    "expired/unknown", or no keep-alive has been confirmed for a whole TTL, or the lease was
    revoked or its store closed. It never becomes usable again; grant a new one.
    """

    def __init__(self, store: EtcdStore, lease_id: int, ttl_s: int) -> None:
        self.id = lease_id
        self.ttl_s = ttl_s
        self.lost = asyncio.Event()
        self._store = store
        self._task = asyncio.create_task(self._keep_alive(), name=f"etcd lease {lease_id:x}")

    async def _keep_alive(self) -> None:
        period = self.ttl_s / 3
        confirmed = time.monotonic()
        try:
            while not self.lost.is_set():  # set by `_stop`, should its cancellation be lost
                sent = time.monotonic()
                try:
                    ttl = await self._store._refresh(self.id, period)
                except EtcdError as e:
                    if time.monotonic() - confirmed >= self.ttl_s:
                        log.warning("etcd lease %x lost: unconfirmed for %ds (%s)", self.id,
                                    self.ttl_s, e)  # fmt: skip
                        return
                else:
                    if ttl <= 0:
                        log.warning("etcd lease %x lost: expired", self.id)
                        return
                    confirmed = sent
                await asyncio.sleep(max(0.0, sent + period - time.monotonic()))
        except Exception:
            log.exception("etcd lease %x: keep-alive failed", self.id)
        finally:
            self.lost.set()
            self._store._leases.discard(self)

    async def _stop(self) -> None:
        self.lost.set()
        self._task.cancel()
        # Waits for the task without taking its CancelledError for our own: a cancellation of
        # the caller meanwhile still reaches the caller.
        await asyncio.wait([self._task])

    async def revoke(self, timeout_s: float | None = None) -> None:
        """Stop refreshing and delete the lease with its keys now (no-op if already gone)."""
        await self._stop()
        self._store._leases.discard(self)
        with contextlib.suppress(LeaseLost):
            await self._store._call("revoke", lambda c: c.revoke_lease(self.id), timeout_s)


class EtcdStore:
    """Keys, CAS, leases, watches and elections under one prefix; see the module docstring."""

    def __init__(self, target: EtcdTarget, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self._root = target.prefix.encode() + b"/"
        self._index = 0
        self._client: Any = self._new_client()
        self._leases: set[Lease] = set()
        self._closing: set[asyncio.Task[None]] = set()

    @classmethod
    async def connect(cls, target: EtcdTarget, timeout_s: float = DEFAULT_TIMEOUT_S) -> EtcdStore:
        """A store whose etcd answered a read; EtcdUnavailable if no endpoint did."""
        store = cls(target, timeout_s)
        for attempt in range(len(target.endpoints)):
            try:
                await store._call("connect", lambda c: c.get(store._root))
                return store
            except EtcdUnavailable:
                if attempt == len(target.endpoints) - 1:
                    await store.close()
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Stop the keep-alives (leases then expire on their own) and the connection."""
        for lease in list(self._leases):
            await lease._stop()
        self._leases.clear()
        await self._client.close()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)

    @property
    def endpoint(self) -> str:
        host, port = self.target.endpoints[self._index]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def _new_client(self) -> Any:
        host, port = self.target.endpoints[self._index]
        host = f"[{host}]" if ":" in host else host
        return aetcd.Client(host=host, port=port, options=_GRPC_OPTIONS)

    def _failover(self, client: Any) -> None:
        """Move later calls to the next endpoint, unless another call already did."""
        if len(self.target.endpoints) == 1 or client is not self._client:
            return
        self._index = (self._index + 1) % len(self.target.endpoints)
        self._client = self._new_client()
        task = asyncio.create_task(client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    def _error(self, what: str, e: BaseException) -> EtcdError:
        code = e.__cause__.code() if isinstance(e.__cause__, aetcd.rpc.AioRpcError) else None
        if isinstance(e, aetcd.rpc.AioRpcError):
            code = e.code()
        codes = aetcd.rpc.StatusCode  # CANCELLED: the channel was closed by a failover
        unavailable = (codes.UNAVAILABLE, codes.DEADLINE_EXCEEDED, codes.CANCELLED)
        if code in unavailable or isinstance(e, (aetcd.ConnectionFailedError, TimeoutError)):
            return EtcdUnavailable(f"etcd {what} at {self.endpoint}: unavailable ({e})")
        if "lease not found" in str(e):
            return LeaseLost(f"etcd {what}: {e}")
        return EtcdError(f"etcd {what} at {self.endpoint}: {e}")

    async def _call(
        self, what: str, op: Callable[[Any], Awaitable[T]], timeout_s: float | None = None
    ) -> T:
        timeout = self.timeout_s if timeout_s is None else timeout_s
        client = self._client
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation
            # that arrives as the call completes, and a revoke then waited on a keep-alive
            # task that went on refreshing.
            async with asyncio.timeout(timeout):
                return await op(client)
        except TimeoutError as e:
            self._failover(client)
            raise EtcdUnavailable(
                f"etcd {what} at {self.endpoint}: no answer within {timeout:g} s"
            ) from e
        except (aetcd.ClientError, aetcd.rpc.AioRpcError) as e:
            error = self._error(what, e)
            if isinstance(error, EtcdUnavailable):
                self._failover(client)
            raise error from e

    def _versioned(self, kv: Any) -> Versioned:
        key = bytes(kv.key)
        return Versioned(key[len(self._root) :], bytes(kv.value), int(kv.mod_revision),
                         int(kv.create_revision), int(kv.lease))  # fmt: skip

    async def _refresh(self, lease_id: int, timeout_s: float) -> int:
        reply = await self._call("keep-alive", lambda c: c.refresh_lease(lease_id), timeout_s)
        if reply is None:
            raise EtcdUnavailable(f"etcd keep-alive at {self.endpoint}: no reply")
        return int(reply.TTL)

    async def _txn(
        self, what: str, compare: list[Any], success: list[Any], failure: list[Any],
        timeout_s: float | None,
    ) -> tuple[bool, list[Any]]:  # fmt: skip
        ok, responses = await self._call(
            what, lambda c: c.transaction(compare, success, failure), timeout_s
        )
        return bool(ok), list(responses)

    async def get(self, key: bytes, *, timeout_s: float | None = None) -> Versioned | None:
        kv = await self._call("get", lambda c: c.get(self._root + key), timeout_s)
        return None if kv is None else self._versioned(kv)

    async def get_prefix(
        self, prefix: bytes, *, timeout_s: float | None = None
    ) -> tuple[list[Versioned], int]:
        """The keys under `prefix` in key order, and the store revision of this read."""
        got = await self._call("get", lambda c: c.get_prefix(self._root + prefix), timeout_s)
        return [self._versioned(kv) for kv in got.kvs], int(got.header.revision)

    async def create(
        self, key: bytes, value: bytes, *, lease: Lease | None = None,
        timeout_s: float | None = None,
    ) -> bool:  # fmt: skip
        """Put `key` only if it does not exist; False if it does."""
        full, lease_id = self._root + key, lease.id if lease else 0
        ok, _ = await self._txn("create", [txn.Create(full) == 0],
                                [txn.Put(full, value, lease_id)], [], timeout_s)  # fmt: skip
        return ok

    async def compare_and_swap(
        self, key: bytes, expected_mod_revision: int, value: bytes, *,
        lease: Lease | None = None, timeout_s: float | None = None,
    ) -> Versioned | None:  # fmt: skip
        """Put `key` if its mod_revision is still `expected_mod_revision` (0: must not exist).

        The new Versioned on success, None when the key had changed. Like any etcd put, it
        binds the key to `lease`, or to none when `lease` is None.
        """
        full, lease_id = self._root + key, lease.id if lease else 0
        ok, responses = await self._txn(
            "compare-and-swap", [txn.Mod(full) == expected_mod_revision],
            [txn.Put(full, value, lease_id), txn.Get(full)], [], timeout_s,
        )  # fmt: skip
        return self._versioned(responses[1][0][1]) if ok else None

    async def compare_and_swap_all(
        self, items: list[tuple[bytes, int, bytes]], *, timeout_s: float | None = None
    ) -> bool:
        """Put every (key, value) in one transaction if each key's mod_revision is still
        the one given (0: must not exist); False, and nothing written, otherwise."""
        full = [(self._root + key, revision, value) for key, revision, value in items]
        ok, _ = await self._txn(
            "compare-and-swap",
            [txn.Mod(key) == revision for key, revision, _ in full],
            [txn.Put(key, value, 0) for key, _, value in full],
            [],
            timeout_s,
        )
        return ok

    async def delete(
        self, key: bytes, *, expected_mod_revision: int | None = None,
        timeout_s: float | None = None,
    ) -> bool:  # fmt: skip
        """Delete `key` (only at `expected_mod_revision` if given); True if it was deleted."""
        full = self._root + key
        if expected_mod_revision is None:
            gone = await self._call("delete", lambda c: c.delete(full), timeout_s)
            return gone is not None
        return await self._delete_if("delete", txn.Mod(full) == expected_mod_revision, full,
                                     timeout_s)  # fmt: skip

    async def delete_tree(
        self, key: bytes, expected_mod_revision: int, prefix: bytes, *,
        timeout_s: float | None = None,
    ) -> bool:  # fmt: skip
        """Delete `key` and every key under `prefix` in one transaction, if `key` is still
        at `expected_mod_revision`; False if it was not (a topic and its partitions)."""
        full, under = self._root + key, self._root + prefix
        ok, _ = await self._txn(
            "delete tree", [txn.Mod(full) == expected_mod_revision],
            [txn.Delete(full), txn.Delete(under, aetcd.utils.prefix_range_end(under))], [],
            timeout_s,
        )  # fmt: skip
        return ok

    async def _delete_if(self, what: str, compare: Any, full: bytes, t: float | None) -> bool:
        ok, responses = await self._txn(what, [compare], [txn.Delete(full)], [], t)
        return ok and int(responses[0].response_delete_range.deleted) > 0

    async def grant_lease(self, ttl_s: int, *, timeout_s: float | None = None) -> Lease:
        """A lease of `ttl_s` seconds (etcd may raise it to its minimum), kept alive."""
        granted = await self._call("grant lease", lambda c: c.lease(ttl_s), timeout_s)
        lease = Lease(self, int(granted.id), int(granted.ttl))
        self._leases.add(lease)
        return lease

    async def watch_prefix(
        self, prefix: bytes, start_revision: int, *, timeout_s: float | None = None
    ) -> AsyncGenerator[WatchEvent, None]:
        """Every put and delete under `prefix` from `start_revision` on, in revision order.

        Never silently loses events: when they may have been missed (the stream broke, etcd
        restarted, `start_revision` is compacted) it raises WatchLost, and the caller re-lists
        with `get_prefix` and watches again from its revision + 1. EtcdUnavailable if the
        watch cannot be created within the timeout. Never ends by itself; close it with
        `contextlib.aclosing` (or `aclose()`) to release the stream at once.
        """
        revisions = self.watch_prefix_revisions(prefix, start_revision, timeout_s=timeout_s)
        async with contextlib.aclosing(revisions):
            async for events in revisions:
                for event in events:
                    yield event

    async def watch_prefix_revisions(
        self, prefix: bytes, start_revision: int, *, timeout_s: float | None = None
    ) -> AsyncGenerator[list[WatchEvent], None]:
        """As `watch_prefix`, one revision at a time: the events of one write together, in
        the order of its operations (a transaction's several keys share one revision).

        etcd never splits a revision's events over watch responses (unless a watch asks
        for `fragment`, which this one does not), so a list is always a whole revision.
        """
        full = self._root + prefix
        events = self._watch(full, aetcd.utils.prefix_range_end(full), start_revision, timeout_s)
        async with contextlib.aclosing(events):
            async for changes in events:
                yield changes

    async def _watch(
        self, key: bytes, range_end: bytes, start_revision: int, timeout_s: float | None
    ) -> AsyncGenerator[list[WatchEvent], None]:
        # One gRPC stream per watch rather than aetcd's shared Watcher, which drops a stream
        # that ends cleanly without telling its watches.
        client = self._client
        await client.connect()
        create = aetcd.rpc.WatchCreateRequest(
            key=key, range_end=range_end, start_revision=start_revision
        )

        async def requests() -> AsyncIterator[Any]:
            yield aetcd.rpc.WatchRequest(create_request=create)
            await asyncio.Event().wait()  # keep the stream open until it is cancelled

        call = aetcd.rpc.WatchStub(client.channel).Watch(requests(), metadata=client.metadata)
        responses = call.__aiter__()
        try:  # the first answer within the timeout: EtcdUnavailable; later breaks: WatchLost
            response = await self._call("watch", lambda _: responses.__anext__(), timeout_s)
            while True:
                if response.compact_revision or response.canceled:
                    raise WatchLost(f"etcd watch of {key!r} from {start_revision}: canceled, "
                                    f"compacted at {response.compact_revision} "
                                    f"({response.cancel_reason})")  # fmt: skip
                changes: list[WatchEvent] = []  # of one revision (a delete's is its own)
                for ev in response.events:
                    kind: Literal["put", "delete"] = (
                        "delete" if ev.type == aetcd.rpc.Event.DELETE else "put"
                    )
                    event = WatchEvent(kind, bytes(ev.kv.key)[len(self._root) :],
                                       bytes(ev.kv.value), int(ev.kv.mod_revision))  # fmt: skip
                    if changes and changes[-1].mod_revision != event.mod_revision:
                        yield changes
                        changes = []
                    changes.append(event)
                if changes:
                    yield changes
                response = await responses.__anext__()
        except StopAsyncIteration:
            raise WatchLost(f"etcd watch of {key!r}: the stream ended") from None
        except aetcd.rpc.AioRpcError as e:
            raise WatchLost(f"etcd watch of {key!r}: {e.details()}") from e
        finally:
            call.cancel()

    async def campaign(
        self, key: bytes, value: bytes, lease: Lease, *, timeout_s: float | None = None
    ) -> Versioned:
        """Become the holder of `key`: create it under `lease`, or wait until it is deleted.

        Returns our Versioned; its `create_revision` is the epoch, larger at every election.
        Waits as long as another holder has the key; raises LeaseLost if `lease` is lost
        meanwhile and EtcdUnavailable if etcd does not answer (`timeout_s` is per call).
        """
        full = self._root + key
        while True:
            if lease.lost.is_set():
                raise LeaseLost(f"etcd campaign for {key!r}: lease {lease.id:x} lost")
            ok, responses = await self._txn(
                "campaign", [txn.Create(full) == 0],
                [txn.Put(full, value, lease.id), txn.Get(full)], [txn.Get(full)], timeout_s,
            )  # fmt: skip
            found = responses[-1]
            if not found:
                continue
            holder = found[0][1]
            if ok or int(holder.lease) == lease.id:  # ours, perhaps from a timed-out attempt
                return self._versioned(holder)
            watch = self._wait_deleted(full, int(holder.header.revision) + 1, timeout_s)
            waits = [asyncio.ensure_future(watch), asyncio.ensure_future(lease.lost.wait())]
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in waits:
                    task.cancel()
                await asyncio.gather(*waits, return_exceptions=True)
            if waits[0].done() and not waits[0].cancelled():
                with contextlib.suppress(WatchLost):  # re-read and try again
                    waits[0].result()

    async def _wait_deleted(self, full: bytes, revision: int, timeout_s: float | None) -> None:
        events = self._watch(full, b"", revision, timeout_s)
        async with contextlib.aclosing(events):
            async for changes in events:
                if any(event.kind == "delete" for event in changes):
                    return

    async def resign(
        self, key: bytes, versioned: Versioned, *, timeout_s: float | None = None
    ) -> bool:
        """Delete `key` if it is still the one `campaign` created; False if it was not."""
        full = self._root + key
        compare = txn.Create(full) == versioned.create_revision
        return await self._delete_if("resign", compare, full, timeout_s)
