"""`oncelog verify check HISTORY`: check a recorded history for exactly-once anomalies.

Checking is separate from running the workload so a history can be checked again later (after a
checker fix, or on another machine) and so histories recorded by other tools can be checked too.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from oncelog.verify.checker import ALLOWED, CheckResult, OpRef, check, write_report
from oncelog.verify.history import HistoryError, read_history


def add_parsers(sub: Any) -> None:
    verify = sub.add_parser("verify", help="check a broker's exactly-once promises")
    verify_sub = verify.add_subparsers(dest="action", required=True)
    chk = verify_sub.add_parser("check", help="check a recorded history (JSON lines)")
    chk.add_argument("history", help="the history file")
    chk.add_argument("--json", dest="report", help="also write a JSON report here")
    chk.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Exit 0 when the history has no failure anomaly, 1 when it has, 2 when it is unreadable."""
    try:
        ops = read_history(args.history)
    except (OSError, HistoryError) as e:
        print(f"cannot read history: {e}", file=sys.stderr)
        return 2
    result = check(ops)
    print(summary(result))
    if args.report:
        write_report(result, args.report)
    return 0 if result.ok else 1


def summary(result: CheckResult) -> str:
    """The anomaly table, then the first example of each kind found."""
    stats = ", ".join(f"{k} {v}" for k, v in result.stats.items())
    counts = result.counts
    width = max(len(k) for k in counts)
    lines = [f"history: {stats}", "", f"{'anomaly':<{width}}  count"]
    lines += [f"{kind:<{width}}  {n}" for kind, n in counts.items()]
    lines.append(f"(allowed by Kafka's design, not checked: {', '.join(ALLOWED)})")
    seen: set[str] = set()
    for a in result.anomalies:
        if a.kind not in seen:
            seen.add(a.kind)
            ops = ", ".join(_op_name(o) for o in a.ops)
            lines.append(f"e.g. {a.kind} on {a.topic}-{a.partition}: {a.details} by {ops}")
    lines.append("")
    lines.append("OK: no anomalies" if result.ok else f"FAIL: {len(result.anomalies)} anomalies")
    return "\n".join(lines)


def _op_name(ref: OpRef) -> str:
    """`send@12 p1#5`: the op type, its line in the history and its process and op index."""
    who = "" if ref.process is None else f" {ref.process}#{ref.index}"
    return f"{ref.type}@{ref.position}{who}"
