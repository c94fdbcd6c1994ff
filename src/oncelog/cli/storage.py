"""`oncelog storage format`: prepare a single node's log dir before its first start, as
Kafka's `kafka-storage format` does, with SCRAM credentials (`--add-scram`) so a SASL
listener has users from the start (there is no unauthenticated way to add the first one)."""

from __future__ import annotations

import argparse
import base64
import uuid
from pathlib import Path
from typing import Any

from oncelog.cli.console import fail
from oncelog.metadata.image import MetadataImage
from oncelog.security.credentials import ScramCredentials
from oncelog.security.scram import AddScramError, parse_add_scram

DESCRIPTION = """\
Write the metadata image of a new single node into DIR (its first log dir): a cluster id
(--cluster-id, else a random one), meta.properties, and the SCRAM credentials given with
--add-scram, stored salted (salt, iterations, StoredKey, ServerKey), never the password:

  oncelog storage format --data-dir DIR \\
      --add-scram 'SCRAM-SHA-256=[name=admin,password=admin-secret]' \\
      --add-scram 'SCRAM-SHA-512=[name=alice,password=pw,iterations=8192,salt=BASE64]'

A DIR that is already formatted (or used) is refused unless --ignore-formatted, which leaves
it as it is. Errors are one line on stderr: exit 1, usage errors 2."""


def add_parsers(sub: Any) -> None:
    storage = sub.add_parser("storage", help="prepare a log dir (format with SCRAM users)")
    commands = storage.add_subparsers(dest="storage_command", required=True)
    p = commands.add_parser(
        "format",
        help="write a new metadata image with SCRAM credentials",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--data-dir", required=True, metavar="DIR", help="the (first) log dir")
    p.add_argument("--node-id", type=int, default=1, help="node.id (default 1)")
    p.add_argument("--cluster-id", help="the cluster id (default: a new random one)")
    p.add_argument(
        "--add-scram",
        "-S",
        action="append",
        default=[],
        metavar="MECHANISM=[name=USER,password=PW]",
        help="a SCRAM credential (repeatable); also iterations=, salt=, saltedpassword=",
    )
    p.add_argument(
        "--ignore-formatted",
        "-g",
        action="store_true",
        help="exit 0 without changing a dir that is already formatted",
    )
    p.set_defaults(func=run_format)


def run_format(args: argparse.Namespace) -> int:
    credentials = ScramCredentials()
    for argument in args.add_scram:
        try:
            mechanism, name, credential = parse_add_scram(argument)
        except AddScramError as exc:
            return fail(str(exc), 2)
        credentials.put(name, mechanism, credential)
    log_dir = Path(args.data_dir)
    if MetadataImage.is_formatted(log_dir):
        if args.ignore_formatted:
            print(f"{log_dir} is already formatted; left as it is (--ignore-formatted)")
            return 0
        return fail(
            f"Log directory {log_dir} is already formatted. "
            "Use --ignore-formatted to ignore this directory and format the others."
        )
    cluster_id = args.cluster_id or (
        base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    )
    try:
        MetadataImage.format(log_dir, args.node_id, cluster_id, credentials.to_json())
    except OSError as exc:
        return fail(f"cannot format {log_dir}: {exc.strerror or exc}")
    users = len(credentials.users())
    print(f"Formatted {log_dir} with cluster.id {cluster_id} and {users} SCRAM user(s)")
    return 0
