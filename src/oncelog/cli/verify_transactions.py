"""`oncelog verify transactions`: Kafka's transactions system test, ours (being written)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(verify_sub: Any) -> None:
    p = verify_sub.add_parser(
        "transactions",
        help="copy integers through transactional copiers while brokers fail; check exactly once",
    )
    p.set_defaults(func=run_transactions)


def run_transactions(args: argparse.Namespace) -> int:
    raise SystemExit("oncelog verify transactions: not yet available")
