"""A Kafka-aware TCP proxy for tests: forwards frames both ways and drops chosen responses.

It listens on 127.0.0.1 (ephemeral port, bound at construction so the port can be advertised
before the broker starts) and relays every connection to the broker. It parses the Kafka
framing in both directions (int32 length prefix; a request header starts with int16 api_key,
int16 api_version, int32 correlation_id; a response starts with int32 correlation_id),
remembers which correlation ids belong to Produce requests, and drops a seeded random share of
Produce *responses*. After a drop it either closes that client connection (and its upstream
connection), so the client retries promptly, or keeps going silently, so the client has to
time the request out.

Threads only, every socket with a timeout, so `close()` always finishes.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
from dataclasses import dataclass

PRODUCE = 0
MAX_FRAME = 256 << 20


class _Closed(Exception):
    pass


def _recv_exact(sock: socket.socket, n: int, stop: threading.Event) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        if stop.is_set():
            raise _Closed("proxy stopping")
        try:
            chunk = sock.recv(min(n - len(buf), 1 << 20))
        except TimeoutError:
            continue
        except OSError as exc:
            raise _Closed(str(exc)) from exc
        if not chunk:
            raise _Closed("EOF")
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket, stop: threading.Event) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(sock, 4, stop))
    if not 0 <= size <= MAX_FRAME:
        raise _Closed(f"implausible frame length {size}")
    return _recv_exact(sock, size, stop)


def _send_frame(sock: socket.socket, payload: bytes) -> None:
    try:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
    except OSError as exc:
        raise _Closed(str(exc)) from exc


@dataclass
class ProxyStats:
    connections: int = 0
    requests: int = 0
    produce_requests: int = 0
    produce_responses_forwarded: int = 0
    produce_responses_dropped: int = 0
    closed_after_drop: int = 0


class _Link:
    """One client connection and its upstream connection to the broker."""

    def __init__(self, proxy: DroppingProxy, client: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = socket.create_connection(("127.0.0.1", proxy.target_port), timeout=5)
        for sock in (client, self.upstream):
            sock.settimeout(0.2)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.produce_ids: set[int] = set()
        #: Produce correlation id -> request version, to decode a dropped response.
        self.produce_versions: dict[int, int] = {}
        self.lock = threading.Lock()
        self.dead = threading.Event()
        self.threads = [
            threading.Thread(target=self._requests, name="proxy-req", daemon=True),
            threading.Thread(target=self._responses, name="proxy-resp", daemon=True),
        ]

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def close(self) -> None:
        self.dead.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def _requests(self) -> None:
        """Client -> broker: note Produce correlation ids, forward everything."""
        try:
            while not self.dead.is_set():
                payload = _recv_frame(self.client, self.dead)
                api_key, _version, correlation_id = struct.unpack_from(">hhi", payload, 0)
                with self.proxy.lock:
                    self.proxy.stats.requests += 1
                    if api_key == PRODUCE:
                        self.proxy.stats.produce_requests += 1
                if api_key == PRODUCE:
                    with self.lock:
                        self.produce_ids.add(correlation_id)
                        self.produce_versions[correlation_id] = _version
                _send_frame(self.upstream, payload)
        except (_Closed, struct.error):
            pass
        finally:
            self.close()

    def _responses(self) -> None:
        """Broker -> client: drop the chosen share of Produce responses."""
        try:
            while not self.dead.is_set():
                payload = _recv_frame(self.upstream, self.dead)
                (correlation_id,) = struct.unpack_from(">i", payload, 0)
                with self.lock:
                    is_produce = correlation_id in self.produce_ids
                    self.produce_ids.discard(correlation_id)
                verdict = self.proxy.verdict() if is_produce else None
                with self.lock:
                    version = self.produce_versions.pop(correlation_id, -1)
                if verdict is not None:
                    with self.proxy.lock:
                        self.proxy.dropped.append((version, payload))
                if verdict == "close":
                    return  # finally: close both sides
                if verdict == "drop":
                    continue
                _send_frame(self.client, payload)
        except (_Closed, struct.error):
            pass
        finally:
            self.close()


class DroppingProxy:
    """Relay 127.0.0.1:<port> to the broker, dropping `drop_share` of Produce responses."""

    def __init__(
        self,
        *,
        drop_share: float,
        seed: int,
        close_after_drop: bool = True,
        max_drops: int | None = None,
    ) -> None:
        self.drop_share = drop_share
        self.close_after_drop = close_after_drop
        self.max_drops = max_drops
        self.random = random.Random(seed)
        self.stats = ProxyStats()
        #: (Produce request version, response frame payload) of every dropped response.
        self.dropped: list[tuple[int, bytes]] = []
        self.lock = threading.Lock()
        self.target_port = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port: int = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.links: list[_Link] = []
        self.acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, target_port: int) -> DroppingProxy:
        self.target_port = target_port
        self.acceptor.start()
        return self

    def configure(
        self,
        *,
        drop_share: float,
        close_after_drop: bool | None = None,
        max_drops: int | None = None,
    ) -> None:
        """Change the dropping rule for the responses that arrive from now on; max_drops
        counts from the drops so far."""
        with self.lock:
            self.drop_share = drop_share
            if close_after_drop is not None:
                self.close_after_drop = close_after_drop
            self.max_drops = (
                None if max_drops is None else self.stats.produce_responses_dropped + max_drops
            )

    def verdict(self) -> str | None:
        """For one Produce response: None (forward), "drop" or "close" (drop, then close)."""
        with self.lock:
            limited = (
                self.max_drops is not None
                and self.stats.produce_responses_dropped >= self.max_drops
            )
            if limited or self.drop_share <= 0 or self.random.random() >= self.drop_share:
                self.stats.produce_responses_forwarded += 1
                return None
            self.stats.produce_responses_dropped += 1
            if self.close_after_drop:
                self.stats.closed_after_drop += 1
                return "close"
            return "drop"

    def snapshot(self) -> ProxyStats:
        with self.lock:
            return ProxyStats(**vars(self.stats))

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                link = _Link(self, client)
            except OSError:
                client.close()  # broker not reachable: the client sees a refused connection
                continue
            with self.lock:
                self.stats.connections += 1
                self.links.append(link)
                self.links = [x for x in self.links if not x.dead.is_set() or x is link]
            link.start()

    def close(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.listener.close()
        if self.acceptor.is_alive():
            self.acceptor.join(timeout)
        with self.lock:
            links = list(self.links)
        for link in links:
            link.close()
        for link in links:
            for thread in link.threads:
                thread.join(timeout)

    def __enter__(self) -> DroppingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TcpRelay:
    """A plain TCP relay (any protocol, e.g. a broker's gRPC connection to etcd) whose
    traffic can be cut: `cut()` discards every byte both ways on open and new connections,
    which stay open (a partition that drops packets); `heal()` closes them all and forwards
    again, so clients reconnect to a clean stream."""

    def __init__(self) -> None:
        self.target_port = 0
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.listener.settimeout(0.2)
        self.port: int = self.listener.getsockname()[1]
        self.stopping = threading.Event()
        self.cutting = threading.Event()
        self.lock = threading.Lock()
        self.pairs: list[tuple[socket.socket, socket.socket]] = []
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, name="relay-accept", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, target_port: int) -> TcpRelay:
        self.target_port = target_port
        self.acceptor.start()
        return self

    def cut(self) -> None:
        self.cutting.set()

    def heal(self) -> None:
        with self.lock:
            pairs, self.pairs = self.pairs, []
            self.cutting.clear()
        for pair in pairs:
            for sock in pair:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            for sock in (client, upstream):
                sock.settimeout(0.2)
            with self.lock:
                self.pairs.append((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                thread = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                self.threads.append(thread)
                thread.start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    data = source.recv(1 << 16)
                except TimeoutError:
                    continue
                if not data:
                    break
                if not self.cutting.is_set():
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self, timeout: float = 5.0) -> None:
        self.stopping.set()
        self.listener.close()
        if self.acceptor.is_alive():
            self.acceptor.join(timeout)
        self.heal()
        for thread in self.threads:
            thread.join(timeout)

    def __enter__(self) -> TcpRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
