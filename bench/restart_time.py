"""Broker restart time after SIGKILL with a large log and many idempotent producers.

    .venv/bin/python bench/restart_time.py [--gigabytes 1.0] [--producers 10000]

Fills a topic (8 partitions, 32 MiB segments) with batches from `--producers` distinct
idempotent producer ids (real InitProducerId requests, raw Produce v9), SIGKILLs the broker
and times restarts until the ready line: with the producer snapshots written at segment
rolls, then with every snapshot deleted (state rebuilt from the segments), and after a clean
shutdown for reference. Each restart also checks that a retry of a producer's last batch is
still answered as a duplicate.
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i16, i32Timedelta, i64
from tests.broker_process import BrokerProcess
from tests.integration.rawclient import RawClient, decode_response, produce_body, request

from oncelog.protocol.codec import encode_entity
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record

PARTITIONS = 8
TOPIC = "restart"


def init_producer_id(client: RawClient) -> int:
    body = encode_entity(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
            producer_id=i64(-1),
            producer_epoch=i16(-1),
        )
    )
    return int(client.call(22, 4, body).producer_id)


def batch(records: bytes, count: int, pid: int) -> bytes:
    return build_batch(
        base_offset=0,
        records=records,
        record_count=count,
        last_offset_delta=count - 1,
        base_timestamp=int(time.time() * 1000),
        max_timestamp=int(time.time() * 1000),
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
    )


def fill(broker: BrokerProcess, total_bytes: int, producers: int) -> tuple[bytes, int]:
    """Write about `total_bytes` as one batch per producer; return the last batch and the
    offset it was stored at."""
    per_batch = max(1, total_bytes // producers)
    count = max(1, per_batch // 110)
    records = b"".join(
        encode_record(offset_delta=i, key=None, value=b"v" * 100) for i in range(count)
    )
    with RawClient(broker.port, timeout=60) as client:
        client.call(3, 12, _metadata_create())
        pids = [init_producer_id(client) for _ in range(producers)]
        window = 32
        sent = 0
        last = b""
        for i, pid in enumerate(pids):
            last = batch(records, count, pid)
            body = produce_body({TOPIC: [(i % PARTITIONS, last)]}, acks=1)
            client.send(request(0, 9, body, correlation_id=i))
            sent += 1
            if sent >= window:
                client.recv_frame()
                sent -= 1
        frames = [client.recv_frame() for _ in range(sent)]
    _, response = decode_response(0, 9, frames[-1])
    return last, int(response.responses[0].partition_responses[0].base_offset)


def _metadata_create() -> bytes:
    from tests.integration.rawclient import metadata_body

    return metadata_body([TOPIC], auto_create=True)


def timed_start(broker: BrokerProcess) -> float:
    start = time.perf_counter()
    broker.start(timeout=600)
    return time.perf_counter() - start


def still_duplicate(broker: BrokerProcess, partition: int, last: bytes, offset: int) -> bool:
    """A retry of the last batch must be answered with its original offset."""
    with RawClient(broker.port, timeout=60) as client:
        response = client.call(0, 9, produce_body({TOPIC: [(partition, last)]}))
        part = response.responses[0].partition_responses[0]
        return int(part.error_code) == 0 and int(part.base_offset) == offset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gigabytes", type=float, default=1.0)
    parser.add_argument("--producers", type=int, default=10_000)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="oncelog-restart-"))
    broker = BrokerProcess(
        root / "data",
        {"num.partitions": str(PARTITIONS), "log.segment.bytes": str(32 << 20)},
    )
    try:
        broker.start()
        t0 = time.perf_counter()
        last, offset = fill(broker, int(args.gigabytes * (1 << 30)), args.producers)
        partition = (args.producers - 1) % PARTITIONS
        size = sum(p.stat().st_size for p in (root / "data").rglob("*.log"))
        print(
            f"filled {size / 2**30:.2f} GiB from {args.producers} producers "
            f"in {time.perf_counter() - t0:.1f} s"
        )
        broker.kill()
        snaps = len(list((root / "data").rglob("*.snapshot")))
        took = timed_start(broker)
        print(
            f"SIGKILL, restart with {snaps} snapshots: {took:.2f} s; "
            f"duplicate still detected: {still_duplicate(broker, partition, last, offset)}"
        )
        broker.kill()
        for snap in (root / "data").rglob("*.snapshot"):
            snap.unlink()
        took = timed_start(broker)
        print(
            f"SIGKILL, restart with snapshots deleted: {took:.2f} s; "
            f"duplicate still detected: {still_duplicate(broker, partition, last, offset)}"
        )
        broker.stop()
        took = timed_start(broker)
        print(
            f"clean restart: {took:.2f} s; "
            f"duplicate still detected: {still_duplicate(broker, partition, last, offset)}"
        )
        broker.stop()
    finally:
        broker.kill()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
