"""oncelog.server.etcd against real etcd processes (Debian's etcd 3.4; scripts/test installs it).

Each test runs one coroutine under asyncio.run with a deadline; the process-level faults
(SIGSTOP, restart) go through tests.etcd_server.EtcdServer, which signals only its own pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

import aetcd
import pytest

from oncelog.server.etcd import (
    EtcdStore,
    EtcdTarget,
    EtcdUnavailable,
    LeaseLost,
    Versioned,
    WatchEvent,
    WatchLost,
    parse_etcd_connect,
)
from tests.etcd_server import EtcdServer, _free_port, etcd_server

__all__ = ["etcd_server"]  # the fixture, used by name

T = TypeVar("T")


def run(coro: Coroutine[Any, Any, T], deadline_s: float = 45) -> T:
    return asyncio.run(asyncio.wait_for(coro, deadline_s))


def target(server: EtcdServer, prefix: str = "/oncelog") -> EtcdTarget:
    return parse_etcd_connect(f"{server.endpoint}{prefix}")


async def eventually(check: Callable[[], Awaitable[bool]], within_s: float) -> float:
    """Seconds until `check()` held; fails after `within_s`."""
    start = time.monotonic()
    while not await check():
        assert time.monotonic() - start < within_s, f"not within {within_s} s"
        await asyncio.sleep(0.05)
    return time.monotonic() - start


# -- etcd.connect -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "endpoints", "prefix"),
    [
        ("127.0.0.1:2379", (("127.0.0.1", 2379),), "/oncelog"),
        ("a:1,b.example:2379/prod", (("a", 1), ("b.example", 2379)), "/prod"),
        (" h1:2379, h2:2380/x/y ", (("h1", 2379), ("h2", 2380)), "/x/y"),
        ("[::1]:2379/c1", (("::1", 2379),), "/c1"),
    ],
)
def test_parse_etcd_connect(
    value: str, endpoints: tuple[tuple[str, int], ...], prefix: str
) -> None:
    assert parse_etcd_connect(value) == EtcdTarget(endpoints, prefix)


@pytest.mark.parametrize(
    "value",
    ["", "host", "host:", ":2379", "host:port", "host:0", "host:65536", "a:1,,b:2", "a:1/",
     "a:1//x", "a:1/x/", "::1:2379", "[::1]2379", "a b:1", "a:1/x y"],
)  # fmt: skip
def test_parse_etcd_connect_rejects(value: str) -> None:
    with pytest.raises(ValueError, match=r"^etcd\.connect: ") as info:
        parse_etcd_connect(value)
    assert "\n" not in str(info.value)


# -- keys ---------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_create_and_compare_and_swap(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server))
        try:
            assert await store.get(b"k") is None
            assert await store.create(b"k", b"v1")
            assert not await store.create(b"k", b"other")
            v1 = await store.get(b"k")
            assert v1 is not None and (v1.key, v1.value, v1.lease) == (b"k", b"v1", 0)
            assert v1.create_revision == v1.mod_revision

            v2 = await store.compare_and_swap(b"k", v1.mod_revision, b"v2")
            assert v2 is not None and v2.value == b"v2" and v2.mod_revision > v1.mod_revision
            assert v2.create_revision == v1.create_revision
            assert await store.get(b"k") == v2
            # A writer that read v1 loses.
            assert await store.compare_and_swap(b"k", v1.mod_revision, b"stale") is None
            assert await store.compare_and_swap(b"k", 0, b"stale") is None
            assert (await store.get(b"k")) == v2
            # Expected 0: must not exist.
            new = await store.compare_and_swap(b"fresh", 0, b"x")
            assert new is not None and new.create_revision == new.mod_revision

            assert not await store.delete(b"k", expected_mod_revision=v1.mod_revision)
            assert await store.delete(b"k", expected_mod_revision=v2.mod_revision)
            assert await store.get(b"k") is None
            assert not await store.delete(b"k")
            assert await store.delete(b"fresh")
        finally:
            await store.close()

    run(main())


@pytest.mark.timeout(60)
def test_prefixes_are_isolated(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        a = await EtcdStore.connect(target(etcd_server, "/a"))
        a2 = await EtcdStore.connect(target(etcd_server, "/a2"))
        try:
            assert await a.create(b"brokers/1", b"a")
            assert await a2.create(b"brokers/1", b"a2")
            assert await a2.create(b"brokers/2", b"a2")
            items, revision = await a.get_prefix(b"")
            assert [(v.key, v.value) for v in items] == [(b"brokers/1", b"a")]
            items, revision2 = await a2.get_prefix(b"brokers/")
            assert [(v.key, v.value) for v in items] == [
                (b"brokers/1", b"a2"),
                (b"brokers/2", b"a2"),
            ]
            assert revision2 >= revision > 0
            assert await a.delete(b"brokers/1")
            assert (await a2.get(b"brokers/1")) is not None
        finally:
            await a.close()
            await a2.close()

    run(main())


# -- leases -------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_lease_expiry_deletes_the_key_once_the_owner_is_gone(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        owner = await EtcdStore.connect(target(etcd_server))
        other = await EtcdStore.connect(target(etcd_server))
        try:
            lease = await owner.grant_lease(2)
            assert await owner.create(b"brokers/1", b"alive", lease=lease)
            got = await other.get(b"brokers/1")
            assert got is not None and got.lease == lease.id
            await asyncio.sleep(3)  # longer than the TTL: the keep-alive holds it
            assert await other.get(b"brokers/1") is not None and not lease.lost.is_set()
            await owner.close()  # no revoke: the key goes when the TTL runs out
            assert lease.lost.is_set()
            took = await eventually(lambda: _absent(other, b"brokers/1"), within_s=5)
            assert took < 4
            # A write under the dead lease is refused.
            with pytest.raises(LeaseLost):
                await other.create(b"brokers/2", b"x", lease=lease)
        finally:
            await owner.close()
            await other.close()

    run(main())


async def _absent(store: EtcdStore, key: bytes) -> bool:
    return await store.get(key) is None


@pytest.mark.timeout(60)
def test_revoke_deletes_at_once(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server))
        try:
            lease = await store.grant_lease(30)
            assert await store.create(b"k", b"v", lease=lease)
            await lease.revoke()
            assert lease.lost.is_set()
            assert await store.get(b"k") is None
            await lease.revoke()  # already gone: fine
        finally:
            await store.close()

    run(main())


@pytest.mark.timeout(60)
def test_lease_lost_when_etcd_is_paused_longer_than_the_ttl(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server), timeout_s=1)
        try:
            lease = await store.grant_lease(2)
            etcd_server.pause()
            try:
                took = await eventually(_is_set(lease.lost), within_s=6)
            finally:
                etcd_server.resume()
            # Not before the TTL since the last confirmed keep-alive (at most TTL/3 before the
            # pause), at most one keep-alive period after it.
            assert 1.2 < took < 3.5
        finally:
            await store.close()

    run(main())


def _is_set(event: asyncio.Event) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return event.is_set()

    return check


@pytest.mark.timeout(60)
def test_calls_time_out_while_etcd_is_paused_and_work_after(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server), timeout_s=1)
        try:
            assert await store.create(b"k", b"v")
            etcd_server.pause()
            try:
                for call in (store.get(b"k"), store.create(b"k2", b"v"), store.get_prefix(b"")):
                    start = time.monotonic()
                    with pytest.raises(EtcdUnavailable, match="no answer within 1 s"):
                        await call
                    assert time.monotonic() - start < 2
                with pytest.raises(EtcdUnavailable):
                    await store.get(b"k", timeout_s=0.3)
            finally:
                etcd_server.resume()
            got = await store.get(b"k", timeout_s=10)
            assert got is not None and got.value == b"v"
        finally:
            await store.close()

    run(main())


@pytest.mark.timeout(60)
def test_calls_work_again_soon_after_a_long_outage(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server), timeout_s=1)
        try:
            assert await store.create(b"k", b"v")
            etcd_server.stop()
            deadline = time.monotonic() + 12  # long enough for gRPC's backoff to grow
            while time.monotonic() < deadline:
                with pytest.raises(EtcdUnavailable):
                    await store.get(b"k")
                await asyncio.sleep(0.2)
            etcd_server.start()
            took = await eventually(lambda: _present(store, b"k"), within_s=10)
            assert took < 3.5
        finally:
            await store.close()

    run(main())


async def _present(store: EtcdStore, key: bytes) -> bool:
    with contextlib.suppress(EtcdUnavailable):
        return await store.get(key) is not None
    return False


@pytest.mark.timeout(30)
def test_connect_fails_fast_without_etcd_and_skips_a_dead_endpoint(
    etcd_server: EtcdServer,
) -> None:
    dead = f"127.0.0.1:{_free_port()}"

    async def main() -> None:
        start = time.monotonic()
        with pytest.raises(EtcdUnavailable):
            await EtcdStore.connect(parse_etcd_connect(dead), timeout_s=2)
        assert time.monotonic() - start < 3
        store = await EtcdStore.connect(parse_etcd_connect(f"{dead},{etcd_server.endpoint}"))
        try:
            assert store.endpoint == etcd_server.endpoint
            assert await store.create(b"k", b"v")
        finally:
            await store.close()

    run(main())


# -- watches ------------------------------------------------------------------------------


async def _collect(
    store: EtcdStore, prefix: bytes, start_revision: int, count: int
) -> list[WatchEvent]:
    got: list[WatchEvent] = []
    async with contextlib.aclosing(store.watch_prefix(prefix, start_revision)) as events:
        async for event in events:
            got.append(event)
            if len(got) == count:
                break
    return got


@pytest.mark.timeout(60)
def test_watch_delivers_puts_and_deletes_in_order_from_a_revision(
    etcd_server: EtcdServer,
) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server))
        try:
            assert await store.create(b"t/old", b"before")
            assert await store.create(b"elsewhere", b"not watched")
            _, revision = await store.get_prefix(b"t/")
            watcher = asyncio.create_task(_collect(store, b"t/", revision + 1, 5))
            await asyncio.sleep(0.2)
            a = await store.compare_and_swap(b"t/a", 0, b"1")
            assert a is not None
            a2 = await store.compare_and_swap(b"t/a", a.mod_revision, b"2")
            assert await store.create(b"u/x", b"other prefix")
            assert await store.delete(b"t/old")
            assert await store.create(b"t/b", b"3")
            assert await store.delete(b"t/a")
            got = await asyncio.wait_for(watcher, 10)
            assert [(e.kind, e.key, e.value) for e in got] == [
                ("put", b"t/a", b"1"),
                ("put", b"t/a", b"2"),
                ("delete", b"t/old", b""),
                ("put", b"t/b", b"3"),
                ("delete", b"t/a", b""),
            ]
            revisions = [e.mod_revision for e in got]
            assert revisions == sorted(revisions) and revisions[1] == a2.mod_revision  # type: ignore[union-attr]
            # History: a watch started earlier replays the same events.
            again = await asyncio.wait_for(_collect(store, b"t/", revision + 1, 5), 10)
            assert again == got
        finally:
            await store.close()

    run(main())


@pytest.mark.timeout(60)
def test_watch_lost_when_etcd_restarts_then_relist(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server))
        try:
            assert await store.create(b"t/a", b"1")
            _, revision = await store.get_prefix(b"t/")
            watcher = asyncio.create_task(_collect(store, b"t/", revision + 1, 1000))
            await asyncio.sleep(0.3)
            etcd_server.stop()
            with pytest.raises(WatchLost):
                await asyncio.wait_for(watcher, 10)
            etcd_server.start()
            items, _ = await store.get_prefix(b"t/", timeout_s=10)
            assert [v.value for v in items] == [b"1"]
        finally:
            await store.close()

    run(main())


@pytest.mark.timeout(60)
def test_watch_lost_when_etcd_is_paused(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server))
        try:
            watcher = asyncio.create_task(_collect(store, b"t/", 1, 1000))
            await asyncio.sleep(0.3)
            etcd_server.pause()
            try:
                start = time.monotonic()
                with pytest.raises(WatchLost):
                    await asyncio.wait_for(watcher, 25)  # gRPC keepalive: 10 s + 5 s
                assert time.monotonic() - start < 20
            finally:
                etcd_server.resume()
        finally:
            await store.close()

    run(main())


@pytest.mark.timeout(60)
def test_watch_lost_when_the_start_revision_is_compacted(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(target(etcd_server))
        host, port = etcd_server.endpoint.split(":")
        try:
            for i in range(5):
                assert await store.create(f"t/{i}".encode(), b"x")
            _, revision = await store.get_prefix(b"t/")
            async with aetcd.Client(host, int(port)) as admin:
                await admin.compact(revision)
            with pytest.raises(WatchLost, match="compacted"):
                await asyncio.wait_for(_collect(store, b"t/", 2, 1), 10)
        finally:
            await store.close()

    run(main())


# -- elections ----------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_campaign_second_wins_when_first_lease_is_revoked(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        one = await EtcdStore.connect(target(etcd_server))
        two = await EtcdStore.connect(target(etcd_server))
        try:
            lease1, lease2 = await one.grant_lease(10), await two.grant_lease(10)
            won1 = await one.campaign(b"controller", b"broker-1", lease1)
            assert (won1.value, won1.lease) == (b"broker-1", lease1.id)
            # Campaigning again with the same lease is a no-op.
            assert await one.campaign(b"controller", b"broker-1", lease1) == won1
            second = asyncio.create_task(two.campaign(b"controller", b"broker-2", lease2))
            await asyncio.sleep(1)
            assert not second.done()
            await lease1.revoke()
            won2: Versioned = await asyncio.wait_for(second, 10)
            assert (won2.value, won2.lease) == (b"broker-2", lease2.id)
            assert won2.create_revision > won1.create_revision
            assert not await one.resign(b"controller", won1)  # not ours any more
            assert await two.resign(b"controller", won2)
            assert await two.get(b"controller") is None
        finally:
            await one.close()
            await two.close()

    run(main())


@pytest.mark.timeout(60)
def test_campaign_gives_up_when_its_lease_is_lost(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        one = await EtcdStore.connect(target(etcd_server))
        two = await EtcdStore.connect(target(etcd_server))
        try:
            await one.campaign(b"controller", b"1", await one.grant_lease(10))
            lease2 = await two.grant_lease(10)
            waiting = asyncio.create_task(two.campaign(b"controller", b"2", lease2))
            await asyncio.sleep(0.5)
            await lease2.revoke()
            with pytest.raises(LeaseLost):
                await asyncio.wait_for(waiting, 5)
        finally:
            await one.close()
            await two.close()

    run(main())


# -- cancellation ---------------------------------------------------------------------------


def test_a_call_cancelled_as_it_completes_is_cancelled() -> None:
    """A task cancelled in the very step its etcd call completes stops. Python 3.11's
    `asyncio.wait_for` returned the call's result instead, and a lease's keep-alive task went
    on refreshing: revoking the lease then waited for it (45 s in the test above, once in 3)."""

    async def main() -> None:
        store = EtcdStore(parse_etcd_connect("127.0.0.1:1"))  # never connected
        answer = asyncio.get_running_loop().create_future()

        async def op(_: object) -> int:
            return int(await answer)

        task = asyncio.create_task(store._call("test", op))
        await asyncio.sleep(0)  # the call waits for its answer
        answer.set_result(1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await store.close()

    run(main(), 10)
