"""Who holds which role in a Kafka cluster, from its metadata: the faults' targets, the
timeline's leader lanes.

Why from metadata, not from the tool's own bookkeeping: the roles move under the faults
(elections, coordinator moves), and metadata is what clients see, from any Kafka cluster.
A transaction coordinator is found as Kafka places it: the leader of `__transaction_state`
partition `abs(hashCode(transactional.id)) % partitions`, with Java's String.hashCode.
"""

from __future__ import annotations

import itertools
import random
import threading
from collections.abc import Callable, Sequence

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

TXN_TOPIC = "__transaction_state"


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap-around), as a signed int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i : i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def txn_partition(transactional_id: str, partitions: int) -> int:
    """Kafka's Utils.abs(hashCode) % partitions (abs of MIN_VALUE is 0 there)."""
    h = java_string_hash(transactional_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class Roles:
    """Metadata lookups over one AdminClient (thread-safe; every call bounded)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        transactional_ids: Callable[[], Sequence[str]] = list,
        timeout: float = 5.0,
    ) -> None:
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})
        self.topics = list(topics)
        self.transactional_ids = transactional_ids
        self.timeout = timeout
        self._lock = threading.Lock()
        self._turn = itertools.count()

    def leaders(self) -> dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]]:
        """(topic, partition) -> (leader, replicas, isr) of the workload topics."""
        out: dict[tuple[str, int], tuple[int, tuple[int, ...], tuple[int, ...]]] = {}
        with self._lock:
            for topic in self.topics:
                md = self.admin.list_topics(topic, timeout=self.timeout).topics.get(topic)
                if md is None or md.error is not None:
                    continue
                for p in md.partitions.values():
                    out[(topic, p.id)] = (p.leader, tuple(p.replicas), tuple(p.isrs))
        return out

    def in_turn(self, tp: tuple[str, int]) -> tuple[int, int]:
        """The order faults take partitions in: by partition number, then topic as listed, so
        successive faults go round the topics (the RF 1 and RF 2 topics of a run too, not only
        the first topic's partitions in a short run)."""
        topic, partition = tp
        rank = self.topics.index(topic) if topic in self.topics else len(self.topics)
        return partition, rank

    def controller(self) -> int:
        """From a Metadata response (v1+ names the controller). Not DescribeCluster: when
        librdkafka 2.16 fails to parse its answer it returns no error and no result, and an
        assertion aborts the whole process (rd_kafka_admin_response_parse)."""
        with self._lock:
            md = self.admin.list_topics(timeout=self.timeout)
        return int(md.controller_id)

    def leader(self) -> tuple[int, str] | None:
        """The leader of one workload partition (a different one each call), and what it leads."""
        states = sorted(self.leaders().items(), key=lambda kv: self.in_turn(kv[0]))
        led = [(tp, v[0]) for tp, v in states if v[0] >= 0]
        if not led:
            return None
        (topic, partition), node = led[next(self._turn) % len(led)]
        return node, f"leader of {topic}-{partition}"

    def follower(self) -> tuple[int, int, str] | None:
        """(follower, its leader, what): an in-sync follower of one workload partition."""
        pairs = [
            (f, v[0], f"follower of {t}-{p} (leader {v[0]})")
            for (t, p), v in sorted(self.leaders().items(), key=lambda kv: self.in_turn(kv[0]))
            if v[0] >= 0
            for f in v[2]
            if f != v[0]
        ]
        return pairs[next(self._turn) % len(pairs)] if pairs else None

    def txn_coordinator(self) -> tuple[int, str] | None:
        """The coordinator of a running transaction's transactional.id (chosen at random)."""
        ids = list(self.transactional_ids())
        if not ids:
            return None
        txn_id = random.choice(ids)
        with self._lock:
            md = self.admin.list_topics(TXN_TOPIC, timeout=self.timeout).topics.get(TXN_TOPIC)
        if md is None or md.error is not None or not md.partitions:
            return None
        state = md.partitions.get(txn_partition(txn_id, len(md.partitions)))
        if state is None or state.leader < 0:
            return None
        return state.leader, f"coordinator of {txn_id}"

    def find(self, role: str) -> tuple[int, str] | None:
        """A broker holding `role` (leader, follower, controller, coordinator), or None."""
        try:
            if role == "controller":
                node = self.controller()
                return (node, "controller") if node >= 0 else None
            if role == "follower":
                found = self.follower()
                return None if found is None else (found[0], found[2])
            if role == "coordinator":
                return self.txn_coordinator()
            return self.leader()
        except (KafkaException, TimeoutError, ValueError):
            return None
