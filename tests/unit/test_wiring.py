"""Listeners are given at construction (`broker/assembly.py` is the broker's wiring
diagram): no module of `src/` sets a callback on another object after building it, which
once left what an append triggers readable only in `BrokerServer.__init__`.

The rule is read from the source: an assignment `x.attr = ...` to another object's
attribute (not `self.attr`) that is a lambda, or whose attribute is named like a callback
(`*_listener`, `*_hook`, `on_*`, `wake`, `notify`, `send_*`, `*_changed`, `*_verifier`,
`*_known`, `*_cb`, `*callback*`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import oncelog

SRC = Path(oncelog.__file__).parent
#: A waiting request's completion, attached by the connection that waits for it, as a
#: future's done-callback is: the handler that builds the operation cannot know it.
ALLOWED = {("server/connection.py", "on_done")}
CALLBACK_NAME = re.compile(
    r"(_listener|_hook|_changed|_verifier|_known|_cb)$|^on_|^wake$|^notify|^send_|callback"
)


def late_callbacks(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assign):
            continue
        for target in node.targets:
            if not isinstance(target, ast.Attribute):
                continue
            owner = target.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue  # an object's own attribute, in its constructor or a method
            if isinstance(node.value, ast.Lambda) or CALLBACK_NAME.search(target.attr):
                found.append((node.lineno, target.attr))
    return found


def test_no_callback_is_set_after_construction() -> None:
    offenders = [
        f"{rel}:{line}: .{attr} = ..."
        for path in sorted(SRC.rglob("*.py"))
        for line, attr in late_callbacks(ast.parse(path.read_text()))
        if ((rel := path.relative_to(SRC).as_posix()), attr) not in ALLOWED
    ]
    assert offenders == []


def test_the_rule_sees_a_late_callback() -> None:
    code = """
self.replicas.append_listener = self._on_append
broker.replicas.appended = lambda *_: None
txns.on_offsets_marker = groups.on_marker
self.wake = wake
self.cluster.authorizer = context.authorizer
"""
    assert [a for _, a in late_callbacks(ast.parse(code))] == [
        "append_listener",
        "appended",
        "on_offsets_marker",
    ]
