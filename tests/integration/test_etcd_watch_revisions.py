"""`EtcdStore.watch_prefix_revisions` against a real etcd: one list per revision, so a
transaction's keys (a reassignment's end: the partition state and the topic) come together,
in the order of its operations, live and replayed from history alike."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from oncelog.server.etcd import EtcdStore, parse_etcd_connect
from tests.etcd_server import EtcdServer, etcd_server

__all__ = ["etcd_server"]  # the fixture, used by name


async def _collect(
    store: EtcdStore, start_revision: int, count: int
) -> list[list[tuple[str, bytes, int]]]:
    got: list[list[tuple[str, bytes, int]]] = []
    watch = store.watch_prefix_revisions(b"c/", start_revision)
    async with contextlib.aclosing(watch) as revisions:
        async for events in revisions:
            got.append([(e.kind, e.key, e.mod_revision) for e in events])
            if len(got) == count:
                break
    return got


@pytest.mark.timeout(60)
def test_a_transaction_is_one_revision_in_its_operations_order(etcd_server: EtcdServer) -> None:
    async def main() -> None:
        store = await EtcdStore.connect(parse_etcd_connect(f"{etcd_server.endpoint}/oncelog"))
        try:
            _, revision = await store.get_prefix(b"c/")
            live = asyncio.create_task(_collect(store, revision + 1, 4))
            await asyncio.sleep(0.2)
            topic = await store.compare_and_swap(b"c/topics/t", 0, b"t1")
            part = await store.compare_and_swap(b"c/partitions/t/0", 0, b"p1")
            assert topic is not None and part is not None
            assert await store.compare_and_swap_all(
                [
                    (b"c/partitions/t/0", part.mod_revision, b"p2"),
                    (b"c/topics/t", topic.mod_revision, b"t2"),
                ]
            )
            assert await store.delete_tree(b"c/topics/t", topic.mod_revision + 2, b"c/partitions/")
            got = await asyncio.wait_for(live, 10)
            end, gone = topic.mod_revision + 2, topic.mod_revision + 3
            assert got == [
                [("put", b"c/topics/t", topic.mod_revision)],
                [("put", b"c/partitions/t/0", part.mod_revision)],
                [("put", b"c/partitions/t/0", end), ("put", b"c/topics/t", end)],
                [("delete", b"c/topics/t", gone), ("delete", b"c/partitions/t/0", gone)],
            ]
            # From history etcd answers several revisions in one response: split all the same.
            again = await asyncio.wait_for(_collect(store, revision + 1, 4), 10)
            assert again == got
        finally:
            await store.close()

    asyncio.run(asyncio.wait_for(main(), 45))
