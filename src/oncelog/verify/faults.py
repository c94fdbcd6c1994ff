"""Faults the workload injects: on the broker or the cluster the tool started, on its clients.

Why an interface: `run` schedules faults without knowing what they do, so each kind (process
faults, network partitions through the cluster's relays, etcd failures) is one `Fault`
implementation, and the scheduler stays the same. Every fault can be healed, and healing is
idempotent, so the run can always end with "heal everything, then read".
"""

from __future__ import annotations

import itertools
import random
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Protocol

from confluent_kafka import KafkaException

from oncelog.client import reassignments
from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError
from oncelog.types import TopicPartition
from oncelog.verify.cluster import LocalCluster
from oncelog.verify.netproxy import ETCD
from oncelog.verify.processes import LocalBroker
from oncelog.verify.roles import Roles


class NotInjected(Exception):
    """start() found nothing to hit (e.g. no writer alive to crash): no fault window."""


class Fault(ABC):
    """One kind of fault against one target: start() injects it, heal() undoes it (idempotent)."""

    kind: str = "fault"
    #: When start() injected it (after any role lookup); None: when start() was called.
    injected_at: float | None = None

    @property
    @abstractmethod
    def target(self) -> str:
        """What the fault hits, for the history and the timeline."""

    @abstractmethod
    def start(self) -> str | None:
        """Inject the fault; returns a detail for the history. Raises NotInjected when there
        is nothing to hit, so no fault window is recorded for it."""

    @abstractmethod
    def heal(self) -> str | None:
        """Undo the fault if active (safe to call when it is not); returns a detail."""


class BrokerFault(Fault):
    """A fault on one broker process the tool started."""

    def __init__(self, broker: LocalBroker) -> None:
        self.broker = broker

    @property
    def target(self) -> str:
        return self.broker.name


class KillFault(BrokerFault):
    """SIGKILL the broker; heal restarts it on the same port (recovery from an unclean stop)."""

    kind = "kill"

    def start(self) -> str | None:
        self.broker.kill()
        return "SIGKILL"

    def heal(self) -> str | None:
        if self.broker.alive():
            return None
        began = time.monotonic()
        self.broker.start()
        return f"restarted in {time.monotonic() - began:.1f}s"


class PauseFault(BrokerFault):
    """SIGSTOP the broker (a process that hangs, e.g. a long GC pause); heal sends SIGCONT."""

    kind = "pause"

    def start(self) -> str | None:
        self.broker.pause()
        return "SIGSTOP"

    def heal(self) -> str | None:
        if not self.broker.paused:
            return None
        self.broker.resume()
        return "SIGCONT"


class Crashable(Protocol):
    """A client process that can be killed and started again (verify.worker.ProcessClient)."""

    base: str

    @property
    def alive(self) -> bool: ...

    def crash(self) -> str: ...

    def heal(self) -> str | None: ...


class ClientCrashFault(Fault):
    """SIGKILL one writer client process (round robin); heal starts a new instance of it.

    The new instance re-initialises the same transactional.id, which fences the dead one's
    open transaction; a copier then resumes from its group's committed offsets.
    """

    kind = "crash"

    def __init__(self, clients: Sequence[Crashable]) -> None:
        if not clients:
            raise ValueError("the crash fault needs writer clients (producers or copiers)")
        self.clients = list(clients)
        self._next = itertools.cycle(self.clients)
        self._victim: Crashable | None = None
        self._last = "clients"

    @property
    def target(self) -> str:
        return self._last

    def start(self) -> str | None:
        for _ in self.clients:
            victim = next(self._next)
            if victim.alive:
                self._victim, self._last = victim, victim.base
                return victim.crash()
        raise NotInjected("no writer client is alive to crash")

    def heal(self) -> str | None:
        victim, self._victim = self._victim, None
        return victim.heal() if victim is not None else None


class ClusterFault(Fault):
    """A fault on a cluster the tool started; its target is chosen by role at each start."""

    #: The roles a target is drawn from, in turn.
    ROLES: tuple[str, ...] = ("leader", "follower", "controller", "coordinator")

    def __init__(self, cluster: LocalCluster, roles: Roles) -> None:
        self.cluster = cluster
        self.roles = roles
        self._roles = itertools.cycle(self.ROLES)
        self._fallback = itertools.cycle(sorted(cluster.brokers))
        self.node: int | None = None
        self._target = "cluster"

    @property
    def target(self) -> str:
        return self._target

    def pick(self) -> tuple[int, str]:
        """The next role's holder; a live broker in turn when nobody holds it right now."""
        for _ in self.ROLES:
            role = next(self._roles)
            found = self.roles.find(role)
            if found is not None and self.cluster.brokers[found[0]].alive():
                return found
        for _ in self.cluster.brokers:
            node = next(self._fallback)
            if self.cluster.brokers[node].alive():
                return node, "no role known: in turn"
        raise NotInjected("no live broker")

    def start(self) -> str | None:
        self.node, why = self.pick()
        broker = self.cluster.brokers[self.node]
        self._target = broker.name
        self.injected_at = time.time()
        return f"{self.inject(broker)} ({why})"

    def inject(self, broker: LocalBroker) -> str:
        """Do it to the broker picked; returns what was done (a signal name)."""
        raise NotImplementedError

    def restart(self) -> str | None:
        """Start the broker this fault stopped again, unless it is running."""
        node, self.node = self.node, None
        if node is None or self.cluster.brokers[node].alive():
            return None
        began = time.monotonic()
        self.cluster.start_broker(node)
        return f"restarted in {time.monotonic() - began:.1f}s"


class ClusterKillFault(ClusterFault):
    """SIGKILL a broker chosen by role; heal restarts it on the same address."""

    kind = "kill"

    def inject(self, broker: LocalBroker) -> str:
        broker.kill()
        return "SIGKILL"

    def heal(self) -> str | None:
        return self.restart()


class ClusterPauseFault(ClusterFault):
    """SIGSTOP a broker chosen by role (a long GC pause, a frozen VM); heal sends SIGCONT."""

    kind = "pause"

    def inject(self, broker: LocalBroker) -> str:
        broker.pause()
        return "SIGSTOP"

    def heal(self) -> str | None:
        node, self.node = self.node, None
        if node is None or not self.cluster.brokers[node].paused:
            return None
        self.cluster.brokers[node].resume()
        return "SIGCONT"


class BounceFault(ClusterFault):
    """A rolling clean restart, one broker a window: SIGTERM (controlled shutdown), wait for
    the exit; heal starts it again. Successive windows go round the brokers."""

    kind = "bounce"

    def start(self) -> str | None:
        for _ in self.cluster.brokers:
            node = next(self._fallback)
            broker = self.cluster.brokers[node]
            if broker.alive():
                self.node, self._target = node, broker.name
                began = time.monotonic()
                broker.stop()
                return f"SIGTERM, stopped in {time.monotonic() - began:.1f}s"
        raise NotInjected("no live broker to bounce")

    def heal(self) -> str | None:
        return self.restart()


class EtcdFault(Fault):
    """The metadata store fails: SIGKILL and restart, or SIGSTOP/SIGCONT, in turn."""

    kind = "etcd"

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._modes = itertools.cycle(("kill", "pause"))
        self._mode: str | None = None

    @property
    def target(self) -> str:
        return ETCD

    def start(self) -> str | None:
        self._mode = next(self._modes)
        if self._mode == "kill":
            self.cluster.etcd.kill()
            return "SIGKILL"
        self.cluster.etcd.pause()
        return "SIGSTOP"

    def heal(self) -> str | None:
        mode, self._mode = self._mode, None
        if mode == "pause" or self.cluster.etcd.paused:
            self.cluster.etcd.resume()
            return "SIGCONT"
        if mode == "kill" or not self.cluster.etcd.alive():
            self.cluster.etcd.start()
            return "restarted"
        return None


class PartitionFault(ClusterFault):
    """Network partitions, in turn, and the links each cuts:

    - isolate: a partition leader cut from every peer and from etcd; clients still reach it;
    - follower: a follower cut from its leader only (both still reach etcd and clients);
    - split: the controller and up to a minority of brokers cut from the rest and etcd;
    - split-etcd: a leader (and a minority) with etcd, cut from the majority.
    """

    kind = "partition"
    MODES = ("isolate", "follower", "split", "split-etcd")

    def __init__(self, cluster: LocalCluster, roles: Roles) -> None:
        super().__init__(cluster, roles)
        self._modes = itertools.cycle(self.MODES)
        self.active = False

    def start(self) -> str | None:
        mode = next(self._modes)
        brokers = [str(n) for n in self.cluster.brokers]
        if mode == "follower":
            try:
                found = self.roles.follower()
            except (KafkaException, TimeoutError, ValueError):
                found = None
            if found is None:
                raise NotInjected("no in-sync follower to cut from its leader")
            follower, leader, why = found
            self.injected_at = time.time()
            self.cluster.cut([(str(follower), str(leader))])
            self._target = f"{follower} x {leader}"
            self.active = True
            return f"follower cut from its leader ({why})"
        # The minority is seeded with the controller for `split` (so it fails over too; with
        # three brokers `isolate` would otherwise be the same cut), a leader otherwise.
        led = self.roles.find("controller" if mode == "split" else "leader")
        first = str(led[0]) if led is not None else random.choice(brokers)
        minority = [first]
        others = [b for b in brokers if b != first]
        random.shuffle(others)
        if mode != "isolate":
            minority += others[: max(0, (len(brokers) - 1) // 2 - 1)]
        majority = [b for b in brokers if b not in minority]
        if mode == "split-etcd":
            minority.append(ETCD)
        else:
            majority.append(ETCD)
        self.injected_at = time.time()
        self.cluster.cut([(a, b) for a in minority for b in majority])
        self._target = f"{','.join(minority)} | {','.join(majority)}"
        self.active = True
        why = led[1] if led is not None else "at random"
        return f"{mode}: {','.join(minority)} cut from {','.join(majority)} ({why})"

    def heal(self) -> str | None:
        if not self.active:
            return None
        self.active = False
        self.cluster.heal_network()
        return "links healed"


class MoveFault(Fault):
    """A partition reassignment (KIP-455) under the workload. A workload partition with a full
    ISR, in turn, moves off one of its replicas (its leader every other time, which then hands
    over) onto a broker that holds none of it, or, when every broker does, to one replica
    fewer. Heal moves it back to the replicas it had: a move still running is taken back, a
    finished one copies the whole partition to the broker it left, under the workload too."""

    kind = "move"

    def __init__(self, cluster: LocalCluster, roles: Roles) -> None:
        self.cluster = cluster
        self.roles = roles
        self._turn = itertools.count()
        self._moved: tuple[TopicPartition, list[int]] | None = None
        self._target = "cluster"

    @property
    def target(self) -> str:
        return self._target

    def start(self) -> str | None:
        try:
            states = self.roles.leaders()
        except (KafkaException, TimeoutError, ValueError) as exc:
            raise NotInjected(f"no metadata: {exc}") from None
        full = sorted(
            ((tp, v) for tp, v in states.items() if v[0] >= 0 and set(v[2]) == set(v[1])),
            key=lambda item: self.roles.in_turn(item[0]),
        )
        if not full:
            raise NotInjected("no workload partition with a full ISR")
        turn = next(self._turn)
        (topic, partition), (leader, replicas, _) = full[turn % len(full)]
        followers = [r for r in replicas if r != leader]
        off = followers[-1] if followers and turn % 2 else leader
        spare = [
            n for n, b in sorted(self.cluster.brokers.items()) if n not in replicas and b.alive()
        ]
        target = [r for r in replicas if r != off] + spare[:1]
        tp = TopicPartition(topic, partition)
        error = self._alter({tp: target})
        if error is not None:
            raise NotInjected(f"move refused: {error}")
        self._moved = (tp, list(replicas))
        self._target = f"{topic}-{partition}"
        self.injected_at = time.time()
        role = "leader" if off == leader else "follower"
        return f"replicas {list(replicas)} -> {target} (off the {role} {off})"

    def heal(self) -> str | None:
        if self._moved is None:
            return None
        tp, replicas = self._moved
        error = self._alter({tp: replicas})
        if error is not None:
            return f"not moved back yet: {error}"  # the final heal tries again
        self._moved = None
        return f"moved back to {replicas}"

    def _alter(self, moves: dict[TopicPartition, list[int]]) -> str | None:
        """AlterPartitionReassignments through the first broker that answers; the error."""
        failures = []
        for address in self.cluster.bootstrap.split(","):
            try:
                with Admin(address, timeout=10.0) as admin:
                    outcome = reassignments.alter(admin, dict(moves))
            except (ClientError, OSError) as exc:
                failures.append(str(exc))
                continue
            return next((e for e in outcome.values() if e is not None), None)
        return "; ".join(failures) or "no broker"


CLUSTER_FAULTS: dict[str, Callable[[LocalCluster, Roles], Fault]] = {
    "kill": ClusterKillFault,
    "pause": ClusterPauseFault,
    "partition": PartitionFault,
    "bounce": BounceFault,
    "etcd": lambda cluster, _roles: EtcdFault(cluster),
    "move": MoveFault,
}
BROKER_FAULTS: dict[str, type[KillFault] | type[PauseFault]] = {
    "kill": KillFault,
    "pause": PauseFault,
}
CLIENT_FAULTS = ("crash",)
FAULT_NAMES = (*CLUSTER_FAULTS, *CLIENT_FAULTS)


def check_fault_names(names: Sequence[str], broker: bool, cluster: bool = False) -> None:
    """Unknown names, or server faults without servers the tool started, are errors."""
    for name in names:
        if name not in FAULT_NAMES:
            raise ValueError(f"unknown fault {name!r}; known: {', '.join(FAULT_NAMES)}")
        if name in CLIENT_FAULTS or cluster:
            continue
        if name not in BROKER_FAULTS:
            raise ValueError(f"the {name} fault needs --start-cluster")
        if not broker:
            raise ValueError(f"the {name} fault needs --start-broker or --start-cluster")


def make_faults(
    names: Sequence[str],
    broker: LocalBroker | None,
    clients: Sequence[Crashable],
    cluster: LocalCluster | None = None,
    roles: Roles | None = None,
) -> list[Fault]:
    """The faults named on the command line: server faults hit the tool's broker or cluster,
    crash the writer client processes."""
    check_fault_names(names, broker is not None, cluster is not None)
    out: list[Fault] = []
    crash: ClientCrashFault | None = None  # one rotation over the clients, however often named
    for name in names:
        if name in CLIENT_FAULTS:
            crash = crash or ClientCrashFault(clients)
            out.append(crash)
        elif cluster is not None:
            assert roles is not None
            out.append(CLUSTER_FAULTS[name](cluster, roles))
        else:
            assert broker is not None
            out.append(BROKER_FAULTS[name](broker))
    return out
