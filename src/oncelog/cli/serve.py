"""`oncelog serve`: run a broker (server.properties, then flags)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from oncelog.config import BrokerConfig
from oncelog.errors import InvalidConfig


def add_parser(sub: Any) -> None:
    p = sub.add_parser("serve", help="run a broker")
    p.add_argument("properties", nargs="?", type=Path, help="a Kafka server.properties file")
    p.add_argument(
        "--listen", metavar="HOST:PORT", help="shortcut for listeners=PLAINTEXT://HOST:PORT"
    )
    p.add_argument("--data-dir", metavar="DIR", help="shortcut for log.dirs=DIR")
    p.add_argument("--node-id", type=int, help="shortcut for node.id")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any broker config, e.g. --override log.segment.bytes=1048576",
    )
    p.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> BrokerConfig:
    overrides: list[tuple[str, str]] = []
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidConfig(f"--override needs KEY=VALUE, got {item!r}")
        overrides.append((key.strip(), value))
    if args.listen:
        overrides.append(("listeners", f"PLAINTEXT://{args.listen}"))
    if args.data_dir:
        overrides.append(("log.dirs", args.data_dir))
    if args.node_id is not None:
        overrides.append(("node.id", str(args.node_id)))
    return BrokerConfig.load(args.properties, overrides)


def run(args: argparse.Namespace) -> int:
    from oncelog.server.app import run as run_broker

    try:
        config = config_from_args(args)
    except (InvalidConfig, OSError) as exc:
        print(f"oncelog: configuration error: {exc}", flush=True)
        return 2
    return run_broker(config)
