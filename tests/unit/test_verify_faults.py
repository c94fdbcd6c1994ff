"""Client crash faults: a round with no writer alive injects nothing and records no window."""

from __future__ import annotations

import pytest

from oncelog.verify.faults import ClientCrashFault, NotInjected


class FakeWriter:
    """A crashable client as the fault sees it (the real ones are worker processes)."""

    def __init__(self, base: str, alive: bool) -> None:
        self.base = base
        self.alive = alive
        self.crashed = 0

    def crash(self) -> str:
        self.alive = False
        self.crashed += 1
        return f"SIGKILL {self.base}"

    def heal(self) -> str | None:
        self.alive = True
        return f"restarted {self.base}"


def test_crash_rotates_over_live_writers() -> None:
    a, b = FakeWriter("a", True), FakeWriter("b", True)
    fault = ClientCrashFault([a, b])
    assert fault.start() == "SIGKILL a" and fault.target == "a"
    assert fault.heal() == "restarted a"
    assert fault.start() == "SIGKILL b" and fault.target == "b"


def test_no_live_writer_is_not_a_fault_window() -> None:
    a = FakeWriter("a", False)
    fault = ClientCrashFault([a])
    with pytest.raises(NotInjected):
        fault.start()
    assert a.crashed == 0
    assert fault.heal() is None  # nothing to undo


def test_transaction_coordinator_partition_is_kafkas() -> None:
    """Java's String.hashCode and Kafka's abs-mod placement (values computed with Java)."""
    from oncelog.verify.roles import java_string_hash, txn_partition

    assert java_string_hash("") == 0
    assert java_string_hash("abc") == 96354
    assert java_string_hash("transactional-id-1") == 1051133891
    assert java_string_hash("héllo-✓") == 289802964
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert txn_partition("polygenelubricants", 50) == 0
    assert txn_partition("transactional-id-1", 50) == 1051133891 % 50


def test_role_faults_go_round_the_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Leaders and followers are taken partition by partition across the topics, so a short
    run's leader faults hit the RF 2 and RF 1 topics' partitions too (sorted by name, the
    first topic's partitions came first and took every turn)."""
    from oncelog.verify.roles import Roles

    topics = ["v", "v-rf2", "v-rf1"]
    states = {
        ("v", 0): (1, (1, 2, 3), (1, 2, 3)),
        ("v", 1): (2, (2, 3, 1), (2, 3, 1)),
        ("v-rf2", 0): (3, (3, 1), (3, 1)),
        ("v-rf2", 1): (1, (1, 2), (1, 2)),
        ("v-rf1", 0): (2, (2,), (2,)),
        ("v-rf1", 1): (3, (3,), (3,)),
    }
    roles = Roles("127.0.0.1:1", topics)
    monkeypatch.setattr(roles, "leaders", lambda: states)
    led = [roles.leader() for _ in range(4)]
    assert [what for _, what in led if what] == [
        "leader of v-0",
        "leader of v-rf2-0",
        "leader of v-rf1-0",
        "leader of v-1",
    ]
    assert [n for n, _ in led] == [1, 3, 2, 2]
    fresh = Roles("127.0.0.1:1", topics)
    monkeypatch.setattr(fresh, "leaders", lambda: states)
    followers = [fresh.follower() for _ in range(6)]
    assert [f[2].split(" (")[0] for f in followers if f] == [
        "follower of v-0",
        "follower of v-0",
        "follower of v-rf2-0",
        "follower of v-1",
        "follower of v-1",
        "follower of v-rf2-1",
    ]
