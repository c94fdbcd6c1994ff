"""The processes a test started, read from /proc (Linux): to kill a whole tree, or to find
what a test left running."""

from __future__ import annotations

import os


def _table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, state letter) of every process."""
    table: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        # The command may hold spaces and parentheses: the fields after it start past ") ".
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        table[int(entry)] = (int(ppid), state)
    return table


def descendants(pid: int, *, living_only: bool = False) -> set[int]:
    """Every descendant of `pid` (children, grandchildren, …); with `living_only`, not the
    zombies (ended, not yet waited for)."""
    table = _table()
    children: dict[int, list[int]] = {}
    for child, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(child)
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    if living_only:
        out = {p for p in out if table[p][1] != "Z"}
    return out
