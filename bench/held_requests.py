"""What one connection can make a broker hold in requests not yet handled (issue 15: bounded
memory per connection).

    .venv/bin/python bench/held_requests.py [--mib 120] [--request-max-mib 4] [--oncelog-rev REV]

On one connection: a Fetch at the log end that long-polls (max_wait 4 s), then `--mib`
Produce requests of about 1 MB each, written as fast as the broker takes them. While the Fetch
waits, the requests behind it cannot be handled; after 2 s the script prints how many bytes
the broker had taken off the socket and how much its RSS grew, then reads every answer
(all must be error 0) and checks the log end. The broker runs with
`socket.request.max.bytes=--request-max-mib`. `--oncelog-rev` runs it from `git archive REV`
(bench/produce_consume).
"""

from __future__ import annotations

import argparse
import datetime
import socket
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_consume as pc  # bench/ helpers: a commit's snapshot, the machine

MIB = 1 << 20


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 5) + b"bench"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _requests(topic: str, count: int) -> bytes:
    from kio.schema.fetch.v4.request import FetchPartition, FetchRequest, FetchTopic
    from kio.schema.produce.v3.request import PartitionProduceData, ProduceRequest
    from kio.schema.produce.v3.request import TopicProduceData as ProduceTopic
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i16, i32, i32Timedelta, i64

    from oncelog.protocol.codec import encode_entity
    from oncelog.protocol.records.batch import build_batch
    from oncelog.protocol.records.record import encode_record

    wait = i32Timedelta.parse(datetime.timedelta(seconds=4))
    timeout = i32Timedelta.parse(datetime.timedelta(seconds=5))
    fetch = FetchRequest(
        replica_id=BrokerId(-1), max_wait=wait, min_bytes=i32(1), max_bytes=i32(MIB),
        isolation_level=i8(0),
        topics=(FetchTopic(topic=TopicName(topic), partitions=(
            FetchPartition(partition=i32(0), fetch_offset=i64(0), partition_max_bytes=i32(MIB)),
        )),),
    )  # fmt: skip
    now = int(time.time() * 1000)
    batch = build_batch(
        base_offset=0, records=encode_record(offset_delta=0, key=None, value=b"v" * (MIB - 1024)),
        record_count=1, last_offset_delta=0, base_timestamp=now, max_timestamp=now,
    )  # fmt: skip
    produce = encode_entity(ProduceRequest(
        transactional_id=None, acks=i16(1), timeout=timeout,
        topic_data=(ProduceTopic(name=TopicName(topic), partition_data=(
            PartitionProduceData(index=i32(0), records=batch),
        )),),
    ))  # fmt: skip
    return _frame(1, 4, 0, encode_entity(fetch)) + b"".join(
        _frame(0, 3, 1 + i, produce) for i in range(count)
    )


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _read(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        data += chunk
    return bytes(data)


def one_round(mib: int, request_max: int) -> str:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic
    from tests.broker_process import BrokerProcess

    with tempfile.TemporaryDirectory(prefix="held-requests-") as data:
        broker = BrokerProcess(
            Path(data) / "data", {"socket.request.max.bytes": str(request_max)}
        ).start()
        try:
            admin = AdminClient({"bootstrap.servers": broker.bootstrap})
            admin.create_topics([NewTopic("held", 1, 1)])["held"].result(30)
            assert broker.proc is not None
            before = _rss_kb(broker.proc.pid)
            stream = memoryview(_requests("held", mib))
            sock = socket.create_connection(("127.0.0.1", broker.port), timeout=60)
            sent = [0]

            def write() -> None:
                while sent[0] < len(stream):
                    sent[0] += sock.send(stream[sent[0] : sent[0] + 65536])

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            time.sleep(2)
            taken, grown = sent[0], _rss_kb(broker.proc.pid) - before
            codes = []
            for i in range(mib + 1):
                (size,) = struct.unpack(">i", _read(sock, 4))
                body = _read(sock, size)
                if i:  # Produce v3: topics(1) name partitions(1) index error_code
                    name_len = struct.unpack_from(">h", body, 8)[0]
                    codes.append(struct.unpack_from(">h", body, 10 + name_len + 8)[0])
            writer.join()
            sock.close()
            consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "b"})
            end = consumer.get_watermark_offsets(TopicPartition("held", 0), timeout=10)[1]
            consumer.close()
            ok = codes == [0] * mib and end == mib
            return (
                f"taken while the Fetch waited {taken / 1e6:.1f} of {len(stream) / 1e6:.1f} MB, "
                f"RSS +{grown / 1024:.1f} MiB, answers and log end {'ok' if ok else 'WRONG'}"
            )
        finally:
            broker.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mib", type=int, default=120, help="Produce requests of ~1 MB each")
    parser.add_argument("--request-max-mib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--oncelog-rev", help="run the broker from `git archive REV`")
    args = parser.parse_args()
    with pc.oncelog_under_test(args.oncelog_rev, "held-requests-src-"):
        for i in range(args.rounds):
            print(f"round {i + 1}: {one_round(args.mib, args.request_max_mib * MIB)}")


if __name__ == "__main__":
    main()
