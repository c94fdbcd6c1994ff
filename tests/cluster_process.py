"""A real oncelog cluster for tests: one etcd and three broker processes on 127.0.0.1.

Brokers keep their ports across restarts (clients and peers reconnect to the same address).
`check_replicas_identical` is the end-of-test check every cluster test runs: once the ISR
is whole again, every replica of every partition holds the same batches (offsets, leader
epochs and CRCs) up to the high watermark.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from oncelog.protocol.records.batch import iter_batches
from tests.broker_process import BrokerProcess
from tests.etcd_server import EtcdServer, sigstop
from tests.integration.rawclient import METADATA, Closed, RawClient, metadata_body

#: Short timeouts so failures are seen in seconds, not Kafka's tens of seconds.
FAST = {
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "log.flush.offset.checkpoint.interval.ms": "2000",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(
        self,
        base: Path,
        size: int = 3,
        overrides: dict[str, str] | None = None,
        broker_overrides: dict[int, dict[str, str]] | None = None,
    ) -> None:
        self.base = base
        self.etcd = EtcdServer(base / "etcd")
        self.overrides = {**FAST, **(overrides or {})}
        #: Per broker, on top of `overrides` (e.g. an `advertised.listeners` of a proxy).
        self.broker_overrides = broker_overrides or {}
        self.brokers: dict[int, BrokerProcess] = {}
        for node_id in range(1, size + 1):
            broker = BrokerProcess(base / f"broker-{node_id}", {"node.id": str(node_id)})
            broker.port = free_port()
            self.brokers[node_id] = broker

    def start(self) -> Cluster:
        self.etcd.start()
        for node_id, broker in self.brokers.items():
            broker.overrides.update(self.overrides, **{"etcd.connect": self.etcd.endpoint})
            broker.overrides.update(self.broker_overrides.get(node_id, {}))
        threads = [threading.Thread(target=b.start) for b in self.brokers.values()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        missing = [n for n, b in self.brokers.items() if not b.alive()]
        for n in missing:
            # free_port() is only a guess: another process may take the port before the
            # broker binds it. One more try on a new port.
            if "Address already in use" in self.brokers[n].log_tail(5):
                self.brokers[n].port = free_port()
                with contextlib.suppress(RuntimeError):
                    self.brokers[n].start()
        missing = [n for n, b in self.brokers.items() if not b.alive()]
        if missing:
            tails = "\n".join(self.brokers[n].log_tail() for n in missing)
            raise RuntimeError(f"brokers {missing} did not start:\n{tails}")
        self.wait_brokers_known()
        return self

    def wait_brokers_known(self, timeout: float = 15) -> None:
        """Every broker's Metadata lists every broker (each learns the others through its
        etcd watch, a moment after they registered): placements see the whole cluster."""
        everyone = set(self.brokers)

        def known() -> bool:
            for broker in self.brokers.values():
                with RawClient(broker.port, timeout=5) as client:
                    answer = client.call(METADATA, 12, metadata_body([]))
                if {b.node_id for b in answer.brokers} != everyone:
                    return False
            return True

        self.wait_for(known, timeout, "every broker knowing every broker")

    def close(self) -> None:
        for broker in self.brokers.values():
            if broker.alive():
                broker.kill()
        self.etcd.close()

    # -- SIGSTOP / SIGCONT: a broker that hangs (GC pause, VM freeze), its sockets open ------

    def pause(self, *node_ids: int) -> None:
        for node_id in node_ids:
            proc = self.brokers[node_id].proc
            assert proc is not None and proc.poll() is None, f"broker {node_id} is not running"
            sigstop(proc.pid, f"broker {node_id}")

    def resume(self, *node_ids: int) -> None:
        for node_id in node_ids:
            proc = self.brokers[node_id].proc
            assert proc is not None, f"broker {node_id} is not running"
            os.kill(proc.pid, signal.SIGCONT)

    def bootstrap_of(self, node_ids: Iterable[int]) -> str:
        return ",".join(self.brokers[n].bootstrap for n in node_ids)

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def admin(self, via: Iterable[int] | None = None) -> AdminClient:
        """An admin client bootstrapped from `via` (default: every broker)."""
        bootstrap = self.bootstrap if via is None else self.bootstrap_of(via)
        return AdminClient({"bootstrap.servers": bootstrap})

    def create_topic(
        self,
        name: str,
        partitions: int = 3,
        rf: int = 3,
        configs: dict[str, str] | None = None,
        assignment: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """`assignment`: the replicas of each partition (the first one leads at creation)."""
        admin = self.admin()  # kept alive until the futures resolve
        if assignment is not None:
            new = NewTopic(
                name,
                len(assignment),
                replica_assignment=[list(r) for r in assignment],
                config=configs or {},
            )
        else:
            new = NewTopic(name, partitions, rf, config=configs or {})
        futures = admin.create_topics([new])
        for future in futures.values():
            future.result(15)
        self.wait_led_everywhere(name, 15)

    def wait_led_everywhere(self, topic: str, timeout: float = 60) -> None:
        """Until every running broker's Metadata shows a leader for each of the topic's
        partitions: after a create, or after restarts (a restarted broker answers Metadata
        before its etcd watch has given it the topics, and a client asking it then is told
        the partitions are unknown)."""
        self.wait_for(
            lambda: self._led_everywhere(topic), timeout, f"every broker knowing {topic}'s leaders"
        )

    def _led_everywhere(self, topic: str) -> bool:
        """Whether every running broker's metadata shows a leader for each of the topic's
        partitions. A broker learns of a new topic from its etcd watch, a moment after the one
        that answered CreateTopics; Kafka's own test harness waits the same way."""
        for node, broker in self.brokers.items():
            if not broker.alive():
                continue
            parts = self._partitions_via(topic, [node])
            if not parts or any(leader < 0 for leader, _, _ in parts.values()):
                return False
        return True

    def partitions(
        self, topic: str, via: Iterable[int] | None = None
    ) -> dict[int, tuple[int, list[int], list[int]]]:
        """partition -> (leader, replicas, isr) from Metadata. With `via`, asked of those
        brokers only, the first that answers (a paused broker never does), on a connection
        of its own: a client would ask whichever broker it likes once it knows them all."""
        if via is not None:
            return self._partitions_via(topic, via)
        md = self.admin().list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            return {}
        return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in t.partitions.values()}

    def _partitions_via(
        self, topic: str, via: Iterable[int]
    ) -> dict[int, tuple[int, list[int], list[int]]]:
        failures = []
        for node in via:
            try:
                with RawClient(self.brokers[node].port, timeout=5) as client:
                    answer = client.call(METADATA, 12, metadata_body([topic]))
            except (OSError, Closed) as exc:
                failures.append(f"broker {node}: {exc!r}")
                continue
            found = [t for t in answer.topics if t.name == topic and t.error_code in (0, 5)]
            if not found:
                return {}
            return {
                p.partition_index: (p.leader_id, list(p.replica_nodes), list(p.isr_nodes))
                for p in found[0].partitions
            }
        raise RuntimeError(f"no Metadata answer: {failures}")

    def leader(self, topic: str, partition: int, via: Iterable[int] | None = None) -> int:
        return self.partitions(topic, via).get(partition, (-1, [], []))[0]

    def wait_for(self, condition, timeout: float, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if condition():
                    return
            except Exception:  # metadata may fail while brokers restart
                pass
            time.sleep(0.2)
        raise AssertionError(f"timed out after {timeout}s waiting for {what}")

    def wait_isr_full(self, topic: str, timeout: float = 60) -> None:
        def full() -> bool:
            parts = self.partitions(topic)
            return bool(parts) and all(
                leader >= 0 and sorted(isr) == sorted(replicas)
                for leader, replicas, isr in parts.values()
            )

        self.wait_for(full, timeout, f"the full ISR of {topic}")

    def kill_leaders_in_turn(
        self, topic: str, partitions: int, stop: threading.Event, kills: list[int]
    ) -> None:
        """Until `stop`: every 2.5 s SIGKILL the leader of the next partition and restart it a
        second later (run it in a thread beside the workload)."""
        partition = 0
        while not stop.wait(2.5):
            leader = self.leader(topic, partition % partitions)
            partition += 1
            if leader < 0:
                continue
            self.brokers[leader].kill()
            kills.append(leader)
            time.sleep(1.0)
            self.brokers[leader].start()

    # -- the replica check ---------------------------------------------------------------

    def high_watermarks(self, topic: str) -> dict[int, int]:
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "hw-check"})
        try:
            return {
                p: consumer.get_watermark_offsets(KafkaTopicPartition(topic, p), timeout=10)[1]
                for p in self.partitions(topic)
            }
        finally:
            consumer.close()

    def replica_batches(
        self, node_id: int, topic: str, partition: int
    ) -> list[tuple[int, int, int, int]]:
        """(base offset, last offset, partition leader epoch, crc) of the stored batches."""
        directory = self.brokers[node_id].data_dir / f"{topic}-{partition}"
        out = []
        for log_file in sorted(directory.glob("*.log")):
            for _, header in iter_batches(log_file.read_bytes()):
                epoch = header.partition_leader_epoch
                out.append((header.base_offset, header.last_offset, epoch, header.crc))
        return out

    def check_replicas_identical(self, topic: str, timeout: float = 60) -> None:
        """Every replica equals the leader's batches below the high watermark."""
        self.wait_isr_full(topic, timeout)
        hws = self.high_watermarks(topic)
        parts = self.partitions(topic)

        def identical() -> bool:
            for p, (_, replicas, _) in parts.items():
                logs = {
                    r: [b for b in self.replica_batches(r, topic, p) if b[1] < hws[p]]
                    for r in replicas
                }
                first = logs[replicas[0]]
                complete = bool(first) and first[-1][1] == hws[p] - 1
                if hws[p] > 0 and not complete:
                    return False
                if any(batches != first for batches in logs.values()):
                    return False
            return True

        self.wait_for(identical, timeout, f"identical replicas of {topic} up to {hws}")

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
