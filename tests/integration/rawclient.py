"""A raw-socket Kafka client for feeding the broker bytes no real client would send.

Requests are built by hand (header) plus kio (bodies), so tests can cut, corrupt or pad any
part of a frame. Every socket operation has a timeout, so a broker that hangs fails the test
instead of blocking it.
"""

from __future__ import annotations

import datetime
import socket
import struct
from typing import Any

from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.produce.v9.request import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from kio.schema.types import BrokerId
from kio.serial import entity_reader
from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

from oncelog.protocol.codec import encode_entity, is_flexible, response_class

API_VERSIONS = 18
METADATA = 3
PRODUCE = 0
LIST_OFFSETS = 2
FETCH = 1

TIMEOUT = 10.0


class Closed(Exception):
    """The broker closed the connection before a whole response arrived."""


def header(
    api_key: int,
    version: int,
    correlation_id: int = 1,
    client_id: str | bytes | None = "raw",
    *,
    flexible: bool | None = None,
) -> bytes:
    """Request header v1, or v2 (with an empty tagged-field section) for flexible versions."""
    out = struct.pack(">hhi", api_key, version, correlation_id)
    if client_id is None:
        out += struct.pack(">h", -1)
    else:
        raw = client_id.encode() if isinstance(client_id, str) else client_id
        out += struct.pack(">h", len(raw)) + raw
    if flexible is None:
        try:
            flexible = is_flexible(api_key, version)
        except Exception:
            flexible = False
    return out + (b"\x00" if flexible else b"")


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request(api_key: int, version: int, body: bytes, correlation_id: int = 1) -> bytes:
    """A complete frame: length, header, body."""
    return frame(header(api_key, version, correlation_id) + body)


def api_versions_body() -> bytes:
    return encode_entity(
        ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    )


def metadata_body(topics: list[str] | None = None, *, auto_create: bool = False) -> bytes:
    entity = MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=auto_create,
        include_topic_authorized_operations=False,
    )
    return encode_entity(entity)


def produce_body(
    partitions: dict[str, list[tuple[int, bytes | None]]], acks: int = -1, timeout_ms: int = 5000
) -> bytes:
    """Produce v9 body: {topic: [(partition, records), ...]}."""
    entity = ProduceRequest(
        transactional_id=None,
        acks=i16(acks),
        timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
        topic_data=tuple(
            TopicProduceData(
                name=topic,
                partition_data=tuple(
                    PartitionProduceData(index=i32(p), records=records) for p, records in parts
                ),
            )
            for topic, parts in partitions.items()
        ),
    )
    return encode_entity(entity)


def list_offsets_body(topic: str, partitions: list[int], timestamp: int = -1) -> bytes:
    """ListOffsets v7 for the latest (-1) or earliest (-2) offset of each partition."""
    entity = ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(0),
        topics=(
            ListOffsetsTopic(
                name=topic,
                partitions=tuple(
                    ListOffsetsPartition(partition_index=i32(p), timestamp=i64(timestamp))
                    for p in partitions
                ),
            ),
        ),
    )
    return encode_entity(entity)


def decode_response(api_key: int, version: int, payload: bytes) -> tuple[int, Any]:
    """(correlation_id, kio response) of a response frame's payload; it must decode exactly."""
    cls = response_class(api_key, version)
    (correlation_id,) = struct.unpack_from(">i", payload, 0)
    pos = 4
    if cls.__flexible__ and api_key != API_VERSIONS:
        assert payload[pos] == 0, "response header tagged fields"
        pos += 1
    entity, size = entity_reader(cls)(payload, pos)
    assert pos + size == len(payload), "trailing bytes after the response"
    return correlation_id, entity


class RawClient:
    """One TCP connection to the broker."""

    def __init__(self, port: int, timeout: float = TIMEOUT) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.sock.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_tolerant(self, data: bytes) -> bool:
        """Send what the broker takes; False if it closed on us while we were still sending."""
        try:
            self.sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            return False
        return True

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            except ConnectionResetError as exc:
                raise Closed("connection reset") from exc
            if not chunk:
                raise Closed(f"EOF after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._recv_exact(4))
        assert 0 <= size < 64 << 20, f"response frame length {size}"
        return self._recv_exact(size)

    def call(self, api_key: int, version: int, body: bytes, correlation_id: int = 7) -> Any:
        """Send one request and decode its response, checking the correlation id."""
        self.send(request(api_key, version, body, correlation_id))
        got, response = decode_response(api_key, version, self.recv_frame())
        assert got == correlation_id
        return response

    def expect_closed(self, timeout: float = TIMEOUT) -> None:
        """The broker must close this connection without sending anything more."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except ConnectionResetError:
            return
        except TimeoutError as exc:
            raise AssertionError("broker kept the connection open") from exc
        assert data == b"", f"expected close, got {len(data)} bytes: {data[:64]!r}"

    def expect_open(self, wait: float = 0.3) -> None:
        """Nothing is sent and the connection stays open for `wait` seconds."""
        self.sock.settimeout(wait)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return
        finally:
            self.sock.settimeout(TIMEOUT)
        raise AssertionError(f"expected silence, got {data[:64]!r}")


def status_kb(pid: int, field: str = "VmRSS") -> int:
    """A memory field of /proc/<pid>/status in kB: VmRSS, VmHWM (peak RSS), VmPeak (peak
    virtual size, which shows reservations that were never touched)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")
