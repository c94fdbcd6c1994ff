"""Faults of a three-broker cluster on etcd, with real processes and real clients.

1. Produce responses lost on their way back (a proxy in front of the leader drops them,
   five requests in flight), then the leader SIGKILLed: the retries reach the new leader,
   which knows the batches from the replicated producer state and answers them as
   duplicates with the original offsets.
2. Divergent logs (KIP-101): a leader alone takes acks=1 writes, dies, a follower leads in a
   new epoch and takes other writes; the old leader comes back and truncates to the epoch
   boundary.
3. min.insync.replicas: acks=all refused (NOT_ENOUGH_REPLICAS) while the ISR is short, acks=1
   served; then everything catches up.
4. Unclean leader election: off, a partition whose in-sync replicas are all down stays
   offline; on (topic override), the stale replica leads and the writes it missed are gone.
5. A leader cut off (SIGSTOP longer than the session): a new leader is elected; what the old
   one takes after SIGCONT is never acknowledged, and it becomes a follower.
6. Bad input: replica fetches from non-replicas, stale and future leader epochs; etcd itself
   paused while producers write.
7. DeleteRecords survives a leader change (followers take the leader's log start).
8. A follower paused past replica.lag.time.max.ms leaves the ISR and rejoins.

Every test ends with `Cluster.check_replicas_identical`.
"""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition

from oncelog.errors import ErrorCode
from oncelog.protocol.codec import build, encode_entity, request_class
from oncelog.protocol.records.batch import build_batch
from oncelog.protocol.records.record import encode_record
from tests.cluster_process import Cluster
from tests.integration.proxy import DroppingProxy, TcpRelay
from tests.integration.rawclient import (
    FETCH,
    LIST_OFFSETS,
    PRODUCE,
    RawClient,
    decode_response,
    list_offsets_body,
    produce_body,
    request,
)
from tests.integration.test_cluster_failover import check_exactly_once

OFFSET_FOR_LEADER_EPOCH = 23
DELETE_RECORDS = 21
#: Leadership stays where the test put it (no preferred-leader moves in the middle).
NO_REBALANCE = {"auto.leader.rebalance.enable": "false"}


# -- clients -------------------------------------------------------------------------------


class Sent:
    """What a producer was told: value -> offset for acknowledged ones, value -> error."""

    def __init__(self) -> None:
        self.acked: dict[int, int] = {}
        self.failed: dict[int, KafkaError] = {}

    def callback(self, err: KafkaError | None, msg: Any) -> None:
        value = int(msg.value())
        if err is None:
            self.acked[value] = msg.offset()
        else:
            self.failed[value] = err


def producer(bootstrap: str, **conf: Any) -> Producer:
    settings: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 2,
        "message.timeout.ms": 60_000,
        "retry.backoff.ms": 100,
    }
    settings.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(settings)


def send(
    p: Producer, topic: str, values: Iterable[int], sent: Sent, *, flush: float | None = 60
) -> None:
    for v in values:
        p.produce(topic, value=str(v).encode(), partition=0, on_delivery=sent.callback)
        p.poll(0)
    if flush is not None:
        left = p.flush(flush)
        assert left == 0, f"{left} messages still in flight"


def read_values(bootstrap: str, topic: str, partition: int = 0) -> list[int]:
    """Every value of the partition, from its start to the high watermark."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"check-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        tp = KafkaTopicPartition(topic, partition, 0)
        _, high = consumer.get_watermark_offsets(tp, timeout=10)
        consumer.assign([tp])
        values: list[int] = []
        position = 0
        deadline = time.monotonic() + 30
        while position < high and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 0.5):
                if msg.error() is None:
                    values.append(int(msg.value()))
                    position = msg.offset() + 1
        assert position >= high, f"read {topic}-{partition} to {position} of {high}"
        return values
    finally:
        consumer.close()


class Stream:
    """An idempotent acks=all producer sending 0, 1, 2, ... round robin from a thread."""

    def __init__(self, bootstrap: str, topic: str, rate: int, **conf: Any) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.rate = rate
        self.conf = conf
        self.acked: dict[int, list[int]] = defaultdict(list)
        self.ack_times: list[float] = []
        self.errors: list[str] = []
        self.sent = 0
        self.left = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stream")

    def start(self) -> Stream:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(120)
        assert not self._thread.is_alive()

    def _delivered(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self.errors.append(str(err))
        else:
            self.acked[msg.partition()].append(int(msg.value()))
            self.ack_times.append(time.monotonic())

    def _run(self) -> None:
        p = producer(self.bootstrap, **self.conf)
        start = time.monotonic()
        while not self._stop.is_set():
            try:
                v = str(self.sent).encode()
                p.produce(self.topic, value=v, key=v, on_delivery=self._delivered)
                self.sent += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            ahead = self.sent / self.rate - (time.monotonic() - start)
            if ahead > 0.005:
                time.sleep(ahead)
        self.left = p.flush(90)

    @property
    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def wait_acknowledged(self, count: int, timeout: float = 30) -> None:
        """Until `count` messages are acknowledged, so that a fault hits a running stream: the
        producer's start (its producer id, the leader) can take seconds on a loaded machine,
        and a fault before it ends stalls the start instead (a paused broker asked for the
        producer id answers only when it resumes)."""
        deadline = time.monotonic() + timeout
        while len(self.ack_times) < count:
            assert time.monotonic() < deadline, f"{len(self.ack_times)} acknowledged in {timeout} s"
            assert not self.errors, self.errors[:5]
            time.sleep(0.02)


def read_all(cluster: Cluster, topic: str) -> dict[int, list[int]]:
    cluster.wait_led_everywhere(topic)  # brokers just restarted may not know the topic yet
    return {p: read_values(cluster.bootstrap, topic, p) for p in cluster.partitions(topic)}


# -- raw requests ------------------------------------------------------------------------


def raw(port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    with RawClient(port) as client:
        return client.call(
            api_key, version, encode_entity(build(request_class(api_key, version), body))
        )


def fetch_body(
    topic: str, offset: int, *, replica_id: int = -1, current_leader_epoch: int = -1
) -> dict[str, Any]:
    return {
        "replica_id": replica_id,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": current_leader_epoch,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def fetch_error(port: int, topic: str, offset: int, **kw: int) -> int:
    response = raw(port, FETCH, 12, fetch_body(topic, offset, **kw))
    assert response.error_code == 0
    return int(response.responses[0].partitions[0].error_code)


def epoch_end(
    port: int, topic: str, leader_epoch: int, current_leader_epoch: int, replica_id: int = -1
) -> Any:
    body = {
        "replica_id": replica_id,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": current_leader_epoch,
                        "leader_epoch": leader_epoch,
                    }
                ],
            }
        ],
    }
    return raw(port, OFFSET_FOR_LEADER_EPOCH, 4, body).topics[0].partitions[0]


def record_batch(*values: int) -> bytes:
    records = b"".join(
        encode_record(offset_delta=i, key=None, value=str(v).encode()) for i, v in enumerate(values)
    )
    now = int(time.time() * 1000)
    return build_batch(
        base_offset=0,
        records=records,
        record_count=len(values),
        last_offset_delta=len(values) - 1,
        base_timestamp=now,
        max_timestamp=now,
    )


def produce_request(topic: str, acks: int, timeout_ms: int, *values: int) -> bytes:
    return request(
        PRODUCE, 9, produce_body({topic: [(0, record_batch(*values))]}, acks, timeout_ms)
    )


def check_listed_epochs(cluster: Cluster, node: int, topic: str, end: int) -> None:
    """ListOffsets names the epoch that wrote the offset, which a consumer validates its
    position against after a leader change: the first epoch for the earliest offset, the
    newest for the latest (not simply the current leader's epoch). The replica's batches
    carry non-decreasing epochs."""
    epochs = [b[2] for b in cluster.replica_batches(node, topic, 0)]
    with RawClient(cluster.brokers[node].port) as client:
        ends = [
            client.call(LIST_OFFSETS, 7, list_offsets_body(topic, [0], when))
            .topics[0]
            .partitions[0]
            for when in (-2, -1)
        ]
    assert epochs == sorted(epochs) and epochs[0] < epochs[-1]
    assert [(e.error_code, e.offset, e.leader_epoch) for e in ends] == [
        (0, 0, epochs[0]),
        (0, end, epochs[-1]),
    ]


def log_of(cluster: Cluster, node_id: int) -> str:
    return cluster.brokers[node_id].log_path.read_text(errors="replace")


def isr_views(cluster: Cluster, topic: str) -> dict[int, dict[int, tuple[int, list[int]]]]:
    """Each live broker's Metadata answer: partition -> (leader, ISR)."""
    views = {}
    for node, broker in cluster.brokers.items():
        if broker.alive():
            parts = cluster.partitions(topic, via=[node])
            views[node] = {p: (leader, sorted(isr)) for p, (leader, _, isr) in parts.items()}
    return views


def wait_isr_agreed(cluster: Cluster, topic: str, timeout: float = 20) -> None:
    """Wait for the full ISR as every live broker reports it, twice, 2 s apart (a leader's
    view of its ISR once went stale after racing the controller)."""
    full = {p: sorted(replicas) for p, (_, replicas, _) in cluster.partitions(topic).items()}

    def agreed() -> bool:
        views = isr_views(cluster, topic)
        return all(
            view[p][0] >= 0 and view[p][1] == full[p] for view in views.values() for p in full
        )

    def settled() -> bool:
        # Twice, 2 s apart: a moment of agreement may be undone by the controller.
        if not agreed():
            return False
        time.sleep(2)
        return agreed()

    try:
        cluster.wait_for(settled, timeout, f"every broker reporting the full ISR of {topic}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; views: {isr_views(cluster, topic)}") from None


# -- 1. the seeds' scenario: a dropped response, then the leader dies ---------------------


@pytest.mark.timeout(120)
def test_dropped_response_then_leader_killed_the_retry_is_a_duplicate(tmp_path: Path) -> None:
    topic = "seeds"
    proxy = DroppingProxy(drop_share=0.0, seed=1, close_after_drop=False)
    cluster = Cluster(
        tmp_path,
        overrides=NO_REBALANCE,
        # Broker 1 registers the proxy's address: clients (and followers) reach it through it.
        broker_overrides={1: {"advertised.listeners": f"PLAINTEXT://{proxy.address}"}},
    )
    with proxy:
        proxy.start(cluster.brokers[1].port)
        with cluster:
            cluster.create_topic(topic, assignment=[[1, 2, 3]])
            cluster.wait_isr_full(topic)
            assert cluster.leader(topic, 0) == 1
            p = producer(cluster.bootstrap_of([2, 3]), linger_ms=0)
            sent = Sent()
            send(p, topic, range(50), sent)
            assert sorted(sent.acked) == list(range(50))

            # The leader appends 50..54 (five requests, as many as an idempotent producer has
            # in flight), the ISR has them (acks=all answers only then), the answers are lost.
            proxy.configure(drop_share=1.0, close_after_drop=False)
            lost = range(50, 55)
            for k, v in enumerate(lost):
                send(p, topic, [v], sent, flush=None)
                cluster.wait_for(
                    lambda k=k: proxy.snapshot().produce_responses_dropped > k, 20, f"drop {k}"
                )
            p.poll(0.5)
            assert not set(lost) & (set(sent.acked) | set(sent.failed))
            cluster.brokers[1].kill()
            proxy.configure(drop_share=0.0)

            # The producer retries on the new leader: duplicates, answered with the offsets
            # the dead leader gave.
            assert p.flush(60) == 0
            assert set(lost) <= set(sent.acked), sent.failed
            originals = []
            for version, payload in proxy.dropped:
                _, dropped = decode_response(PRODUCE, version, payload)
                original = dropped.responses[0].partition_responses[0]
                assert original.error_code == 0
                originals.append(original.base_offset)
            assert originals == list(lost)
            assert [sent.acked[v] for v in lost] == list(lost)
            assert cluster.leader(topic, 0, via=[2, 3]) in (2, 3)

            send(p, topic, range(55, 100), sent)
            cluster.brokers[1].start()
            assert read_values(cluster.bootstrap, topic) == list(range(100))
            assert sent.acked == {v: v for v in range(100)}
            cluster.check_replicas_identical(topic)


# -- 2. divergent logs (KIP-101) ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_divergent_log_of_a_dead_leader_is_truncated_to_the_epoch_boundary(
    tmp_path: Path,
) -> None:
    topic = "divergent"
    # Followers are SIGSTOPped for about a second: neither their sessions nor the leader's
    # replica.lag.time.max.ms may run out meanwhile (they stay in the ISR).
    overrides = {
        **NO_REBALANCE,
        "broker.session.timeout.ms": "6000",
        "replica.lag.time.max.ms": "15000",
    }
    with Cluster(tmp_path, overrides=overrides) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3]])
        cluster.wait_isr_full(topic)
        sent = Sent()
        send(producer(cluster.bootstrap), topic, range(20), sent)
        assert sorted(sent.acked) == list(range(20))

        cluster.pause(2, 3)
        try:
            # Fetches the followers had in flight are answered (empty) within
            # replica.fetch.wait.max.ms; later data would wait in their sockets otherwise.
            time.sleep(1)
            alone = Sent()
            lone = producer(
                cluster.bootstrap_of([1]), acks="1", enable_idempotence=False, linger_ms=0
            )
            send(lone, topic, range(1000, 1010), alone, flush=10)
            assert sorted(alone.acked) == list(range(1000, 1010)), alone.failed
            assert sorted(alone.acked.values()) == list(range(20, 30))
            # Beyond the high watermark: not offered to consumers (ListOffsets, Fetch).
            port = cluster.brokers[1].port
            with RawClient(port) as client:
                listed = client.call(LIST_OFFSETS, 7, list_offsets_body(topic, [0]))
            assert listed.topics[0].partitions[0].offset == 20
            fetched = raw(port, FETCH, 12, fetch_body(topic, 20)).responses[0].partitions[0]
            assert (fetched.error_code, fetched.high_watermark) == (0, 20)
            assert not fetched.records
            cluster.brokers[1].kill()
        finally:
            cluster.resume(2, 3)

        cluster.wait_for(
            lambda: cluster.leader(topic, 0, via=[2, 3]) in (2, 3), 30, "a leader of 2, 3"
        )
        new_leader = cluster.leader(topic, 0, via=[2, 3])
        assert cluster.partitions(topic, via=[2, 3])[0][2] == [2, 3]
        later = producer(cluster.bootstrap_of([2, 3]))
        send(later, topic, range(2000, 2020), sent)
        assert sorted(sent.acked) == [*range(20), *range(2000, 2020)]
        assert sorted(sent.acked.values()) == list(range(40))

        cluster.brokers[1].start()
        cluster.wait_isr_full(topic)
        cluster.wait_for(
            lambda: re.search(
                r"divergent-0: truncating from 30 to 20 \(leader \d", log_of(cluster, 1)
            ),
            30,
            "broker 1 truncating its own epoch-0 writes",
        )
        assert cluster.leader(topic, 0) == new_leader
        values = read_values(cluster.bootstrap, topic)
        # Acknowledged acks=all writes once each; the lone leader's acks=1 writes are gone.
        assert values == [*range(20), *range(2000, 2020)]
        cluster.check_replicas_identical(topic)
        assert {b[2] for b in cluster.replica_batches(1, topic, 0)} == {0, 1}

        # Broker 1 leads again: the producer state it rebuilt after truncating and caught up
        # as a follower continues the same idempotent producer's sequence.
        cluster.brokers[new_leader].stop()
        cluster.wait_for(lambda: cluster.leader(topic, 0, via=[1]) == 1, 30, "1 leads again")
        send(later, topic, range(3000, 3010), sent)
        assert sorted(sent.acked.values()) == list(range(50))
        cluster.brokers[new_leader].start()
        assert read_values(cluster.bootstrap, topic) == [
            *range(20),
            *range(2000, 2020),
            *range(3000, 3010),
        ]
        cluster.check_replicas_identical(topic)
        check_listed_epochs(cluster, 1, topic, 50)


# -- 3. min.insync.replicas --------------------------------------------------------------


@pytest.mark.timeout(120)
def test_acks_all_refused_below_min_insync_replicas_acks_1_served(tmp_path: Path) -> None:
    topic = "minisr"
    with Cluster(tmp_path, overrides=NO_REBALANCE) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
        cluster.wait_isr_full(topic)
        sent = Sent()
        send(producer(cluster.bootstrap), topic, range(10), sent)

        cluster.brokers[2].stop()
        cluster.brokers[3].stop()
        cluster.wait_for(
            lambda: cluster.partitions(topic, via=[1])[0][2] == [1], 20, "the ISR down to [1]"
        )
        port = cluster.brokers[1].port
        with RawClient(port) as client:
            client.send(produce_request(topic, -1, 5000, 500))
            _, answer = decode_response(PRODUCE, 9, client.recv_frame())
        entry = answer.responses[0].partition_responses[0]
        assert entry.error_code == ErrorCode.not_enough_replicas, entry

        refused = Sent()
        send(
            producer(cluster.bootstrap_of([1]), enable_idempotence=False, message_timeout_ms=3000),
            topic,
            [501],
            refused,
            flush=20,
        )
        assert not refused.acked
        # librdkafka retries NOT_ENOUGH_REPLICAS until the message times out.
        assert refused.failed[501].code() in (
            KafkaError.NOT_ENOUGH_REPLICAS,
            KafkaError._MSG_TIMED_OUT,
        ), refused.failed[501]

        one = Sent()
        send(producer(cluster.bootstrap_of([1]), acks="1", enable_idempotence=False), topic,
             range(100, 110), one)  # fmt: skip
        assert sorted(one.acked) == list(range(100, 110))

        cluster.brokers[2].start()
        cluster.brokers[3].start()
        cluster.wait_isr_full(topic)
        send(producer(cluster.bootstrap), topic, range(200, 210), sent)
        assert sorted(sent.acked) == [*range(10), *range(200, 210)]
        values = read_values(cluster.bootstrap, topic)
        assert values == [*range(10), *range(100, 110), *range(200, 210)]
        cluster.check_replicas_identical(topic)


# -- 4. unclean leader election ----------------------------------------------------------


@pytest.mark.timeout(150)
def test_unclean_leader_election_off_stays_offline_on_elects_the_stale_replica(
    tmp_path: Path,
) -> None:
    clean, unclean = "clean", "unclean"
    with Cluster(tmp_path, overrides=NO_REBALANCE) as cluster:
        cluster.create_topic(clean, assignment=[[1, 2, 3]])
        cluster.create_topic(
            unclean, assignment=[[1, 2, 3]], configs={"unclean.leader.election.enable": "true"}
        )
        for t in (clean, unclean):
            cluster.wait_isr_full(t)
        sent = {clean: Sent(), unclean: Sent()}
        p = producer(cluster.bootstrap)
        for t in (clean, unclean):
            send(p, t, range(10), sent[t])

        cluster.brokers[3].stop()  # the replica that will be stale
        for t in (clean, unclean):
            cluster.wait_for(
                lambda t=t: cluster.partitions(t, via=[1])[0][2] == [1, 2], 20, f"{t}: ISR [1, 2]"
            )
            send(p, t, range(10, 20), sent[t])  # acknowledged by 1 and 2; 3 misses them
            assert sorted(sent[t].acked) == list(range(20))
        del p
        cluster.brokers[2].stop()
        cluster.wait_for(lambda: cluster.partitions(clean, via=[1])[0][2] == [1], 20, "ISR [1]")
        cluster.brokers[1].stop()

        cluster.brokers[3].start()
        cluster.wait_for(
            lambda: cluster.leader(unclean, 0, via=[3]) == 3, 30, "3 elected uncleanly"
        )
        # Unclean off: the only live replica is not in the ISR, the partition has no leader.
        time.sleep(3)
        assert cluster.leader(clean, 0, via=[3]) == -1
        assert cluster.partitions(clean, via=[3])[0][2] == [1]
        # Unclean on: 3 leads with what it had; 10..19 were never on it.
        assert read_values(cluster.bootstrap_of([3]), unclean) == list(range(10))
        later = Sent()
        send(producer(cluster.bootstrap_of([3])), unclean, range(20, 30), later)
        assert sorted(later.acked) == list(range(20, 30))

        # The in-sync replica returns: it leads the clean topic with everything acknowledged.
        cluster.brokers[1].start()
        cluster.wait_for(lambda: cluster.leader(clean, 0, via=[1, 3]) == 1, 30, "1 leads clean")
        cluster.brokers[2].start()
        assert read_values(cluster.bootstrap, clean) == list(range(20))
        send(producer(cluster.bootstrap), clean, range(20, 30), sent[clean])
        assert read_values(cluster.bootstrap, clean) == list(range(30))
        cluster.check_replicas_identical(clean)

        # Exactly the writes the stale replica missed are lost; 1 and 2 truncate them away.
        values = read_values(cluster.bootstrap, unclean)
        assert values == [*range(10), *range(20, 30)]
        assert set(sent[unclean].acked) - set(values) == set(range(10, 20))
        for node in (1, 2):
            cluster.wait_for(
                lambda node=node: re.search(
                    r"unclean-0: truncating from 20 to 10", log_of(cluster, node)
                ),
                20,
                f"broker {node} truncating what the unclean leader never had",
            )
        # The ISR heals once the unclean leader ends KIP-704's recovery (RECOVERING ->
        # RECOVERED) and takes its followers back.
        cluster.wait_isr_full(unclean, 20)
        cluster.check_replicas_identical(unclean)


# -- 5. a leader cut off -----------------------------------------------------------------


@pytest.mark.timeout(120)
def test_leader_paused_past_its_session_is_replaced_and_acknowledges_nothing(
    tmp_path: Path,
) -> None:
    topic = "cutoff"
    with Cluster(tmp_path, overrides=NO_REBALANCE) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3]])
        cluster.wait_isr_full(topic)
        stream = Stream(cluster.bootstrap, topic, 400, request_timeout_ms=4000).start()
        stream.wait_acknowledged(100)
        time.sleep(2)
        with RawClient(cluster.brokers[1].port, timeout=30) as client:
            cluster.pause(1)
            try:
                # Waits in the paused leader's socket: it reads it only after SIGCONT.
                client.send(produce_request(topic, -1, 10_000, -1, -2, -3))
                cluster.wait_for(
                    lambda: cluster.leader(topic, 0, via=[2, 3]) in (2, 3), 30, "a new leader"
                )
                time.sleep(2)  # the new leader takes the stream meanwhile
            finally:
                cluster.resume(1)
            _, answer = decode_response(PRODUCE, 9, client.recv_frame())
        entry = answer.responses[0].partition_responses[0]
        assert entry.error_code in (
            ErrorCode.not_leader_or_follower,
            ErrorCode.request_timed_out,
        ), entry
        appended = entry.error_code == ErrorCode.request_timed_out or "moved on" in (
            entry.error_message or ""
        )
        wait_isr_agreed(cluster, topic)
        if appended:
            assert re.search(r"cutoff-0: truncating from", log_of(cluster, 1))
        assert re.search(r"cutoff-0: became-follower", log_of(cluster, 1))
        # Broker 1 leads again, under the same stream: the producer state it rebuilt after
        # truncating its cut-off appends must continue the stream's sequence.
        new_leader = cluster.leader(topic, 0)
        assert new_leader in (2, 3)
        cluster.brokers[new_leader].kill()
        cluster.wait_for(lambda: cluster.leader(topic, 0, via=[1]) == 1, 30, "1 leads again")
        time.sleep(2)
        cluster.brokers[new_leader].start()
        stream.stop()
        assert not stream.errors and stream.left == 0, stream.errors[:5]
        assert stream.total_acked == stream.sent > 1000
        got = read_all(cluster, topic)
        assert not {-1, -2, -3} & set(got[0])
        check_exactly_once(stream.acked, got)
        cluster.check_replicas_identical(topic)


# -- 6. bad input ------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_replica_requests_from_strangers_and_stale_or_future_epochs(tmp_path: Path) -> None:
    topic = "strangers"
    with Cluster(tmp_path, overrides=NO_REBALANCE) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2]])  # broker 3 is not a replica
        cluster.wait_isr_full(topic)
        sent = Sent()
        p = producer(cluster.bootstrap)
        send(p, topic, range(10), sent)
        before = cluster.partitions(topic)
        hw = cluster.high_watermarks(topic)
        leader_port = cluster.brokers[1].port

        # Follower fetches from brokers that are not followers of the partition: refused per
        # partition, nothing recorded.
        for stranger in (3, 1, 99, 2**31 - 1):
            assert fetch_error(leader_port, topic, 0, replica_id=stranger) == (
                ErrorCode.not_leader_or_follower
            ), stranger
        # A follower's fetch beyond the leader's end.
        assert fetch_error(leader_port, topic, 10_000, replica_id=2) == (
            ErrorCode.offset_out_of_range
        )
        # A follower fetch sent to a broker that is not the leader.
        assert fetch_error(cluster.brokers[2].port, topic, 0, replica_id=1) == (
            ErrorCode.not_leader_or_follower
        )
        assert fetch_error(cluster.brokers[3].port, topic, 0, replica_id=1) in (
            ErrorCode.not_leader_or_follower,
            ErrorCode.unknown_topic_or_partition,
        )
        # OffsetForLeaderEpoch in an epoch the leader does not have yet; from a follower.
        future = epoch_end(leader_port, topic, 0, current_leader_epoch=5, replica_id=2)
        assert future.error_code == ErrorCode.unknown_leader_epoch
        at_follower = epoch_end(cluster.brokers[2].port, topic, 0, current_leader_epoch=0)
        assert at_follower.error_code == ErrorCode.not_leader_or_follower
        assert epoch_end(leader_port, topic, 0, current_leader_epoch=0).end_offset == 10
        # An epoch above every one the leader knows: UNDEFINED (Kafka's endOffsetFor).
        beyond = epoch_end(leader_port, topic, 50, current_leader_epoch=0)
        assert (beyond.error_code, beyond.leader_epoch, beyond.end_offset) == (0, -1, -1)

        assert all(b.alive() for b in cluster.brokers.values())
        assert cluster.partitions(topic) == before
        assert cluster.high_watermarks(topic) == hw
        send(p, topic, range(10, 20), sent)
        assert sorted(sent.acked) == list(range(20))

        # Leader epoch 1 on broker 2: epoch 0 is stale, 2 is from the future.
        cluster.brokers[1].stop()
        cluster.wait_for(lambda: cluster.leader(topic, 0, via=[2, 3]) == 2, 30, "2 leads")
        cluster.brokers[1].start()
        cluster.wait_isr_full(topic)
        port = cluster.brokers[2].port
        assert fetch_error(port, topic, 0, current_leader_epoch=0) == ErrorCode.fenced_leader_epoch
        assert fetch_error(port, topic, 0, current_leader_epoch=2) == ErrorCode.unknown_leader_epoch
        assert fetch_error(port, topic, 0, current_leader_epoch=1) == ErrorCode.none
        stale = epoch_end(port, topic, 0, current_leader_epoch=0, replica_id=1)
        assert stale.error_code == ErrorCode.fenced_leader_epoch
        ended = epoch_end(port, topic, 0, current_leader_epoch=1)
        assert (ended.error_code, ended.leader_epoch, ended.end_offset) == (0, 0, 20)
        send(p, topic, range(20, 30), sent)
        assert read_values(cluster.bootstrap, topic) == list(range(30))
        cluster.check_replicas_identical(topic)

        # DeleteRecords is the leader's to take (Kafka: NOT_LEADER_OR_FOLLOWER elsewhere).
        body = {
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 5}]}],
            "timeout": 5000,
        }
        answer = raw(cluster.brokers[1].port, DELETE_RECORDS, 2, body)
        code = answer.topics[0].partitions[0].error_code
        assert code == ErrorCode.not_leader_or_follower


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("session_ms", "pause_s"),
    [(8000, 4), (3000, 6)],
    ids=["within-the-session", "past-the-session"],
)
def test_etcd_paused_while_producing_loses_nothing(
    tmp_path: Path, session_ms: int, pause_s: float
) -> None:
    """Writes to existing leaders need no etcd, so they go on while it is paused. Past the
    session every lease may expire when etcd resumes: brokers register again, leaders may
    move, and still nothing acknowledged is lost or doubled."""
    topic = "etcdpause"
    overrides = {**NO_REBALANCE, "broker.session.timeout.ms": str(session_ms)}
    with Cluster(tmp_path, overrides=overrides) as c:
        c.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
        c.wait_isr_full(topic)
        stream = Stream(c.bootstrap, topic, 1000).start()
        stream.wait_acknowledged(100)
        time.sleep(2)
        c.etcd.pause()
        paused = time.monotonic()
        try:
            time.sleep(pause_s)
        finally:
            c.etcd.resume()
        resumed = time.monotonic()
        time.sleep(4)
        stream.stop()
        assert not stream.errors and stream.left == 0, stream.errors[:5]
        during = [t for t in stream.ack_times if paused + 0.5 < t < resumed]
        assert len(during) > 1000, f"only {len(during)} acknowledged while etcd was paused"
        assert stream.total_acked == stream.sent
        got = read_all(c, topic)
        check_exactly_once(stream.acked, got)
        assert sum(len(v) for v in got.values()) == stream.sent
        c.check_replicas_identical(topic)


# -- 7. the log start across leaders ---------------------------------------------------------


@pytest.mark.timeout(120)
def test_deleted_records_stay_deleted_when_the_leader_changes(tmp_path: Path) -> None:
    """DeleteRecords moves the leader's log start; followers follow it (Kafka's follower
    takes the leader's log start from each fetch), so a new leader does not serve again
    what was deleted."""
    topic = "deleted"
    with Cluster(tmp_path, overrides=NO_REBALANCE) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3]], configs={"segment.bytes": "4096"})
        cluster.wait_isr_full(topic)
        sent = Sent()
        p = producer(cluster.bootstrap, linger_ms=0)
        for v in range(200):  # one batch each, about 30 segments
            p.produce(
                topic, value=str(v).encode().ljust(100), partition=0, on_delivery=sent.callback
            )
            p.flush(10)
        assert sorted(sent.acked.values()) == list(range(200))
        admin = cluster.admin()
        futures = admin.delete_records([KafkaTopicPartition(topic, 0, 150)])
        for future in futures.values():
            assert future.result(15).low_watermark == 150
        time.sleep(1)  # followers fetch a few times (replica.fetch.wait.max.ms 200)

        cluster.brokers[1].kill()
        cluster.wait_for(lambda: cluster.leader(topic, 0, via=[2, 3]) in (2, 3), 30, "new leader")
        consumer = Consumer({"bootstrap.servers": cluster.bootstrap_of([2, 3]), "group.id": "x"})
        try:
            low, high = consumer.get_watermark_offsets(KafkaTopicPartition(topic, 0), timeout=10)
        finally:
            consumer.close()
        assert (low, high) == (150, 200)
        assert read_values(cluster.bootstrap_of([2, 3]), topic) == list(range(150, 200))
        cluster.brokers[1].start()
        send(p, topic, range(200, 210), sent)
        assert read_values(cluster.bootstrap, topic) == list(range(150, 210))
        cluster.check_replicas_identical(topic)


# -- 8. a slow follower --------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_follower_paused_past_the_lag_time_leaves_the_isr_and_rejoins(tmp_path: Path) -> None:
    """A follower that hangs (but keeps its session) is dropped from the ISR by its leader
    after replica.lag.time.max.ms, so acks=all goes on with min.insync.replicas 2; back, it
    catches up and the leader takes it into the ISR again."""
    topic = "slow"
    overrides = {**NO_REBALANCE, "broker.session.timeout.ms": "15000"}
    with Cluster(tmp_path, overrides=overrides) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3]], configs={"min.insync.replicas": "2"})
        cluster.wait_isr_full(topic)
        stream = Stream(cluster.bootstrap, topic, 500).start()
        stream.wait_acknowledged(100)
        time.sleep(1)
        cluster.pause(3)
        paused = time.monotonic()
        paused_wall = time.time()
        try:
            cluster.wait_for(
                lambda: cluster.partitions(topic, via=[1])[0][2] == [1, 2], 15, "ISR [1, 2]"
            )
            shrunk = time.monotonic()
            time.sleep(2)
        finally:
            cluster.resume(3)
        resumed = time.monotonic()
        wait_isr_agreed(cluster, topic)
        time.sleep(1)
        stream.stop()
        assert not stream.errors and stream.left == 0, stream.errors[:5]
        assert shrunk - paused > 3.5, shrunk - paused
        during = [t for t in stream.ack_times if shrunk < t < resumed]
        if len(during) <= 500:
            # What the leader did, and when the acknowledgements came (seconds after the
            # pause), for the post-mortem.
            times = [round(t - paused, 1) for t in stream.ack_times if t > paused - 1]
            lines = [ln for ln in log_of(cluster, 1).splitlines() if "slow-0" in ln or "WARN" in ln]
            pytest.fail(
                f"only {len(during)} acknowledged with the ISR at [1, 2] "
                f"(shrunk {shrunk - paused:.1f} s, resumed {resumed - paused:.1f} s after the "
                f"pause; acks at {sorted(set(times))}); leader's log: {lines[-20:]}"
            )
        proposed = re.search(
            r"^(\S+ \S+) INFO .*slow-0: proposing ISR \[1, 2\] \(was \[1, 2, 3\]\)",
            log_of(cluster, 1),
            re.MULTILINE,
        )
        assert proposed
        # The leader's own decision, from its log's clock: about the lag time (4 s) after the
        # follower was last caught up, a moment before the pause (the test's view of the
        # change also waits for etcd and Metadata, which a busy machine delays).
        decided = datetime.strptime(proposed[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        assert 3.0 < decided - paused_wall < 7, decided - paused_wall
        got = read_all(cluster, topic)
        check_exactly_once(stream.acked, got)
        assert len(got[0]) == stream.sent
        cluster.check_replicas_identical(topic)


# -- 9. divergence over two epochs (KIP-279) -------------------------------------------------


def lone_writes(cluster: Cluster, leader: int, topic: str, values: range) -> None:
    """acks=1 writes that only `leader` gets (its followers are paused by the caller)."""
    alone = Sent()
    send(
        producer(cluster.bootstrap_of([leader]), acks="1", enable_idempotence=False, linger_ms=0),
        topic,
        values,
        alone,
        flush=10,
    )
    assert sorted(alone.acked) == list(values), alone.failed


@pytest.mark.timeout(150)
def test_logs_diverging_over_two_epochs_converge_on_the_third_leader(tmp_path: Path) -> None:
    """Leader 1 (epoch 0) and then leader 2 (epoch 1) each take writes alone and die; 3
    leads in epoch 2 without ever having had data of epoch 1. Broker 2 asks for its epoch 1,
    which the leader does not know: the answer is epoch 0's end, where both old leaders
    truncate."""
    topic = "twoepochs"
    overrides = {
        **NO_REBALANCE,
        "broker.session.timeout.ms": "6000",
        "replica.lag.time.max.ms": "30000",
    }
    with Cluster(tmp_path, overrides=overrides) as cluster:
        cluster.create_topic(topic, assignment=[[1, 2, 3]])
        cluster.wait_isr_full(topic)
        sent = Sent()
        send(producer(cluster.bootstrap), topic, range(10), sent)

        cluster.pause(2, 3)
        try:
            time.sleep(1)  # the followers' fetches in flight are answered first
            lone_writes(cluster, 1, topic, range(100, 105))  # offsets 10..14, epoch 0
            cluster.brokers[1].kill()
        finally:
            cluster.resume(2, 3)
        cluster.wait_for(lambda: cluster.leader(topic, 0, via=[2, 3]) == 2, 30, "2 leads")

        cluster.pause(3)
        try:
            time.sleep(1)
            lone_writes(cluster, 2, topic, range(200, 203))  # offsets 10..12, epoch 1
            cluster.brokers[2].kill()
        finally:
            cluster.resume(3)
        cluster.wait_for(lambda: cluster.leader(topic, 0, via=[3]) == 3, 30, "3 leads")
        assert cluster.partitions(topic, via=[3])[0][2] == [3]
        send(producer(cluster.bootstrap_of([3])), topic, range(300, 310), sent)

        cluster.brokers[1].start()
        cluster.brokers[2].start()
        cluster.wait_isr_full(topic)
        cluster.wait_for(
            lambda: (
                re.search(r"twoepochs-0: truncating from 15 to 10 ", log_of(cluster, 1))
                and re.search(r"twoepochs-0: truncating from 13 to 10 ", log_of(cluster, 2))
            ),
            30,
            "brokers 1 and 2 truncating to the end of epoch 0",
        )
        assert re.search(r"answered epoch 0 ends at 10", log_of(cluster, 2))
        assert read_values(cluster.bootstrap, topic) == [*range(10), *range(300, 310)]
        assert sorted(sent.acked) == [*range(10), *range(300, 310)]
        cluster.check_replicas_identical(topic)
        for node in (1, 2, 3):
            epochs = sorted({b[2] for b in cluster.replica_batches(node, topic, 0)})
            assert epochs == [0, 2], (node, epochs)


# -- 10. a leader cut off from etcd only -------------------------------------------------------


@pytest.mark.timeout(150)
def test_leader_cut_off_from_etcd_only_acknowledges_nothing_alone(tmp_path: Path) -> None:
    """The leader loses etcd but not its clients or followers: its session expires, the
    controller elects another leader, the followers move there. The old leader still
    believes it leads (its watch is silent) and clients may still reach it: with
    min.insync.replicas 2 nothing it takes can be acknowledged, since no follower fetches
    from it and it cannot write a smaller ISR. Reconnected, it follows and truncates."""
    topic = "zombie"
    relay = TcpRelay()
    cluster = Cluster(tmp_path, overrides=NO_REBALANCE)
    cluster.broker_overrides = {1: {"etcd.connect": relay.address}}
    with relay:
        relay.start(cluster.etcd.client_port)
        with cluster:
            cluster.create_topic(
                topic, assignment=[[1, 2, 3]], configs={"min.insync.replicas": "2"}
            )
            cluster.wait_isr_full(topic)
            stream = Stream(cluster.bootstrap, topic, 400, request_timeout_ms=4000).start()
            stream.wait_acknowledged(100)
            time.sleep(2)
            relay.cut()
            try:
                cluster.wait_for(
                    lambda: cluster.leader(topic, 0, via=[2, 3]) in (2, 3), 30, "a new leader"
                )
                assert cluster.leader(topic, 0, via=[1]) == 1  # the zombie's own view
                with RawClient(cluster.brokers[1].port, timeout=30) as client:
                    client.send(produce_request(topic, -1, 4000, -1, -2, -3))
                    _, answer = decode_response(PRODUCE, 9, client.recv_frame())
                entry = answer.responses[0].partition_responses[0]
                assert entry.error_code != ErrorCode.none, entry
                time.sleep(2)
            finally:
                relay.heal()
            cluster.wait_for(
                lambda: re.search(r"zombie-0: became-follower", log_of(cluster, 1)),
                60,
                "broker 1 following",
            )
            wait_isr_agreed(cluster, topic)
            time.sleep(1)
            stream.stop()
            assert not stream.errors and stream.left == 0, stream.errors[:5]
            got = read_all(cluster, topic)
            assert not {-1, -2, -3} & set(got[0])
            check_exactly_once(stream.acked, got)
            assert stream.total_acked == stream.sent
            cluster.check_replicas_identical(topic)
