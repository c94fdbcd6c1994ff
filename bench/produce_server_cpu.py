"""A server's CPU per Produce, user and system, without a client's share (issue 15).

    .venv/bin/python bench/produce_server_cpu.py [--cases 4x250x100,1x1x1024] [--requests 3000]
        [--window 50] [--rounds 2] [--oncelog-rev REV]

`bench/produce_consume.py` measures the broker while librdkafka's producer runs beside it on
the same two cores, so a broker's figure there also carries the client's pressure on the
machine. Here one connection sends the same prepared requests (`bench/produce_cpu.py`'s
PARTITIONSxRECORDSxVALUE_BYTES cases: one idempotent acks=all Produce v9, one batch per
partition, each request the producer's next batch) to oncelog and to librdkafka's mock
cluster in turn, `--window` requests in flight, and reads each server's user and system CPU
from /proc/PID/stat around them. Every answer is checked (no partition error).

The system share is what the kernel does for the server: the socket receive and the answer's
send on both; oncelog also writes each batch into its log's page cache, which the mock, keeping
records in memory, does not. It is the part of a durable broker's cost no user-space code
removes. Rounds alternate the targets; a fresh oncelog (with `--oncelog-rev`: from `git
archive REV`) and a fresh mock topic per case.
"""

from __future__ import annotations

import argparse
import os
import socket
import struct
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_consume as pc  # bench/ helpers: a commit's snapshot, the machine
import produce_cpu  # the request shapes

TICK = os.sysconf("SC_CLK_TCK")


def _cpu(pid: int) -> tuple[float, float]:
    """(user, system) seconds of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


class _Connection:
    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, frames: list[bytes]) -> None:
        self.sock.sendall(b"".join(struct.pack(">i", len(f)) + f for f in frames))

    def receive(self) -> bytes:
        (size,) = struct.unpack(">i", self._exactly(4))
        return self._exactly(size)

    def _exactly(self, n: int) -> bytes:
        data = self.sock.recv(n, socket.MSG_WAITALL)
        if len(data) != n:
            raise RuntimeError("the server closed the connection")
        return data

    def close(self) -> None:
        self.sock.close()


def _produce_errors(answer: bytes) -> list[int]:
    """Non-zero partition error codes of a Produce v9 answer (header: id, no tags)."""
    from oncelog.protocol.codec import decode_request, response_class

    response = decode_request(response_class(0, produce_cpu.PRODUCE_V), answer, 5)
    return [
        p.error_code for t in response.responses for p in t.partition_responses if p.error_code != 0
    ]


def _init_producer(conn: _Connection) -> tuple[int, int]:
    conn.send(
        [
            produce_cpu._frame(
                22,
                produce_cpu.INIT_PRODUCER_ID_V,
                {
                    "transactional_id": None,
                    "transaction_timeout": timedelta(seconds=60),
                    "producer_id": -1,
                    "producer_epoch": -1,
                },
            )
        ]
    )
    _throttle, error, producer_id, epoch = struct.unpack_from(">ihqh", conn.receive(), 5)
    if error:
        raise RuntimeError(f"InitProducerId failed: error {error}")
    return producer_id, epoch


def measure(port: int, pid: int, case: produce_cpu.Case, requests: int, window: int) -> str:
    """Send `requests` Produce requests `window` at a time; the server's CPU per request."""
    conn = _Connection(port)
    try:
        producer_id, epoch = _init_producer(conn)
        warmup = min(200, requests)
        frames = [case.produce(producer_id, epoch, r) for r in range(warmup + requests)]
        for start in range(0, warmup, window):  # the topic's first segment, caches
            chunk = frames[start : min(start + window, warmup)]
            conn.send(chunk)
            for _ in chunk:
                conn.receive()
        (user0, sys0), wall = _cpu(pid), time.perf_counter()
        errors: list[int] = []
        for start in range(warmup, warmup + requests, window):
            chunk = frames[start : start + window]
            conn.send(chunk)
            for _ in chunk:
                errors += _produce_errors(conn.receive())
        (user1, sys1), wall = _cpu(pid), time.perf_counter() - wall
    finally:
        conn.close()
    if errors:
        raise RuntimeError(f"the server answered errors {sorted(set(errors))}")
    records = requests * case.partitions * case.records
    user, system = (user1 - user0) * 1e6, (sys1 - sys0) * 1e6
    return (
        f"user {user / requests:6.1f} sys {system / requests:6.1f} us per request, "
        f"{(user + system) / records:.3f} us per record (sys {system / records:.3f}), "
        f"{records / wall:,.0f} records/s"
    )


def oncelog_round(case: produce_cpu.Case, requests: int, window: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.broker_process import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="produce-server-cpu-") as tmp:
        broker = BrokerProcess(Path(tmp) / "data").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            topic = NewTopic(produce_cpu.TOPIC, case.partitions, 1)
            admin.create_topics([topic])[produce_cpu.TOPIC].result(30)
            assert broker.proc is not None
            return measure(broker.port, broker.proc.pid, case, requests, window)
        finally:
            broker.stop()


def mock_round(case: produce_cpu.Case, requests: int, window: int) -> str:
    from oncelog.verify.mock_cluster import MockCluster

    with MockCluster() as mock:
        mock.create_topic(produce_cpu.TOPIC, case.partitions)
        port = int(mock.bootstrap.split(",")[0].rsplit(":", 1)[1])
        return measure(port, mock.pid, case, requests, window)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", default="4x250x100,1x1x1024", help="comma list of PxRxV")
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--window", type=int, default=50, help="requests in flight")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--oncelog-rev", help="run the broker from `git archive REV`")
    args = parser.parse_args()
    with pc.oncelog_under_test(args.oncelog_rev, "produce-server-cpu-src-"):
        for spec in args.cases.split(","):
            case = produce_cpu.Case(spec)
            for i in range(args.rounds):
                for name, run in (("oncelog", oncelog_round), ("mock", mock_round)):
                    figures = run(case, args.requests, args.window)
                    print(f"{spec} round {i + 1} {name:8} {figures}", flush=True)


if __name__ == "__main__":
    main()
