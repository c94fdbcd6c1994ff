"""Network partitions between local processes: a relay on every link, cut and healed on demand.

Why relays and not iptables: they need no root and no packet filter, so `oncelog verify run
--start-cluster N --faults partition` works on any laptop and in CI alike. Every broker
advertises the address of its own relay (`Network.ingress`), so clients and peers alike reach
it through the relay; every broker reaches etcd through a relay of its own
(`Network.etcd_link`). A relay tells peers from clients by the client id of the first request
on a connection: oncelog brokers call each other as `broker-N-<purpose>` (as Kafka's
`broker-N-fetcher-M`), anything else is a client. A cut link between two members (`"1"`,
`"2"`, ..., `"etcd"`) stalls: bytes already sent wait, new connections are held, nothing is
refused, as when packets are dropped; healing lets everything through again, late. Clients
are never cut, so a broker cut from its peers and etcd still serves them what it may.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import struct
import threading
from collections.abc import Iterable
from typing import Any

CLIENT = "client"
ETCD = "etcd"
_PEER = re.compile(rb"^broker-(\d+)-")
#: api key, api version, correlation id, client id length: the start of every request header.
_HEADER = struct.Struct(">ihhih")


def link(a: str, b: str) -> frozenset[str]:
    return frozenset((a, b))


class Network:
    """Relays on one event loop thread, and the set of links currently cut."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="netproxy", daemon=True)
        self._thread.start()
        self._cut: set[frozenset[str]] = set()
        self._healed: asyncio.Event | None = None
        self._relays: list[Relay] = []

    # -- links -------------------------------------------------------------------------------

    def cut(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Stall these links (both directions) until `heal`."""
        self._call(self._cut.update, [link(a, b) for a, b in pairs])

    def heal(self) -> None:
        """Let every link through again; held bytes and connections go on."""

        def heal() -> None:
            self._cut.clear()
            if self._healed is not None:
                self._healed.set()
                self._healed = None

        self._call(heal)

    @property
    def cut_links(self) -> set[frozenset[str]]:
        return set(self._cut)

    async def wait_open(self, a: str, b: str) -> None:
        while link(a, b) in self._cut:
            if self._healed is None:
                self._healed = asyncio.Event()
            await self._healed.wait()

    # -- relays ------------------------------------------------------------------------------

    def ingress(self, member: str) -> Relay:
        """The relay in front of a broker: peers are told apart from clients."""
        return self._add(Relay(self, member, source=None))

    def etcd_link(self, member: str) -> Relay:
        """The relay a broker reaches etcd through: every connection on it comes from `member`."""
        return self._add(Relay(self, ETCD, source=member))

    def _add(self, relay: Relay) -> Relay:
        self._call(relay.listen)
        self._relays.append(relay)
        return relay

    def close(self) -> None:
        if self._loop.is_closed():
            return
        for relay in self._relays:
            self._call(relay.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        with contextlib.suppress(RuntimeError):
            self._loop.close()

    def _call(self, fn: Any, *args: Any) -> Any:
        """Run `fn(*args)` on the relays' loop and wait for it (a coroutine function too)."""

        async def run() -> Any:
            result = fn(*args)
            return (await result) if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)


class Relay:
    """A TCP relay on 127.0.0.1 to one member (`target` is set once the member has a port)."""

    def __init__(self, network: Network, member: str, source: str | None) -> None:
        self.network = network
        self.member = member
        self.source = source
        self.target: tuple[str, int] | None = None
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def listen(self) -> None:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self._server = await asyncio.start_server(self._accepted, sock=sock)

    def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        upstream: asyncio.StreamWriter | None = None
        try:
            first, source = await self._identify(reader)
            await self.network.wait_open(source, self.member)
            if self.target is None:
                return
            up_reader, upstream = await asyncio.open_connection(*self.target)
            upstream.write(first)
            await asyncio.gather(
                self._pump(reader, upstream, source), self._pump(up_reader, writer, source)
            )
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            for w in (writer, upstream):
                if w is not None:
                    w.close()
            self._tasks.discard(task)

    async def _identify(self, reader: asyncio.StreamReader) -> tuple[bytes, str]:
        """Who opened this connection: the relay's fixed source, a peer broker, or a client."""
        if self.source is not None:
            return b"", self.source
        head = await reader.readexactly(_HEADER.size)
        size, _, _, _, id_len = _HEADER.unpack(head)
        if not 0 < id_len <= min(255, size - _HEADER.size + 4):
            return head, CLIENT
        client_id = await reader.readexactly(id_len)
        match = _PEER.match(client_id)
        return head + client_id, match.group(1).decode() if match else CLIENT

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, source: str
    ) -> None:
        """Copy one direction; while the link is cut, hold the bytes (read or not yet read)."""
        try:
            while True:
                await self.network.wait_open(source, self.member)
                data = await reader.read(1 << 16)
                if not data:
                    break
                await self.network.wait_open(source, self.member)
                writer.write(data)
                await writer.drain()
        finally:
            if writer.can_write_eof():
                with contextlib.suppress(OSError):
                    writer.write_eof()
