"""Idempotent producers (confluent-kafka, acks=all, 5 in flight) against the real broker.

1. Lost Produce responses: a proxy of the test's own (tests/integration/proxy.py) drops a
   seeded share of Produce responses, then closes the connection, or drops them silently with
   a short client-side timeout; the producer retries, and every message is stored exactly
   once, in send order.
2. The broker's rules over raw requests: a retry older than the five cached batches is
   refused and not appended; a retry inside the window answers the original offset and
   appends nothing; stale epoch, sequence gap and a never-issued producer id are refused.
3. SIGKILL while an idempotent producer is sending (the proxy swallows the last Produce
   responses, so batches are appended but unacknowledged), restart on the same port, same
   producer session: no duplicate, no gap, send order, with the producer state recovered
   from a fresh snapshot, a stale snapshot plus newer segments, no snapshot, or a damaged one.
4. The stated limitation: a new producer instance gets a new producer id (also after a broker
   restart), and the broker does not deduplicate across producer ids.
"""

from __future__ import annotations

import datetime
import functools
import threading
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Message, Producer
from kio.schema.init_producer_id.v4.request import InitProducerIdRequest
from kio.static.primitive import i32Timedelta

from oncelog.protocol.codec import encode_entity
from oncelog.protocol.records.batch import BatchHeader, build_batch, iter_batches
from oncelog.protocol.records.record import encode_record
from tests.broker_process import BrokerProcess
from tests.integration.helpers import (
    TIMEOUT,
    Rec,
    assert_acked_layout,
    assert_same_records,
    confluent_read,
    create_topic,
    end_offsets,
    produce_all,
    wait_until,
)
from tests.integration.proxy import DroppingProxy
from tests.integration.rawclient import (
    LIST_OFFSETS,
    PRODUCE,
    RawClient,
    list_offsets_body,
    produce_body,
)

pytestmark = pytest.mark.integration

INIT_PRODUCER_ID = 22
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
UNKNOWN_PRODUCER_ID = 59

PARTITIONS = 4
SMALL_SEGMENTS = {"log.segment.bytes": "16384"}


def idempotent_producer(bootstrap: str, **extra: object) -> Producer:
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "max.in.flight.requests.per.connection": 5,
        "linger.ms": 2,
        "batch.num.messages": 25,
        "message.timeout.ms": 90_000,
        "retry.backoff.ms": 50,
        "retry.backoff.max.ms": 200,
        "reconnect.backoff.ms": 20,
        "reconnect.backoff.max.ms": 200,
    }
    conf.update(extra)
    return Producer(conf)


def value_of(prefix: str, i: int) -> bytes:
    return f"{prefix}-{i:07d}|".encode() + bytes((i * 13 + j) % 256 for j in range(i % 29))


def messages(prefix: str, count: int) -> list[tuple[bytes, bytes | None, int | None]]:
    return [(f"{prefix}-{i}".encode(), value_of(prefix, i), None) for i in range(count)]


def check_exactly_once(
    broker: BrokerProcess, topic: str, acked_in_send_order: list[Rec], partitions: int
) -> None:
    """Delivery reports name dense offsets per partition in send order, and the log holds
    exactly those records: no duplicate, no gap, nothing else, same order."""
    assert_acked_layout(acked_in_send_order, partitions)
    ends = end_offsets(acked_in_send_order, partitions)
    log = confluent_read(broker.bootstrap, topic, ends, timeout=60)
    assert_same_records(acked_in_send_order, log)


# -- 1. dropped Produce responses ------------------------------------------------------------


SILENT = {"request.timeout.ms": 1000, "socket.timeout.ms": 1000}


@pytest.mark.parametrize(
    ("close_after_drop", "count", "max_drops", "timeouts"),
    [(True, 4000, None, {}), (False, 2000, 6, SILENT)],
    ids=["drop-and-close", "drop-silently"],
)
def test_dropped_produce_responses_store_each_message_once(
    broker_factory: type[BrokerProcess],
    close_after_drop: bool,
    count: int,
    max_drops: int | None,
    timeouts: dict[str, int],
) -> None:
    """Without closing, librdkafka notices a lost response only by its client-side timeout
    for requests in flight, socket.timeout.ms (request.timeout.ms is the broker's ack
    timeout), so the silent variant shortens it and bounds the number of drops."""
    with DroppingProxy(
        drop_share=0.25, seed=20240611, close_after_drop=close_after_drop, max_drops=max_drops
    ) as proxy:
        # The broker advertises the proxy, so librdkafka keeps talking through it after
        # the bootstrap Metadata.
        broker = broker_factory(
            "data", {"advertised.listeners": f"PLAINTEXT://{proxy.address}"}
        ).start()
        proxy.start(broker.port)
        topic = "dropped-responses"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        producer = idempotent_producer(proxy.address, **timeouts)
        started = time.monotonic()
        acked = produce_all(
            producer, topic, messages("d", count), partition_of=lambda i: i % PARTITIONS
        )
        elapsed = time.monotonic() - started
        producer.close()
        stats = proxy.snapshot()
    assert stats.produce_responses_dropped > 0, f"the proxy dropped nothing: {stats}"
    assert stats.produce_responses_forwarded > 0, stats
    if close_after_drop:
        assert stats.closed_after_drop == stats.produce_responses_dropped, stats
        assert stats.connections > stats.closed_after_drop, stats
    assert elapsed < 60, f"producing took {elapsed:.1f}s with {stats}"

    # Read straight from the broker: advertise its own address again.
    del broker.overrides["advertised.listeners"]
    broker.restart()
    check_exactly_once(broker, topic, acked, PARTITIONS)


# -- 2. broker rules over raw requests -------------------------------------------------------


def init_producer_id(client: RawClient) -> tuple[int, int]:
    body = encode_entity(
        InitProducerIdRequest(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(seconds=60)),
        )
    )
    response = client.call(INIT_PRODUCER_ID, 4, body)
    assert response.error_code == 0, response
    return int(response.producer_id), int(response.producer_epoch)


def seq_batch(producer_id: int, epoch: int, base_sequence: int, tag: str, count: int = 3) -> bytes:
    now = int(time.time() * 1000)
    records = b"".join(
        encode_record(offset_delta=i, key=None, value=f"{tag}-{i}".encode()) for i in range(count)
    )
    return build_batch(
        base_offset=0,
        records=records,
        record_count=count,
        last_offset_delta=count - 1,
        base_timestamp=now,
        max_timestamp=now,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=base_sequence,
    )


def raw_produce(client: RawClient, topic: str, batch: bytes) -> tuple[int, int]:
    response = client.call(PRODUCE, 9, produce_body({topic: [(0, batch)]}))
    (partition,) = response.responses[0].partition_responses
    return int(partition.error_code), int(partition.base_offset)


def log_end(client: RawClient, topic: str) -> int:
    response = client.call(LIST_OFFSETS, 7, list_offsets_body(topic, [0]))
    (partition,) = response.topics[0].partitions
    assert partition.error_code == 0, partition
    return int(partition.offset)


def test_sequence_rules_over_raw_requests(broker: BrokerProcess) -> None:
    topic = "raw-idempotence"
    create_topic(broker.bootstrap, topic, 1)
    with RawClient(broker.port) as client:
        pid, epoch = init_producer_id(client)
        pid2, epoch2 = init_producer_id(client)
        assert epoch == epoch2 == 0
        assert pid >= 0 and pid2 != pid

        batches = [seq_batch(pid, 0, 3 * n, f"b{n + 1}") for n in range(7)]
        for n, batch in enumerate(batches):
            assert raw_produce(client, topic, batch) == (0, 3 * n), f"batch {n + 1}"
        assert log_end(client, topic) == 21

        # Batch 1 is older than the five cached batches: refused, never appended.
        assert raw_produce(client, topic, batches[0])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert log_end(client, topic) == 21
        assert raw_produce(client, topic, batches[1])[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert log_end(client, topic) == 21
        # Batches 3..7 are cached: success with the original offsets, nothing written.
        assert raw_produce(client, topic, batches[4]) == (0, 12)
        assert raw_produce(client, topic, batches[2]) == (0, 6)
        assert raw_produce(client, topic, batches[6]) == (0, 18)
        assert log_end(client, topic) == 21

        # A gap after the last sequence (20): next expected is 21.
        gap = seq_batch(pid, 0, 22, "gap")
        assert raw_produce(client, topic, gap)[0] == OUT_OF_ORDER_SEQUENCE_NUMBER
        assert log_end(client, topic) == 21

        # A higher epoch starting at 0 is accepted; the old epoch is then fenced.
        assert raw_produce(client, topic, seq_batch(pid, 1, 0, "e1")) == (0, 21)
        stale = seq_batch(pid, 0, 21, "stale")
        assert raw_produce(client, topic, stale)[0] == INVALID_PRODUCER_EPOCH
        assert log_end(client, topic) == 24
        # A new epoch that does not start at 0 is a sequence error for a known producer.
        assert raw_produce(client, topic, seq_batch(pid, 2, 5, "e2"))[0] == (
            OUT_OF_ORDER_SEQUENCE_NUMBER
        )
        assert log_end(client, topic) == 24

        # An id this cluster never issued.
        unknown = seq_batch(10**12, 0, 0, "unknown")
        assert raw_produce(client, topic, unknown)[0] == UNKNOWN_PRODUCER_ID
        assert log_end(client, topic) == 24

        # The second producer id is unknown to the partition: accepted at any sequence.
        assert raw_produce(client, topic, seq_batch(pid2, 0, 7, "p2")) == (0, 24)
        assert log_end(client, topic) == 27

    # The stored records are each batch once, in order.
    expected_tags = [f"b{n}" for n in range(1, 8)] + ["e1", "p2"]
    expected = [f"{tag}-{i}".encode() for tag in expected_tags for i in range(3)]
    log = confluent_read(broker.bootstrap, topic, {0: 27})
    assert [r.value for r in log[0]] == expected
    assert [r.offset for r in log[0]] == list(range(27))


# -- 3. SIGKILL while sending ------------------------------------------------------------------


#: How far the Sender may run ahead of its acknowledgements.
UNACKED = 1000


class Sender:
    """An idempotent producer sending `count` messages from a background thread, paced so
    that the broker can be stopped mid-stream; delivery reports are kept by send index."""

    def __init__(self, bootstrap: str, topic: str, count: int) -> None:
        self.topic = topic
        self.messages = messages("k", count)
        self.producer = idempotent_producer(bootstrap)
        self.reports: list[Rec | None] = [None] * count
        self.failed: dict[int, str] = {}
        self.acked = 0
        self.error: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="idempotent-sender", daemon=True)

    def _callback(self, index: int, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self.failed[index] = str(err)
            return
        self.reports[index] = Rec(msg.partition(), msg.offset(), msg.key(), msg.value())
        self.acked += 1

    def _run(self) -> None:
        try:
            for i, (key, value, _) in enumerate(self.messages):
                # At most UNACKED messages ahead of the acknowledgements: while the broker
                # is down the sender waits instead of queueing the rest, so the stream is
                # still going after a slow restart (the test stops it again later).
                while i - self.acked - len(self.failed) >= UNACKED:
                    self.producer.poll(0.01)
                while True:
                    try:
                        self.producer.produce(
                            self.topic,
                            key=key,
                            value=value,
                            partition=i % PARTITIONS,
                            on_delivery=functools.partial(self._callback, i),
                        )
                        break
                    except BufferError:
                        self.producer.poll(0.05)
                if i % 50 == 49:
                    self.producer.poll(0.01)  # pace: stops must land mid-stream
            remaining = self.producer.flush(100)
            assert remaining == 0, f"{remaining} messages still queued after flush"
        except BaseException as exc:  # reported by the main thread
            self.error.append(exc)

    def start(self) -> None:
        self.thread.start()

    def wait_acked(self, n: int) -> None:
        wait_until(lambda: self.acked >= n or bool(self.failed), TIMEOUT, f"{n} acks")
        assert not self.failed, f"deliveries failed: {list(self.failed.items())[:5]}"
        assert self.acked < len(self.messages), "everything was delivered before the stop"

    def finish(self, timeout: float = 120) -> list[Rec]:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "producer thread did not finish"
        assert not self.error, f"producer thread failed: {self.error[0]!r}"
        assert not self.failed, (
            f"{len(self.failed)} deliveries failed: {list(self.failed.items())[:5]}"
        )
        missing = [i for i, r in enumerate(self.reports) if r is None]
        assert not missing, f"no delivery report for {len(missing)} messages: {missing[:10]}"
        return [r for r in self.reports if r is not None]


def partition_dirs(broker: BrokerProcess, topic: str) -> list[Path]:
    dirs = sorted(broker.data_dir.glob(f"{topic}-*"))
    assert len(dirs) == PARTITIONS, dirs
    return dirs


def snapshots(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.snapshot"))


def snapshot_offset(path: Path) -> int:
    return int(path.name.removesuffix(".snapshot"))


def stored_batches(directory: Path) -> list[BatchHeader]:
    """Headers of the complete batches in a partition's segment files, in offset order."""
    out = []
    for segment in sorted(directory.glob("*.log")):
        out.extend(header for _, header in iter_batches(segment.read_bytes()))
    return out


def files_log_end(directory: Path) -> int:
    headers = stored_batches(directory)
    return max((h.next_offset for h in headers), default=0)


def flip_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    assert len(data) > 12, path
    for pos in (len(data) // 2, len(data) - 1):
        data[pos] ^= 0x5A
    path.write_bytes(bytes(data))


VARIANTS = ["fresh-snapshot", "stale-snapshot", "snapshots-deleted", "snapshot-corrupted"]


def wait_for_roll_snapshots(dirs: list[Path], timeout: float = 15.0) -> None:
    """The snapshot noted at a segment roll is written by the broker's flush of rolled
    segments, once a second in a worker thread: wait until every partition has one."""
    deadline = time.monotonic() + timeout
    while not all(snapshots(d) for d in dirs):
        assert time.monotonic() < deadline, "no producer snapshot after segment rolls"
        time.sleep(0.05)


def tamper_while_down(variant: str, dirs: list[Path]) -> None:
    """Check or change the snapshots of a killed broker before it restarts."""
    if variant == "stale-snapshot":
        behind = 0
        for directory in dirs:
            snaps = snapshots(directory)
            assert snaps, f"no snapshot written at segment rolls in {directory}"
            assert len(list(directory.glob("*.log"))) > 1, directory
            end = files_log_end(directory)
            assert snapshot_offset(snaps[-1]) <= end
            behind += snapshot_offset(snaps[-1]) < end
        assert behind > 0, "every snapshot is at its log end; nothing to replay"
    elif variant == "snapshots-deleted":
        deleted = 0
        for directory in dirs:
            for path in snapshots(directory):
                path.unlink()
                deleted += 1
        assert deleted > 0, "there were no snapshots to delete"
    elif variant == "snapshot-corrupted":
        damaged = 0
        for directory in dirs:
            snaps = snapshots(directory)
            if snaps:
                flip_bytes(snaps[-1])
                damaged += 1
        assert damaged > 0, "there were no snapshots to damage"


def check_restart_log(variant: str, text: str) -> None:
    if variant == "snapshots-deleted":
        assert "no usable producer snapshot" in text, text[-3000:]
    elif variant == "snapshot-corrupted":
        assert "skipping damaged producer snapshot" in text, text[-3000:]
    else:
        assert "damaged producer snapshot" not in text, text[-3000:]


def hold_produce_responses(proxy: DroppingProxy, count: int = 3) -> None:
    """Swallow every Produce response from now on, until `count` were swallowed: the broker
    has then appended batches whose acknowledgements the producer never got, so its
    retries after the restart are duplicates the recovered state must recognise."""
    before = proxy.snapshot().produce_responses_dropped
    proxy.configure(drop_share=1.0, close_after_drop=False)
    wait_until(
        lambda: proxy.snapshot().produce_responses_dropped >= before + count,
        TIMEOUT,
        f"{count} swallowed Produce responses",
    )
    time.sleep(0.2)  # and whatever else is in flight


def clean_restart_with_snapshot_at_log_end(
    broker: BrokerProcess, proxy: DroppingProxy, topic: str
) -> None:
    """A clean shutdown writes a snapshot at the log end of every partition."""
    port = broker.port
    assert broker.stop() == 0
    proxy.configure(drop_share=0.0)
    for directory in partition_dirs(broker, topic):
        snaps = snapshots(directory)
        assert snaps, f"no snapshot in {directory} after a clean shutdown"
        assert snapshot_offset(snaps[-1]) == files_log_end(directory) > 0, directory
    broker.start()
    assert broker.port == port


def restart_log(broker: BrokerProcess, since: int) -> str:
    with open(broker.log_path, "rb") as f:
        f.seek(since)
        return f.read().decode(errors="replace")


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_sigkill_while_sending_keeps_exactly_once(
    broker_factory: type[BrokerProcess], variant: str
) -> None:
    """The producer talks through a proxy that forwards everything, except right before
    the broker stops: then it swallows the Produce responses of batches already appended."""
    overrides = {} if variant == "fresh-snapshot" else SMALL_SEGMENTS
    with DroppingProxy(drop_share=0.0, seed=7, close_after_drop=False) as proxy:
        overrides = {**overrides, "advertised.listeners": f"PLAINTEXT://{proxy.address}"}
        broker = broker_factory("data", overrides).start()
        port = broker.port
        proxy.start(port)
        topic = f"kill-{variant}"
        create_topic(broker.bootstrap, topic, PARTITIONS)
        sender = Sender(proxy.address, topic, 16_000)
        sender.start()
        if variant == "fresh-snapshot":
            # A clean restart mid-stream: the retries right after it are judged from the
            # snapshot alone; at the kill later, from that snapshot plus the newer batches.
            sender.wait_acked(2000)
            hold_produce_responses(proxy)
            clean_restart_with_snapshot_at_log_end(broker, proxy, topic)
            sender.wait_acked(sender.acked + 2000)
        else:
            sender.wait_acked(4000)
            wait_for_roll_snapshots(partition_dirs(broker, topic))

        hold_produce_responses(proxy)
        acked_before_kill = sender.acked
        broker.kill()
        proxy.configure(drop_share=0.0)
        log_size = broker.log_path.stat().st_size
        tamper_while_down(variant, partition_dirs(broker, topic))
        time.sleep(0.3)
        broker.start()  # same port: the same producer session reconnects and retries
        assert broker.port == port
        acked = sender.finish()
        sender.producer.close()
        assert sender.acked > acked_before_kill
        check_restart_log(variant, restart_log(broker, log_size))
        stats = proxy.snapshot()
    assert stats.produce_responses_dropped >= (6 if variant == "fresh-snapshot" else 3), stats

    # Read straight from the broker: advertise its own address again.
    del broker.overrides["advertised.listeners"]
    broker.restart()
    check_exactly_once(broker, topic, acked, PARTITIONS)


# -- 4. no deduplication across producer ids ---------------------------------------------------


def test_new_producer_instance_is_not_deduplicated(broker: BrokerProcess) -> None:
    """Three producer sessions send the same 300 values: two one after the other, the third
    after a SIGKILL and restart of the broker (issued ids are persisted, never reused).
    Every session gets its own producer id, so all three copies are stored."""
    topic = "three-sessions"
    create_topic(broker.bootstrap, topic, 1)
    batch = messages("same", 300)
    values = [value for _, value, _ in batch]
    acked: list[list[Rec]] = []
    for session in range(3):
        if session == 2:
            broker.restart(kill=True)
        producer = idempotent_producer(broker.bootstrap)
        acked.append(produce_all(producer, topic, batch, partition_of=lambda i: 0))
        producer.close()
    for session, recs in enumerate(acked):
        assert [r.offset for r in recs] == list(range(300 * session, 300 * (session + 1)))
    log = confluent_read(broker.bootstrap, topic, {0: 900})
    assert [r.value for r in log[0]] == values * 3

    # The stored batch headers: one producer id per session, all different, each session
    # at epoch 0 with sequences from 0 without a gap.
    assert broker.stop() == 0
    (directory,) = broker.data_dir.glob(f"{topic}-0")
    headers = stored_batches(directory)
    assert sum(h.record_count for h in headers) == 900
    assert {h.producer_epoch for h in headers} == {0}
    ids = []
    for session in range(3):
        stored = [h for h in headers if 300 * session <= h.base_offset < 300 * (session + 1)]
        session_ids = {h.producer_id for h in stored}
        assert len(session_ids) == 1, f"session {session}: producer ids {session_ids}"
        ids.append(session_ids.pop())
        assert [h.base_sequence for h in stored] == [
            sum(x.record_count for x in stored[:n]) for n in range(len(stored))
        ], f"session {session}"
    assert len(set(ids)) == 3 and min(ids) >= 0, ids
