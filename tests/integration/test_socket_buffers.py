"""Kafka's socket buffer settings against the real broker, read back from the kernel.

`socket.receive.buffer.bytes` is the listening socket's SO_RCVBUF, so it is in place before a
client's handshake: the window scale the broker offers there (the client's TCP_INFO) follows
it. `socket.send.buffer.bytes` is each accepted socket's SO_SNDBUF, and
`replica.socket.receive.buffer.bytes` the SO_RCVBUF of a follower's connection to its leader;
both are read with `ss` (skmem's rb/tb: Linux keeps twice the size set). -1 (the listeners'
default) leaves the OS's default and its autotuning; the broker serves at tiny sizes as at
-1; 0 is refused at start-up in one line.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.cluster_process import Cluster
from tests.integration.helpers import (
    confluent_read,
    create_topic,
    end_offsets,
    produce_all,
    producer_for,
)
from tests.integration.rawclient import API_VERSIONS, RawClient, api_versions_body
from tests.integration.test_startup import one_line, serve

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

TCPI_OPT_WSCALE = 4
#: One ss line pair: local and peer address, the process, then skmem's rb and tb.
_SS_SOCKET = re.compile(r"(\S+:\d+)\s+(\S+:\d+)\s*(.*)\n\s+skmem:\(r\d+,rb(\d+),t\d+,tb(\d+)")


def offered_window_scale(port: int) -> int:
    """The window scale the listener on `port` offered in its SYN-ACK, as this side's
    TCP_INFO holds it (tcpi_snd_wscale, the low nibble of byte 6)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    assert info[5] & TCPI_OPT_WSCALE, "window scaling was not negotiated"
    return info[6] & 0x0F


def os_default_window_scale() -> int:
    """What a listener without SO_RCVBUF offers on this machine (from net.ipv4.tcp_rmem)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        return offered_window_scale(server.getsockname()[1])


def ss_binary() -> str:
    found = shutil.which("ss")
    if found is None:
        pytest.fail("ss is not installed: `apt-get install iproute2` (scripts/test does it)")
    return found


def socket_buffers(port_filter: str) -> list[tuple[str, str, str, int, int]]:
    """(local, peer, process, rb, tb) of each established TCP socket matching `port_filter`
    (an ss filter such as `sport = :9092`)."""
    out = subprocess.run(
        [ss_binary(), "-tnmpH", "state", "established", port_filter],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    return [
        (local, peer, process, int(rb), int(tb))
        for local, peer, process, rb, tb in _SS_SOCKET.findall(out)
    ]


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("4096", "zero"),  # a window of a few KiB needs no scaling
        ("102400", "below the OS default"),  # Kafka's default
        (None, "the OS default"),  # oncelog's: -1
    ],
)
def test_the_listener_receive_buffer_sets_the_window_scale_offered_in_the_handshake(
    broker_factory: type[BrokerProcess], setting: str | None, expected: str
) -> None:
    os_default = os_default_window_scale()
    assert os_default > 1, "net.ipv4.tcp_rmem is too small here to tell the settings apart"
    overrides = {} if setting is None else {"socket.receive.buffer.bytes": setting}
    scale = offered_window_scale(broker_factory("data", overrides).start().port)
    if expected == "zero":
        assert scale == 0
    elif expected == "below the OS default":
        assert scale < os_default
    else:
        assert scale == os_default


def test_accepted_sockets_get_both_buffer_sizes(broker_factory: type[BrokerProcess]) -> None:
    proc = broker_factory(
        "data", {"socket.send.buffer.bytes": "50000", "socket.receive.buffer.bytes": "30000"}
    ).start()
    with RawClient(proc.port) as client:
        # answered: the broker has taken the connection and set its options
        assert client.call(API_VERSIONS, 3, api_versions_body()).error_code == 0
        ours = client.sock.getsockname()
        accepted = [
            (rb, tb)
            for _, peer, _, rb, tb in socket_buffers(f"sport = :{proc.port}")
            if peer == f"{ours[0]}:{ours[1]}"
        ]
    assert accepted == [(2 * 30000, 2 * 50000)]


@pytest.mark.parametrize("size", ["4096", "-1"])
def test_the_broker_serves_at_tiny_buffers_as_at_the_os_default(
    broker_factory: type[BrokerProcess], size: str
) -> None:
    """Produce and read back 2 MB in 20 KB records: answers larger than the send buffer go
    out in pieces, requests larger than the receive window come in in pieces."""
    proc = broker_factory(
        "data", {"socket.send.buffer.bytes": size, "socket.receive.buffer.bytes": size}
    ).start()
    tiny = size == "4096"
    assert offered_window_scale(proc.port) == (0 if tiny else os_default_window_scale())
    topic = f"buffers-{uuid.uuid4().hex[:8]}"
    create_topic(proc.bootstrap, topic, partitions=2)
    messages = [(b"k%d" % i, bytes([i % 256]) * 20_000, None) for i in range(100)]
    acked = produce_all(producer_for(proc, **{"batch.size": 1_000_000}), topic, messages)
    got = confluent_read(proc.bootstrap, topic, end_offsets(acked, partitions=2))
    assert sorted((r.key, r.value) for rs in got.values() for r in rs) == sorted(
        (key, value) for key, value, _ in messages
    )


@pytest.mark.parametrize(
    "key",
    [
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "replica.socket.receive.buffer.bytes",
    ],
)
def test_a_size_of_zero_is_refused_in_one_line(tmp_path: Path, key: str) -> None:
    data = tmp_path / "data"
    result = serve("--listen", "127.0.0.1:0", "--data-dir", str(data), "--override", f"{key}=0")
    assert result.returncode == 2
    assert one_line(result) == (
        f"oncelog: configuration error: Invalid value 0 for configuration {key}: "
        "Value must be between 1 and 2147483647 or equal to -1"
    )
    assert not data.exists()


@pytest.fixture
def two_brokers(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(
        tmp_path, size=2, overrides={"replica.socket.receive.buffer.bytes": "40000"}
    ) as cluster:
        yield cluster


def test_a_followers_connection_to_its_leader_gets_the_replica_receive_buffer(
    two_brokers: Cluster,
) -> None:
    cluster = two_brokers
    cluster.create_topic("replicated", assignment=[[1, 2]])
    leader, follower = cluster.brokers[1], cluster.brokers[2]
    assert follower.proc is not None
    of_follower = f"pid={follower.proc.pid},"

    def follower_links() -> list[tuple[int, int]]:
        return [
            (rb, tb)
            for _, _, process, rb, tb in socket_buffers(f"dport = :{leader.port}")
            if of_follower in process
        ]

    cluster.wait_for(lambda: bool(follower_links()), 15, "the follower's fetch connection")
    # Kafka sets only the receive buffer on a fetcher's connection: the send buffer stays the
    # OS's, autotuned (so not the 2 * 40000 of a size that was set).
    assert [rb for rb, _ in follower_links()] == [2 * 40000]
    assert all(tb != 2 * 40000 for _, tb in follower_links())
