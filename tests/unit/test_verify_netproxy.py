"""The relays `verify run --start-cluster` cuts: peers are told from clients by client id, a cut
link stalls (nothing refused, nothing lost) and healing delivers what waited."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from oncelog.verify.netproxy import Network


def request(client_id: bytes, body: bytes = b"hello") -> bytes:
    """A Kafka-framed request: size, api key, version, correlation id, client id, body."""
    payload = struct.pack(">hhih", 18, 3, 1, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


@pytest.fixture
def echo() -> Iterator[int]:
    """A TCP server on 127.0.0.1 that echoes whatever it receives."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield port
    server.close()


@pytest.fixture
def network() -> Iterator[Network]:
    net = Network()
    yield net
    net.close()


def exchange(port: int, data: bytes, timeout: float) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.settimeout(timeout)
        s.sendall(data)
        got = b""
        try:
            while len(got) < len(data):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
        return got


def test_a_cut_stalls_the_peer_link_only_and_healing_delivers(
    echo: int, network: Network
) -> None:
    relay = network.ingress("1")
    relay.target = ("127.0.0.1", echo)
    from_peer, from_client = request(b"broker-2-fetcher"), request(b"rdkafka")
    assert exchange(relay.port, from_peer, 5) == from_peer
    network.cut([("2", "1")])
    assert exchange(relay.port, from_client, 5) == from_client  # clients still get through
    assert exchange(relay.port, request(b"broker-3-fetcher"), 5)  # so does another peer
    with socket.create_connection(("127.0.0.1", relay.port), timeout=5) as s:
        s.sendall(from_peer)
        s.settimeout(0.5)
        with pytest.raises(TimeoutError):
            s.recv(1)  # held, not refused
        network.heal()
        s.settimeout(5)
        got = b""
        while len(got) < len(from_peer):
            got += s.recv(65536)
        assert got == from_peer  # what waited arrives, late


def test_an_etcd_link_belongs_to_one_broker(echo: int, network: Network) -> None:
    link = network.etcd_link("2")
    link.target = ("127.0.0.1", echo)
    assert exchange(link.port, b"any bytes", 5) == b"any bytes"
    network.cut([("1", "etcd")])
    assert exchange(link.port, b"still open", 5) == b"still open"
    network.cut([("2", "etcd")])
    assert exchange(link.port, b"cut", 0.5) == b""
    assert network.cut_links == {frozenset(("1", "etcd")), frozenset(("2", "etcd"))}
