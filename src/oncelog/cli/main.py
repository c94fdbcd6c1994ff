"""Entry point of the `oncelog` command."""

from __future__ import annotations

import argparse
import logging
import sys

from oncelog.cli import (
    acls,
    clients,
    cluster,
    configs,
    delete_records,
    dump_log,
    get_offsets,
    log_dirs,
    pipeline,
    reassign,
    serve,
    storage,
    transactions,
    users,
    verify,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="oncelog", description="A Kafka-compatible broker with exactly-once semantics."
    )
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING, ERROR")
    sub = parser.add_subparsers(dest="command", required=True)
    serve.add_parser(sub)
    clients.add_parsers(sub)
    transactions.add_parsers(sub)
    cluster.add_parsers(sub)
    configs.add_parsers(sub)
    acls.add_parsers(sub)
    storage.add_parsers(sub)
    dump_log.add_parsers(sub)
    reassign.add_parsers(sub)
    users.add_parsers(sub)
    get_offsets.add_parsers(sub)
    delete_records.add_parsers(sub)
    log_dirs.add_parsers(sub)
    verify.add_parsers(sub)
    pipeline.add_parsers(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
