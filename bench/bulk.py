"""Bulk produce/consume of oncelog with ~1 MiB batches against this machine's limits (issue 15).

Every repeat runs, in this order and each client in its own process(es) on 127.0.0.1:

* limit/produce: a plain TCP sender (Python, `sendall` of one 1 MiB buffer, over and over)
  to a receiver that fills a 1 MiB buffer with `recv_into` and `os.write`s it to a file in
  the same directory as the broker's data dirs (page cache only, no fsync). This is what a
  broker that only copies bytes from the socket into its log could do at best.
* limit/consume: a sender that `os.sendfile`s that file (just written, so in the page cache)
  to a TCP receiver that `recv_into`s a reusable 1 MiB buffer and drops it. This is what a
  broker that answers fetches with sendfile could do at best.
* oncelog, for every partition count and client: a fresh broker (tests/broker_process.py,
  message.max.bytes raised to 2 MiB), one topic, then a producer (timed from its first
  produce to its last acknowledgement) and a consumer (timed until it has every record).
  Clients: `rdkafka` = confluent-kafka (librdkafka) with batch.size = 1 MiB, acks=all,
  enable.idempotence=true, no compression; `raw` = a Python process sending pre-built
  idempotent ~1 MiB Produce v9 requests pipelined on one connection (at most --raw-inflight
  in flight, as an idempotent client may), and a Python Fetch v12 reader (one fetch at a time,
  64 MiB / 16 MiB limits) that only walks batch headers. The raw clients cost little CPU, so
  their rows show the broker's own limit when librdkafka (or the Python loop around it) is
  the bottleneck. After the produce the batches on disk are counted, so the table shows the
  batch size the broker really got.

MB/s is 1e6 bytes per second: "payload" counts record values, "wire" counts the stored
batches (record framing and 61-byte batch headers included; request and response headers,
< 0.01 %, are not). The ratio is oncelog's wire MB/s over the limit of the same repeat.
Usage: see bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import produce_consume as pc

REPO = pc.REPO
SCRIPT = Path(__file__).resolve()
MIB = 1024 * 1024
GIB = 1024 * MIB
BATCH_HEADER = 61  # v2 record batch header
WORKER_ROLES = (
    "_sink",
    "_source",
    "_sendfile",
    "_discard",
    "_rk_produce",
    "_rk_consume",
    "_raw_produce",
    "_raw_fetch",
)


# -- baseline workers ----------------------------------------------------------------------


def _accept(spec: dict[str, Any]) -> socket.socket:
    """Accept the one connection on the listening socket the parent passed down."""
    lsock = socket.socket(fileno=spec["listen_fd"])
    lsock.settimeout(spec["timeout"])
    conn, _ = lsock.accept()
    lsock.close()
    conn.settimeout(spec["timeout"])
    return conn


def worker_sink(spec: dict[str, Any]) -> dict[str, Any]:
    """Receiver of limit/produce: every byte from the socket goes into a file, 1 MiB at a time."""
    conn = _accept(spec)
    buf = bytearray(MIB)
    view = memoryview(buf)
    fd = os.open(spec["path"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    total = 0
    t0 = None
    eof = False
    try:
        while not eof:
            fill = 0
            while fill < MIB:
                n = conn.recv_into(view[fill:])
                if n == 0:
                    eof = True
                    break
                if t0 is None:
                    t0 = time.perf_counter()
                fill += n
            done = 0
            while done < fill:
                done += os.write(fd, view[done:fill])
            total += fill
        t_end = time.perf_counter()
    finally:
        os.close(fd)
        conn.close()
    return _received(spec, total, t_end - (t0 or t_end))


def _received(spec: dict[str, Any], total: int, seconds: float) -> dict[str, Any]:
    """A limit receiver's result: all of `spec["bytes"]` must have arrived."""
    ok = total == spec["bytes"]
    return {
        "ok": ok,
        "error": None if ok else f"received {total} of {spec['bytes']} bytes",
        "bytes": total,
        "seconds": seconds,
        "mb_per_s": total / 1e6 / seconds if seconds > 0 else 0.0,
    }


def worker_source(spec: dict[str, Any]) -> dict[str, Any]:
    """Sender of limit/produce: `sendall` of the same 1 MiB buffer until the volume is sent."""
    data = os.urandom(MIB)
    with socket.create_connection(("127.0.0.1", spec["port"]), timeout=spec["timeout"]) as s:
        t0 = time.perf_counter()
        for _ in range(spec["bytes"] // MIB):
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # the receiver closes once everything is written
        seconds = time.perf_counter() - t0
    return {"ok": True, "error": None, "seconds": seconds}


def worker_discard(spec: dict[str, Any]) -> dict[str, Any]:
    """Receiver of limit/consume: `recv_into` a reusable 1 MiB buffer, nothing else."""
    conn = _accept(spec)
    buf = bytearray(MIB)
    total = 0
    t0 = None
    with conn:
        while True:
            n = conn.recv_into(buf)
            if n == 0:
                break
            if t0 is None:
                t0 = time.perf_counter()
            total += n
        t_end = time.perf_counter()
    return _received(spec, total, t_end - (t0 or t_end))


def worker_sendfile(spec: dict[str, Any]) -> dict[str, Any]:
    """Sender of limit/consume: `os.sendfile` of the whole file, read once before (page cache)."""
    fd = os.open(spec["path"], os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        buf = bytearray(16 * MIB)
        with open(fd, "rb", buffering=0, closefd=False) as f:
            while f.readinto(buf):  # before the timer: make sure it is all in the page cache
                pass
        with socket.create_connection(("127.0.0.1", spec["port"]), timeout=spec["timeout"]) as s:
            s.settimeout(None)  # os.sendfile needs a blocking socket; the parent bounds the time
            t0 = time.perf_counter()
            offset = 0
            while offset < size:
                sent = os.sendfile(s.fileno(), fd, offset, size - offset)
                if sent == 0:
                    break
                offset += sent
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
            seconds = time.perf_counter() - t0
    finally:
        os.close(fd)
    return {"ok": offset == size, "error": None, "seconds": seconds}


# -- librdkafka workers --------------------------------------------------------------------


def worker_rk_produce(spec: dict[str, Any]) -> dict[str, Any]:
    """confluent-kafka producer whose batches fill up to batch.size (1 MiB) before they go:
    produce_consume.py's worker with these settings."""
    conf = {
        "batch.size": spec["batch_bytes"],
        "batch.num.messages": 1_000_000,
        "message.max.bytes": 2 * spec["batch_bytes"],
        "queue.buffering.max.kbytes": 1024 * 1024,
        **spec["rk_conf"],
    }
    return pc.worker_produce(
        {**spec, "linger_ms": 100, "idempotence": True, "conf": conf, "poll_every": 256}
    )


def worker_rk_consume(spec: dict[str, Any]) -> dict[str, Any]:
    """confluent-kafka consumer with large fetches, reading every partition from offset 0:
    produce_consume.py's worker with these settings."""
    conf = {
        "fetch.max.bytes": spec["fetch_max_bytes"],
        "max.partition.fetch.bytes": spec["partition_max_bytes"],
        "receive.message.max.bytes": spec["fetch_max_bytes"] + MIB,
        "queued.max.messages.kbytes": 2 * spec["fetch_max_bytes"] // 1024,
        **spec["rk_conf"],
    }
    return pc.worker_consume({**spec, "fetch_queue_backoff_ms": 10, "conf": conf})


# -- raw-protocol workers ------------------------------------------------------------------


def _raw_imports() -> Any:
    sys.path.insert(0, str(REPO))
    from tests.integration import rawclient

    return rawclient


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError(f"EOF after {got} of {len(view)} bytes")
        got += n


def _recv_frame(sock: socket.socket) -> bytes:
    head = bytearray(4)
    _recv_exact(sock, memoryview(head))
    (size,) = struct.unpack(">i", head)
    body = bytearray(size)
    _recv_exact(sock, memoryview(body))
    return bytes(body)


def _sendmsg_all(sock: socket.socket, parts: list[bytes | memoryview]) -> None:
    """sendmsg without copying the 1 MiB batch into a joined buffer; resumes partial sends."""
    views = [memoryview(p).cast("B") for p in parts]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def _template_batch(spec: dict[str, Any], pid: int, epoch: int) -> tuple[bytearray, int]:
    """The largest batch of `size`-byte values that fits in batch_bytes, and its record count."""
    from oncelog.protocol.records.batch import build_batch
    from oncelog.protocol.records.record import encode_record

    value = os.urandom(spec["size"])
    records: list[bytes] = []
    used = BATCH_HEADER
    while True:
        rec = encode_record(offset_delta=len(records), key=None, value=value)
        if used + len(rec) > spec["batch_bytes"]:
            break
        records.append(rec)
        used += len(rec)
    per_batch = len(records)
    now = int(time.time() * 1000)
    batch = bytearray(
        build_batch(
            base_offset=0,
            records=b"".join(records),
            record_count=per_batch,
            last_offset_delta=per_batch - 1,
            base_timestamp=now,
            max_timestamp=now,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
        )
    )
    return batch, per_batch


def _init_producer_id(sock: socket.socket, rc: Any) -> tuple[int, int]:
    """A producer id and epoch for an idempotent (not transactional) producer."""
    import datetime

    from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
    from kio.static.primitive import i32Timedelta

    from oncelog.protocol.codec import encode_entity

    init = InitProducerIdRequest(
        transactional_id=None,
        transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
    )
    sock.sendall(rc.request(22, 4, encode_entity(init)))
    _, resp = rc.decode_response(22, 4, _recv_frame(sock))
    if resp.error_code != 0:
        raise RuntimeError(f"InitProducerId: {resp.error_code!r}")
    return int(resp.producer_id), int(resp.producer_epoch)


def worker_raw_produce(spec: dict[str, Any]) -> dict[str, Any]:
    """Idempotent Produce v9 requests of one ~1 MiB batch each, pipelined on one connection.

    The batch is built once; per request only its base sequence and CRC change, so the
    client costs about one CRC32C pass per MiB and the broker's own limit shows.
    """
    from oncelog.protocol.records.batch import compute_crc

    rc = _raw_imports()
    topic, parts = spec["topic"], spec["partitions"]
    sock = socket.create_connection(("127.0.0.1", spec["port"]), timeout=spec["timeout"])
    pid, epoch = _init_producer_id(sock, rc)
    batch, per_batch = _template_batch(spec, pid, epoch)
    framing = []  # per partition: (body before the batch, body after it)
    for p in range(parts):
        body = rc.produce_body({topic: [(p, bytes(batch))]}, acks=-1, timeout_ms=30_000)
        at = body.find(batch)
        framing.append((body[:at], body[at + len(batch) :]))
    batches = spec["n"] // per_batch
    batches -= batches % parts
    inflight = spec["inflight"]
    pending = 0
    acked = errors = 0
    first_error = None

    def read_one() -> None:
        nonlocal acked, errors, first_error
        _, produced = rc.decode_response(0, 9, _recv_frame(sock))
        for presp in produced.responses[0].partition_responses:
            if presp.error_code != 0:
                errors += 1
                first_error = first_error or repr(presp.error_code)
            else:
                acked += per_batch

    t0 = time.perf_counter()
    for i in range(batches):
        p = i % parts
        struct.pack_into(">i", batch, 53, (i // parts) * per_batch)  # base sequence
        struct.pack_into(">I", batch, 17, compute_crc(batch, 0, len(batch)))
        before, after = framing[p]
        head = rc.header(0, 9, i + 1)
        frame_len = len(head) + len(before) + len(batch) + len(after)
        if pending >= inflight:
            read_one()
            pending -= 1
        _sendmsg_all(sock, [struct.pack(">i", frame_len) + head + before, batch, after])
        pending += 1
    while pending:
        read_one()
        pending -= 1
    seconds = time.perf_counter() - t0
    sock.close()
    n = batches * per_batch
    ok = acked == n and errors == 0
    return {
        "ok": ok,
        "error": None if ok else f"acked {acked}/{n}, {errors} errors (first: {first_error})",
        "n": acked,
        "seconds": seconds,
        "records_per_batch": per_batch,
    }


def _uvarint(buf: memoryview, pos: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _skip_tags(buf: memoryview, pos: int) -> int:
    count, pos = _uvarint(buf, pos)
    for _ in range(count):
        _, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        pos += size
    return pos


def _walk_fetch_v12(buf: memoryview, offsets: dict[int, int]) -> tuple[int, int, list[str]]:
    """Records and stored bytes in a Fetch v12 response; advances `offsets` past the last
    whole batch of each partition. Only batch headers are read (as a zero-copy client would)."""
    pos = _skip_tags(buf, 4)  # correlation id, header tags
    _throttle, error, _session = struct.unpack_from(">ihi", buf, pos)
    pos += 10
    errors = [f"top-level error {error}"] if error else []
    records = stored = 0
    ntopics, pos = _uvarint(buf, pos)
    for _ in range(ntopics - 1):
        name_len, pos = _uvarint(buf, pos)
        pos += name_len - 1
        nparts, pos = _uvarint(buf, pos)
        for _ in range(nparts - 1):
            partition, perr = struct.unpack_from(">ih", buf, pos)
            pos += 6 + 24  # high watermark, last stable offset, log start offset
            if perr:
                errors.append(f"partition {partition}: error {perr}")
            naborted, pos = _uvarint(buf, pos)
            for _ in range(max(naborted - 1, 0)):
                pos = _skip_tags(buf, pos + 16)
            pos += 4  # preferred read replica
            rlen, pos = _uvarint(buf, pos)
            end = pos + max(rlen - 1, 0)
            at = pos
            while at + BATCH_HEADER <= end:
                base, blen = struct.unpack_from(">qi", buf, at)
                if at + 12 + blen > end:
                    break  # a partial batch at the end of the answer
                (last_delta,) = struct.unpack_from(">i", buf, at + 23)
                (count,) = struct.unpack_from(">i", buf, at + 57)
                records += count
                stored += 12 + blen
                offsets[partition] = base + last_delta + 1
                at += 12 + blen
            pos = _skip_tags(buf, end)
        pos = _skip_tags(buf, pos)
    return records, stored, errors


def worker_raw_fetch(spec: dict[str, Any]) -> dict[str, Any]:
    """Fetch v12 reader, one request at a time, into one reusable buffer; reads every record."""
    import datetime

    from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
    from kio.static.primitive import i32, i32Timedelta

    from oncelog.protocol.codec import encode_entity

    rc = _raw_imports()
    topic, parts, n = spec["topic"], spec["partitions"], spec["n"]
    deadline = time.monotonic() + spec["timeout"]
    offsets = dict.fromkeys(range(parts), 0)
    buf = bytearray(spec["fetch_max_bytes"] + MIB)
    view = memoryview(buf)
    head = memoryview(bytearray(4))
    received = stored = 0
    errors: list[str] = []
    sock = socket.create_connection(("127.0.0.1", spec["port"]), timeout=spec["timeout"])
    t0 = time.perf_counter()
    corr = 0
    while received < n and time.monotonic() < deadline and not errors:
        corr += 1
        req = FetchRequest(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=500)),
            min_bytes=i32(1),
            max_bytes=i32(spec["fetch_max_bytes"]),
            topics=(
                FetchTopic(
                    topic=topic,
                    partitions=tuple(
                        FetchPartition(
                            partition=i32(p),
                            fetch_offset=offsets[p],
                            partition_max_bytes=i32(spec["partition_max_bytes"]),
                        )
                        for p in range(parts)
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        sock.sendall(rc.request(1, 12, encode_entity(req), corr))
        _recv_exact(sock, head)
        (size,) = struct.unpack(">i", head)
        if size > len(buf):
            buf = bytearray(size)
            view = memoryview(buf)
        _recv_exact(sock, view[:size])
        got, nbytes, errors = _walk_fetch_v12(view[:size], offsets)
        received += got
        stored += nbytes
    seconds = time.perf_counter() - t0
    sock.close()
    ok = received == n and not errors
    return {
        "ok": ok,
        "error": None if ok else f"received {received}/{n} records; {errors[:3]}",
        "n": received,
        "seconds": seconds,
        "fetches": corr,
        "stored_bytes": stored,
    }


WORKERS = {
    "_sink": worker_sink,
    "_source": worker_source,
    "_sendfile": worker_sendfile,
    "_discard": worker_discard,
    "_rk_produce": worker_rk_produce,
    "_rk_consume": worker_rk_consume,
    "_raw_produce": worker_raw_produce,
    "_raw_fetch": worker_raw_fetch,
}


def _worker_main(role: str, spec_json: str) -> int:
    spec = json.loads(spec_json)
    spec["role"] = role.lstrip("_")
    pid = os.getpid()
    user0, sys0 = pc._cpu_split(pid)
    try:
        result = WORKERS[role](spec)
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    user1, sys1 = pc._cpu_split(pid)
    result["client_cpu_s"] = (user1 - user0) + (sys1 - sys0)
    result["client_sys_s"] = sys1 - sys0
    print(json.dumps(result), flush=True)
    return 0


# -- orchestration -------------------------------------------------------------------------


def _spawn(role: str, spec: dict[str, Any], pass_fds: tuple[int, ...] = ()) -> Any:
    return pc._track(
        subprocess.Popen(
            [sys.executable, str(SCRIPT), role, json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=pass_fds,
        )
    )


def _collect(proc: Any, role: str, timeout: float) -> dict[str, Any]:
    """The worker's result (its last stdout line); killed by pid if it overruns."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"ok": False, "error": f"{role} killed after {timeout:.0f}s"}
    lines = out.strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"ok": False, "error": f"{role} exit {proc.returncode}: {err.strip()[-500:]}"}
    return dict(json.loads(lines[-1]))


def run_pair(
    receiver_role: str, sender_role: str, spec: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """One receiver (accepting on a socket bound here) and one sender; MB/s as received."""
    with socket.create_server(("127.0.0.1", 0)) as lsock:
        port = lsock.getsockname()[1]
        base = {**spec, "timeout": timeout}
        receiver = _spawn(receiver_role, {**base, "listen_fd": lsock.fileno()}, (lsock.fileno(),))
    sender = _spawn(sender_role, {**base, "port": port})
    sent = _collect(sender, sender_role, timeout + 30)
    got = _collect(receiver, receiver_role, timeout + 30)
    ok = bool(sent.get("ok") and got.get("ok"))
    return {
        "ok": ok,
        "error": None if ok else f"sender: {sent.get('error')}; receiver: {got.get('error')}",
        "seconds": got.get("seconds", float("nan")),
        "payload_bytes": got.get("bytes", 0),
        "wire_bytes": got.get("bytes", 0),
        "client_cpu_s": got.get("client_cpu_s", math.nan) + sent.get("client_cpu_s", math.nan),
        "receiver_cpu_s": got.get("client_cpu_s", math.nan),
        "sender_cpu_s": sent.get("client_cpu_s", math.nan),
        "receiver_sys_s": got.get("client_sys_s", math.nan),
        "sender_sys_s": sent.get("client_sys_s", math.nan),
    }


def log_stats(data_dir: Path, topic: str, partitions: int) -> dict[str, Any]:
    """Batches, records and bytes stored for the topic, read from the segment files' headers."""
    sizes: list[int] = []
    records = 0
    for p in range(partitions):
        for seg in sorted((data_dir / f"{topic}-{p}").glob("*.log")):
            fd = os.open(seg, os.O_RDONLY)
            try:
                end, pos = os.fstat(fd).st_size, 0
                while pos + BATCH_HEADER <= end:
                    head = os.pread(fd, BATCH_HEADER, pos)
                    (length,) = struct.unpack_from(">i", head, 8)
                    (count,) = struct.unpack_from(">i", head, 57)
                    sizes.append(12 + length)
                    records += count
                    pos += 12 + length
            finally:
                os.close(fd)
    return {
        "batches": len(sizes),
        "records": records,
        "stored_bytes": sum(sizes),
        "batch_avg": sum(sizes) / len(sizes) if sizes else 0.0,
        "batch_min": min(sizes, default=0),
        "batch_max": max(sizes, default=0),
    }


class Broker:
    """A fresh broker (own data dir) for one case, tracked for cleanup, removed afterwards."""

    def __init__(self, workdir: Path, overrides: dict[str, str]) -> None:
        sys.path.insert(0, str(REPO))
        from tests.broker_process import BrokerProcess

        self.data_dir = workdir / f"data-{uuid.uuid4().hex[:6]}"
        self.proc = BrokerProcess(self.data_dir, overrides)
        self.proc.start()
        assert self.proc.proc is not None
        pc._track(self.proc.proc)
        self.pid = self.proc.proc.pid
        self.port = self.proc.port

    def create_topic(self, topic: str, partitions: int) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.proc.bootstrap})
        for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
            future.result(30)
        del admin

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.proc.log_path.unlink()


def _phase(broker: Broker, role: str, spec: dict[str, Any], args: Any, tag: str) -> dict:
    prof = None
    if args.profile is not None:
        prof = pc.Profiler(broker.pid, args.profile / f"{tag}.txt")
    user0, sys0 = pc._cpu_split(broker.pid)
    result = pc._run_worker(role, spec, args.timeout, script=SCRIPT)
    user1, sys1 = pc._cpu_split(broker.pid)
    result["broker_cpu_s"] = (user1 - user0) + (sys1 - sys0)
    result["broker_sys_s"] = sys1 - sys0
    if prof is not None:
        prof.stop()
        result["profile"] = str(prof.out)
        result["profile_wall"] = prof.wall
    return result


def run_oncelog(client: str, parts: int, args: Any, workdir: Path) -> dict[str, dict]:
    """Fresh broker, one topic; produce then consume with `client`; the broker is removed."""
    overrides = {"message.max.bytes": str(2 * args.batch_bytes)}
    overrides.update(kv.split("=", 1) for kv in args.broker_conf)
    broker = Broker(workdir, overrides)
    try:
        topic = f"bulk-{parts}p-{uuid.uuid4().hex[:6]}"
        broker.create_topic(topic, parts)
        broker.create_topic(f"{topic}-warmup", 1)
        n = int(args.gib * GIB) // args.value_size
        n -= n % parts
        spec = {
            "bootstrap": f"127.0.0.1:{broker.port}",
            "port": broker.port,
            "topic": topic,
            "warmup_topic": f"{topic}-warmup",
            "n": n,
            "size": args.value_size,
            "partitions": parts,
            "batch_bytes": args.batch_bytes,
            "inflight": args.raw_inflight,
            "fetch_max_bytes": args.fetch_max_mib * MIB,
            "partition_max_bytes": args.partition_fetch_mib * MIB,
            "rk_conf": dict(kv.split("=", 1) for kv in args.rk_conf),
        }
        tag = f"{client}-{parts}p-{uuid.uuid4().hex[:4]}"
        out: dict[str, dict] = {}
        prod = _phase(broker, f"_{client}_produce", spec, args, f"{tag}-produce")
        stats = log_stats(broker.data_dir, topic, parts)
        prod.update(stats)
        out["produce"] = prod
        if prod.get("ok") and stats["records"] != prod.get("n"):
            prod["ok"] = False
            prod["error"] = f"{stats['records']} records on disk, {prod.get('n')} acked"
        if prod.get("ok"):
            spec["n"] = prod["n"]
            role = "_rk_consume" if client == "rk" else "_raw_fetch"
            cons = _phase(broker, role, spec, args, f"{tag}-consume")
            cons["stored_bytes"] = stats["stored_bytes"]
            out["consume"] = cons
        for result in out.values():
            result["payload_bytes"] = result.get("n", 0) * args.value_size
            result["wire_bytes"] = stats["stored_bytes"]
        return out
    finally:
        broker.close()


def _rates(result: dict[str, Any]) -> None:
    sec = result.get("seconds") or math.nan
    result["payload_mb_s"] = result.get("payload_bytes", 0) / 1e6 / sec
    result["wire_mb_s"] = result.get("wire_bytes", 0) / 1e6 / sec
    gb = result.get("wire_bytes", 0) / 1e9 or math.nan
    result["broker_cpu_s_per_gb"] = result.get("broker_cpu_s", math.nan) / gb
    result["client_cpu_s_per_gb"] = result.get("client_cpu_s", math.nan) / gb


def run_limits(args: Any, workdir: Path) -> dict[str, dict]:
    """limit/produce (socket -> file), then limit/consume (sendfile of that file -> socket)."""
    path = workdir / "limit.bin"
    spec = {"bytes": int(args.gib * GIB) // MIB * MIB, "path": str(path)}
    out: dict[str, dict] = {}
    try:
        out["produce"] = run_pair("_sink", "_source", spec, args.timeout)
        if out["produce"]["ok"]:
            out["consume"] = run_pair("_discard", "_sendfile", spec, args.timeout)
    finally:
        with contextlib.suppress(OSError):
            path.unlink()
    for phase, result in out.items():
        # The broker's side of the limit: the receiver in produce, the sender in consume.
        role = "receiver" if phase == "produce" else "sender"
        result["broker_cpu_s"] = result[f"{role}_cpu_s"]
        result["broker_sys_s"] = result[f"{role}_sys_s"]
        other = "sender" if phase == "produce" else "receiver"
        result["client_cpu_s"] = result[f"{other}_cpu_s"]
        _report(f"limit/{phase}", result)
    return out


def run_repeat(
    args: Any, workdir: Path, cases: list[tuple[str, int]], results: dict[str, list[dict]]
) -> None:
    """One pass over every case, each right after a fresh measurement of the limits (the
    machine is shared: its load moves within minutes); appends to `results[case name]`."""
    for client, parts in cases:
        limits = run_limits(args, workdir)
        for phase, result in limits.items():
            results.setdefault(f"limit/{phase}", []).append(result)
        out = run_oncelog(client, parts, args, workdir)
        for phase, result in out.items():
            name = f"{CLIENT_NAMES[client]} {parts}p/{phase}"
            limit = limits.get(phase, {})
            result["limit_wire_mb_s"] = limit.get("wire_mb_s", math.nan)
            _report(name, result)
            ok = result.get("ok") and limit.get("ok")
            result["ratio"] = result["wire_mb_s"] / result["limit_wire_mb_s"] if ok else math.nan
            results.setdefault(name, []).append(result)


CLIENT_NAMES = {"rk": "oncelog rdkafka", "raw": "oncelog raw"}


def _report(name: str, result: dict[str, Any]) -> None:
    _rates(result)
    result["loadavg"] = os.getloadavg()[0]
    batch = f" batch avg {result['batch_avg'] / MIB:.3f} MiB" if "batch_avg" in result else ""
    status = "ok" if result.get("ok") else f"FAILED: {result.get('error')}"
    print(
        f"  {name:<30} {result['wire_mb_s']:8.1f} MB/s wire {result['payload_mb_s']:8.1f} "
        f"payload {result.get('seconds', 0):6.2f}s broker "
        f"{result.get('broker_cpu_s', math.nan):6.2f}s client "
        f"{result.get('client_cpu_s', math.nan):6.2f}s{batch} "
        f"load {result['loadavg']:.1f}  {status}",
        flush=True,
    )


def _med(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def _f(value: float, digits: int = 1) -> str:
    return "-" if math.isnan(value) else f"{value:,.{digits}f}"


def summarize(results: dict[str, list[dict]]) -> list[dict[str, Any]]:
    """Median per case over its runs; ratios were taken against the limit run just before."""
    rows = []
    for name, runs in results.items():
        good = [r for r in runs if r.get("ok")]

        def med(key: str, good: list[dict] = good) -> float:
            return _med([float(r.get(key, math.nan)) for r in good])

        rows.append(
            {
                "case": name,
                "runs_ok": len(good),
                "runs": len(runs),
                "payload_mb_s": med("payload_mb_s"),
                "wire_mb_s": med("wire_mb_s"),
                "ratio": med("ratio"),
                "broker_cpu_s_per_gb": med("broker_cpu_s_per_gb"),
                "client_cpu_s_per_gb": med("client_cpu_s_per_gb"),
                "batch_avg_mib": med("batch_avg") / MIB,
                "loadavg": med("loadavg"),
            }
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | runs ok | wire MB/s | payload MB/s | ratio to limit | broker CPU s/GB "
        "| client CPU s/GB | avg batch MiB | load avg |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        limit = r["case"].startswith("limit/")
        lines.append(
            "| "
            + " | ".join(
                [
                    r["case"],
                    f"{r['runs_ok']}/{r['runs']}",
                    _f(r["wire_mb_s"]),
                    _f(r["payload_mb_s"]),
                    "1 (limit)" if limit else _f(r["ratio"], 2),
                    _f(r["broker_cpu_s_per_gb"], 2),
                    _f(r["client_cpu_s_per_gb"], 2),
                    _f(r["batch_avg_mib"], 3),
                    _f(r["loadavg"], 1),
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=2.0, help="volume per case, GiB of payload")
    p.add_argument("--value-size", type=int, default=10 * 1024, help="record value bytes")
    p.add_argument("--batch-bytes", type=int, default=MIB, help="producer batch size")
    p.add_argument("--partitions", default="1", help="comma list of partition counts")
    p.add_argument("--clients", default="rk,raw", help="comma list of rk (librdkafka), raw")
    p.add_argument("--raw-inflight", type=int, default=5, help="raw producer's pipeline depth")
    p.add_argument("--fetch-max-mib", type=int, default=64, help="fetch.max.bytes in MiB")
    p.add_argument(
        "--partition-fetch-mib", type=int, default=16, help="max.partition.fetch.bytes in MiB"
    )
    p.add_argument(
        "--rk-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra librdkafka setting for both rdkafka clients (repeatable)",
    )
    p.add_argument(
        "--broker-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker setting (--override) for every oncelog case (repeatable)",
    )
    p.add_argument(
        "--oncelog-rev",
        help="run the broker from `git archive REV` instead of the installed work tree",
    )
    p.add_argument("--repeat", type=int, default=1, help="passes over all cases; medians shown")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    p.add_argument("--dir", type=Path, help="where data dirs and the limit file go (/tmp)")
    p.add_argument("--profile", type=Path, help="py-spy raw profiles of the broker go here")
    p.add_argument("--json", type=Path, help="write every result as JSON here")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    atexit.register(pc._kill_started)
    signal.signal(signal.SIGTERM, pc._on_signal)
    cases = [
        (c.strip(), int(p))
        for p in args.partitions.split(",")
        for c in args.clients.split(",")
        if c.strip()
    ]
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="oncelog-bulk-", dir=args.dir))
    if args.oncelog_rev:
        pc._use_snapshot(args.oncelog_rev, workdir / "oncelog-src")
    info = pc.machine_info(args.oncelog_rev)
    if args.broker_conf:
        info["broker_conf"] = " ".join(args.broker_conf)
    info["loadavg_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print("machine:", json.dumps(info), flush=True)
    results: dict[str, list[dict]] = {}
    try:
        for i in range(args.repeat):
            print(f"repeat {i + 1}/{args.repeat}", flush=True)
            run_repeat(args, workdir, cases, results)
    finally:
        pc._kill_started()
        shutil.rmtree(workdir, ignore_errors=True)
    info["loadavg_end"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    rows = summarize(results)
    print("\nmachine:", json.dumps(info))
    print(
        f"{args.gib} GiB per case, values {args.value_size} B, batches up to "
        f"{args.batch_bytes} B, median of {args.repeat} repeat(s); MB/s = 1e6 B/s\n"
    )
    print(render(rows))
    if args.profile:
        for name, runs in results.items():
            for result in runs:
                if result.get("profile") and Path(result["profile"]).exists():
                    summary = pc.summarize_profile(Path(result["profile"]), result["profile_wall"])
                    result["profile_summary"] = summary
                    print(f"\n### {name}: busy {summary.get('busy_pct', 0):.0f}% of the phase")
                    for title in ("self", "self_by_file", "inclusive"):
                        print(f"{title}:")
                        for fn, share in summary.get(title, []):
                            print(f"  {share:5.1f}%  {fn}")
    if args.json:
        payload = {"machine": info, "args": vars(args), "rows": rows, "runs": results}
        args.json.write_text(json.dumps(payload, indent=2, default=str))
    return 0 if all(r["runs_ok"] == r["runs"] for r in rows) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in WORKER_ROLES:
        sys.exit(_worker_main(sys.argv[1], sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
