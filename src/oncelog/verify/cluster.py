"""`--start-cluster N`: etcd and N oncelog brokers, every link through a relay that can be cut.

Broker N listens on 127.0.0.(10+N) (127.0.0.11, .12, ...) on a port it picks at its first start
and keeps; it advertises its relay on 127.0.0.1 (`netproxy.Network.ingress`), so clients and
peers reach it only through that relay, and it reaches etcd through a relay of its own. Hence
`cut` can separate any two members ("1", "2", ..., "etcd") while clients still reach everyone.

Timeouts are short (`FAST`) so that a fault of a few seconds really moves leaders and shrinks
ISRs; a cluster under Kafka's defaults would ride out most of them unnoticed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from oncelog.verify.netproxy import ETCD, Network, Relay
from oncelog.verify.processes import LocalBroker, LocalEtcd

#: Session 3 s, lag 4 s: faults of a few seconds fence brokers and shrink ISRs.
FAST = {
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
    "replica.lag.time.max.ms": "4000",
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "replica.socket.timeout.ms": "5000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "5000",
    "log.flush.offset.checkpoint.interval.ms": "2000",
}


class LocalCluster:
    """etcd plus `size` brokers under `base`, with a relay on every link (see module doc)."""

    def __init__(
        self,
        base: Path,
        size: int = 3,
        replication_factor: int = 3,
        min_insync_replicas: int = 2,
        overrides: dict[str, str] | None = None,
    ) -> None:
        if not 1 <= size <= 200:
            raise ValueError(f"--start-cluster takes 1 to 200 brokers, not {size}")
        if not 1 <= replication_factor <= size:
            raise ValueError(
                f"--replication-factor {replication_factor} needs as many brokers (have {size})"
            )
        if not 1 <= min_insync_replicas <= replication_factor:
            raise ValueError(
                f"--min-insync-replicas {min_insync_replicas} must be between 1 and the "
                f"replication factor {replication_factor}"
            )
        self.base = base
        self.size = size
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self.etcd = LocalEtcd(base / "etcd")
        self.network = Network()
        self.ingress: dict[int, Relay] = {}
        self.etcd_links: dict[int, Relay] = {}
        self.brokers: dict[int, LocalBroker] = {}
        # The internal topics get at least the workload's replication factor (Kafka's default
        # is 3), so the broker-wide min.insync.replicas never exceeds their replicas.
        internal_rf = min(size, max(3, replication_factor))
        for n in range(1, size + 1):
            self.ingress[n] = self.network.ingress(str(n))
            self.etcd_links[n] = self.network.etcd_link(str(n))
            settings = {
                **FAST,
                "default.replication.factor": str(replication_factor),
                "min.insync.replicas": str(min_insync_replicas),
                "offsets.topic.replication.factor": str(internal_rf),
                "transaction.state.log.replication.factor": str(internal_rf),
                "transaction.state.log.min.isr": str(min(min_insync_replicas, internal_rf)),
                **(overrides or {}),
                "etcd.connect": self.etcd_links[n].address,
                "advertised.listeners": f"PLAINTEXT://{self.ingress[n].address}",
            }
            self.brokers[n] = LocalBroker(
                base / f"broker-{n}", base / f"broker-{n}.log", settings, f"127.0.0.{10 + n}", n
            )

    @property
    def bootstrap(self) -> str:
        return ",".join(relay.address for relay in self.ingress.values())

    @property
    def members(self) -> list[str]:
        return [str(n) for n in self.brokers] + [ETCD]

    def start(self) -> LocalCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        self.etcd.start()
        for relay in self.etcd_links.values():
            relay.target = ("127.0.0.1", self.etcd.client_port)
        errors: list[BaseException] = []

        def start(n: int) -> None:
            try:
                self.start_broker(n)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=start, args=(n,), daemon=True) for n in self.brokers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            self.close()
            raise errors[0]
        return self

    def start_broker(self, n: int) -> None:
        broker = self.brokers[n]
        broker.start(timeout=60)
        self.ingress[n].target = (broker.host, broker.port)

    def cut(self, pairs: Iterable[tuple[str, str]]) -> None:
        self.network.cut(pairs)

    def heal_network(self) -> None:
        self.network.heal()

    def heal(self) -> None:
        """Everything back: links through, etcd and every broker running and not paused."""
        self.network.heal()
        self.etcd.resume()
        if not self.etcd.alive():
            self.etcd.start()
        for n, broker in self.brokers.items():
            broker.resume()
            if not broker.alive():
                self.start_broker(n)

    def close(self) -> None:
        """Kill everything; nothing can be started again afterwards (a fault thread that is
        still healing must not leave a broker behind)."""
        for broker in self.brokers.values():
            broker.close()
        self.etcd.close()
        self.network.close()
