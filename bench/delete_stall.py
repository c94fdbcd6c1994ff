"""How long a broker stops answering while a large topic is deleted (issue 15: no stalls).

    .venv/bin/python bench/delete_stall.py [--gib 2] [--rounds 2] [--oncelog-rev REV]
    .venv/bin/python bench/delete_stall.py --delete-records 10 [--rounds 2] [--oncelog-rev REV]

Writes `--gib` GiB of 10 KiB values into a one-partition topic with librdkafka, then
deletes the topic while a probe thread sends ApiVersions requests on its own connection, one
every 2 ms, from 1 s before the deletion to 3 s after it (the broker runs with
`log.segment.delete.delay.ms=0`, so the files are removed in that window). Prints the
probe's round trips: median, the largest five and the maximum, which is how long the event
loop was blocked.
With `--delete-records N` the probe runs while an admin client sends DeleteRecords N times a
second for 5 s instead (one record further each time), as Kafka Streams does on its
repartition topics with every commit.
A fresh broker per round; `--oncelog-rev` runs it from `git archive REV` (bench/produce_consume).
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_consume as pc  # bench/ helpers: a commit's snapshot, the machine

VALUE = b"x" * 10240
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 0, -1)  # key, version, correlation id, no client id


def _probe(port: int, stop: threading.Event, out: list[float]) -> None:
    """ApiVersions round trips in ms until `stop`, one every 2 ms."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        request = struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0
        while not stop.is_set():
            start = time.perf_counter()
            sock.sendall(request)
            (size,) = struct.unpack(">i", _read(sock, 4))
            _read(sock, size)
            out.append((time.perf_counter() - start) * 1000)
            time.sleep(0.002)


@contextlib.contextmanager
def _probing(port: int, after_s: float) -> Iterator[list[float]]:
    """The probe's round trips (ms) from 1 s before the block to `after_s` after it."""
    stop = threading.Event()
    rtts: list[float] = []
    prober = threading.Thread(target=_probe, args=(port, stop, rtts))
    prober.start()
    time.sleep(1)
    try:
        yield rtts
        time.sleep(after_s)
    finally:
        stop.set()
        prober.join()


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the probe's connection")
        data += chunk
    return data


def one_round(gib: float) -> list[float]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.broker_process import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="delete-stall-") as data:
        # No file.delete.delay.ms: the files go within the probe's window (older revisions
        # accept the setting and remove at once anyway).
        broker = BrokerProcess(Path(data), {"log.segment.delete.delay.ms": "0"}).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("big", 1, 1)])["big"].result(30)
            producer = Producer(
                {"bootstrap.servers": broker.bootstrap, "linger.ms": 20, "batch.size": 1000000}
            )
            for _ in range(int(gib * (1 << 30)) // len(VALUE)):
                while True:
                    try:
                        producer.produce("big", VALUE)
                        break
                    except BufferError:
                        producer.poll(0.01)
            if producer.flush(300):
                raise RuntimeError("messages left unacknowledged")
            del producer
            with _probing(int(broker.bootstrap.rsplit(":", 1)[1]), after_s=3) as rtts:
                admin.delete_topics(["big"])["big"].result(30)
            del admin
            return rtts
        finally:
            broker.stop()


def records_round(seconds: float, per_second: int) -> list[float]:
    """The probe while an admin deletes records every 1/`per_second` s (as Kafka Streams does
    on its repartition topics with every commit) for `seconds`."""
    from confluent_kafka import Producer
    from confluent_kafka import TopicPartition as CkTopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.broker_process import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="delete-records-stall-") as data:
        broker = BrokerProcess(Path(data) / "data").start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("cut", 1, 1)])["cut"].result(30)
            count = int(seconds * per_second) + 1
            producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
            for _ in range(count):
                producer.produce("cut", VALUE[:100], partition=0)
            if producer.flush(60):
                raise RuntimeError("messages left unacknowledged")
            with _probing(int(broker.bootstrap.rsplit(":", 1)[1]), after_s=1) as rtts:
                start = time.monotonic()
                for i in range(1, count):
                    time.sleep(max(0.0, start + i / per_second - time.monotonic()))
                    cut = CkTopicPartition("cut", 0, i)
                    for future in admin.delete_records([cut]).values():
                        future.result(30)
            del admin
            return rtts
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=2.0, help="GiB written before the delete")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--oncelog-rev", help="run the broker from `git archive REV`")
    parser.add_argument(
        "--delete-records",
        type=int,
        metavar="PER_SECOND",
        help="instead of a topic deletion: DeleteRecords this many times a second for 5 s",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="delete-stall-src-") as root:
        if args.oncelog_rev:
            pc._use_snapshot(args.oncelog_rev, Path(root) / "oncelog-src")
        sys.path.insert(0, str(pc.REPO))
        machine = pc.machine_info(args.oncelog_rev)
        what = (
            f"DeleteRecords {args.delete_records}/s" if args.delete_records else f"{args.gib} GiB"
        )
        print(f"oncelog {args.oncelog_rev or 'work tree'}, {what}, machine {machine}")
        for i in range(args.rounds):
            if args.delete_records:
                rtts = sorted(records_round(5.0, args.delete_records))
            else:
                rtts = sorted(one_round(args.gib))
            top = " ".join(f"{x:.1f}" for x in rtts[-5:])
            print(
                f"round {i + 1}: {len(rtts)} probes, p50 {rtts[len(rtts) // 2]:.2f} ms, "
                f"p99 {rtts[len(rtts) * 99 // 100]:.2f} ms, largest {top} ms"
            )


if __name__ == "__main__":
    main()
