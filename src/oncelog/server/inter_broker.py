"""Requests from this broker to another one (replica fetches, OffsetForLeaderEpoch).

Brokers talk to each other with the Kafka protocol itself, so what a follower sends is
what any tool could send and see. One `BrokerChannel` per peer keeps one connection and
sends one request at a time (a follower's fetches to one leader are sequential anyway);
every call has a timeout, and any failure closes the connection so the next call opens a
new one: a peer that restarted or stopped answering is found out by the next request.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping
from functools import cache
from typing import Any

from kio.serial import entity_reader

from oncelog.protocol.codec import build, encode_entity, is_flexible, request_class, response_class
from oncelog.protocol.headers import API_VERSIONS_KEY

MAX_RESPONSE_BYTES = 256 * 1024 * 1024


@cache
def _response_reader(api_key: int, version: int) -> Any:
    return entity_reader(response_class(api_key, version))


class PeerUnavailable(Exception):
    """The peer cannot be reached, closed the connection or did not answer in time."""


class BrokerChannel:
    def __init__(
        self, node_id: int, host: str, port: int, timeout_s: float, client_id: str
    ) -> None:
        self.node_id = node_id
        #: Names the sending broker and its purpose, as Kafka's `broker-1-fetcher-0` does:
        #: the peer's logs (and fault-injecting proxies in tests) can tell who is calling.
        self.client_id = client_id.encode()
        self.host = host
        self.port = port
        self.timeout_s = timeout_s
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    def moved(self, host: str, port: int) -> bool:
        return (host, port) != (self.host, self.port)

    async def call(
        self, api_key: int, version: int, body: Mapping[str, Any], timeout_s: float | None = None
    ) -> Any:
        """Send one request and return the decoded response; PeerUnavailable on any failure."""
        async with self._lock:
            try:
                return await asyncio.wait_for(
                    self._call(api_key, version, body), timeout_s or self.timeout_s
                )
            except (OSError, EOFError, TimeoutError, asyncio.IncompleteReadError) as exc:
                self.close()
                raise PeerUnavailable(
                    f"broker {self.node_id} at {self.host}:{self.port}: {exc or type(exc).__name__}"
                ) from exc
            except Exception:
                self.close()
                raise

    async def _call(self, api_key: int, version: int, body: Mapping[str, Any]) -> Any:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        assert self._reader is not None
        self._correlation += 1
        flexible = is_flexible(api_key, version)
        client_id = self.client_id
        header = struct.pack(">hhih", api_key, version, self._correlation, len(client_id))
        header += client_id + (b"\x00" if flexible else b"")
        payload = header + encode_entity(build(request_class(api_key, version), body))
        self._writer.write(struct.pack(">i", len(payload)) + payload)
        await self._writer.drain()
        (size,) = struct.unpack(">i", await self._reader.readexactly(4))
        if not 4 <= size <= MAX_RESPONSE_BYTES:
            raise EOFError(f"response of {size} bytes")
        frame = await self._reader.readexactly(size)
        (correlation,) = struct.unpack_from(">i", frame, 0)
        if correlation != self._correlation:
            raise EOFError(f"correlation id {correlation}, expected {self._correlation}")
        pos = 4 + (1 if flexible and api_key != API_VERSIONS_KEY else 0)
        entity, _ = _response_reader(api_key, version)(frame, pos)
        return entity

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
