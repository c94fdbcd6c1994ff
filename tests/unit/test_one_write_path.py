"""Every write to a partition's log goes through one method with an origin: outside the
storage layer only `ReplicaManager.append(tp, records, origin)` calls `PartitionLog.append`,
so the checks and the bookkeeping of a write (leader, min.insync.replicas, metrics, the high
watermark, a coordinator write's wait) cannot be skipped by a caller that writes itself.

The rule is read from the source: a call `X.append(...)` with more than one argument (a
list's or deque's `append` takes one) is a log write, allowed only in `storage/`, in
`broker/replica_manager.py`, and on a replica manager (`...replicas.append(...)`). Only the
layers that may import the storage layer are read (the import-linter contracts keep the
clients, tools, the verifier and the Spark connector away from it)."""

from __future__ import annotations

import ast
from pathlib import Path

import oncelog

SRC = Path(oncelog.__file__).parent
OWNER = "broker/replica_manager.py"
#: The packages above the storage layer that may import it.
WRITERS = ("broker", "server", "coordinator", "replication", "metadata")


def _receiver(node: ast.expr) -> str:
    """The name a call's receiver ends with: `self.replicas` → "replicas"."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def log_writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, receiver) of each call that writes a log directly, not through a replica
    manager."""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name in ("append_marker", "append_as_follower", "append_as_stored"):
            found.append((node.lineno, name))  # the old second ways in: gone
        elif name == "append" and len(node.args) + len(node.keywords) > 1:
            receiver = _receiver(node.func.value)
            if receiver != "replicas":
                found.append((node.lineno, receiver))
    return found


def test_only_the_replica_manager_writes_partition_logs() -> None:
    offenders = []
    paths = sorted(p for package in WRITERS for p in (SRC / package).rglob("*.py"))
    assert len(paths) > 50
    for path in paths:
        rel = path.relative_to(SRC).as_posix()
        if rel == OWNER:
            continue
        for line, receiver in log_writes(ast.parse(path.read_text())):
            offenders.append(f"{rel}:{line}: {receiver}.append(...)")
    assert offenders == []


def test_the_rule_sees_a_direct_write() -> None:
    code = """
plog.append(validated, 0)
partition.log.append(data, origin=AppendOrigin.REPLICATION)
plog.append_marker(7, 0, 0, True, 0)
ctx.broker.replicas.append(tp, data, AppendOrigin.COORDINATOR)
items.append(x)
"""
    assert [r for _, r in log_writes(ast.parse(code))] == ["plog", "log", "append_marker"]
