"""`oncelog users`: list and change SCRAM credentials through the Kafka protocol
(DescribeUserScramCredentials, AlterUserScramCredentials) with confluent-kafka's AdminClient,
as Kafka's `kafka-configs --entity-type users` does. A password is salted by the client;
only the salted password travels and only salted keys are stored."""

from __future__ import annotations

import argparse
import base64
import binascii
import importlib
import sys
from typing import Any

from oncelog.cli.command_config import UsageError, settings
from oncelog.cli.console import add_bootstrap, describe_error, exits_quietly, fail, print_table
from oncelog.security.scram import (
    DEFAULT_ITERATIONS,
    AddScramError,
    split_scram_argument,
)

TIMEOUT_S = 30.0


def add_parsers(sub: Any) -> None:
    users = sub.add_parser("users", help="describe and alter SCRAM users")
    commands = users.add_subparsers(dest="users_command", required=True)
    describe = commands.add_parser("describe", help="users, their mechanisms and iterations")
    describe.add_argument("--user", action="append", help="only this user (repeatable)")
    alter = commands.add_parser(
        "alter",
        help="add or delete SCRAM credentials",
        description="--add-scram 'SCRAM-SHA-256=[name=alice,password=pw,iterations=8192]' "
        "(salt= optional, base64) and --delete-scram 'SCRAM-SHA-512=[name=bob]', both "
        "repeatable; a user may be changed once per command.",
    )
    alter.add_argument("--add-scram", action="append", default=[], metavar="MECH=[...]")
    alter.add_argument("--delete-scram", action="append", default=[], metavar="MECH=[name=U]")
    for p in (describe, alter):
        add_bootstrap(p)
        p.add_argument(
            "--command-config",
            help="a properties file of client settings (security.protocol, sasl.mechanism, "
            "sasl.username, sasl.password, ssl.ca.location, ...)",
        )
    describe.set_defaults(func=exits_quietly(run_describe))
    alter.set_defaults(func=run_alter)


def _ck() -> Any:
    """confluent_kafka.admin, imported when a command runs (its stubs are partial)."""
    return importlib.import_module("confluent_kafka.admin")


def _admin(args: argparse.Namespace) -> Any:
    client_settings = settings(args)  # the --command-config file, as the other tools read it
    try:
        return _ck().AdminClient(client_settings)
    except Exception as exc:  # librdkafka refuses unknown or bad settings
        raise UsageError(f"bad client settings: {exc}") from None


def run_describe(args: argparse.Namespace) -> int:
    try:
        admin = _admin(args)
    except UsageError as exc:
        return fail(str(exc), 2)
    try:
        if args.user:
            futures = admin.describe_user_scram_credentials(args.user, request_timeout=TIMEOUT_S)
            described = {user: f.result() for user, f in futures.items()}
        else:
            future = admin.describe_user_scram_credentials(request_timeout=TIMEOUT_S)
            described = future.result()
    except Exception as exc:
        return fail(_printable(describe_error(exc)))
    rows = [
        [user, info.mechanism.name.replace("_", "-"), info.iterations]
        for user, description in sorted(described.items())
        for info in description.scram_credential_infos
    ]
    print_table(["USER", "MECHANISM", "ITERATIONS"], rows)
    return 0


def _alterations(args: argparse.Namespace) -> list[Any]:
    ck = _ck()
    out: list[Any] = []
    for argument in args.add_scram:
        mechanism, parts = split_scram_argument(argument)
        name, password = parts.pop("name", None), parts.pop("password", None)
        if name is None or password is None:
            raise UsageError(f"--add-scram needs name= and password=: {argument}")
        iterations_text = parts.pop("iterations", str(DEFAULT_ITERATIONS))
        if not iterations_text.isdigit():
            raise UsageError(f"Failed to parse iterations count: {iterations_text}")
        salt_text = parts.pop("salt", None)
        try:
            salt = None if salt_text is None else base64.b64decode(salt_text, validate=True)
        except binascii.Error:
            raise UsageError(f"Failed to decode given salt: {salt_text}") from None
        if parts:
            raise UsageError("Unknown SCRAM configurations: " + ", ".join(sorted(parts)))
        info = ck.ScramCredentialInfo(_mechanism(ck, mechanism), int(iterations_text))
        out.append(ck.UserScramCredentialUpsertion(name, info, password.encode(), salt))
    for argument in args.delete_scram:
        mechanism, parts = split_scram_argument(argument)
        name = parts.pop("name", None)
        if name is None or parts:
            raise UsageError(f"--delete-scram takes only name=: {argument}")
        out.append(ck.UserScramCredentialDeletion(name, _mechanism(ck, mechanism)))
    if not out:
        raise UsageError("alter needs --add-scram or --delete-scram")
    return out


def _printable(text: str) -> str:
    """librdkafka 2.x leaves a stray control byte at the end of some per-user messages."""
    return "".join(c for c in text if c.isprintable())


def _mechanism(ck: Any, name: str) -> Any:
    return ck.ScramMechanism[name.replace("-", "_")]


def run_alter(args: argparse.Namespace) -> int:
    try:
        alterations = _alterations(args)
        admin = _admin(args)
    except (UsageError, AddScramError) as exc:
        return fail(str(exc), 2)
    try:
        futures = admin.alter_user_scram_credentials(alterations, request_timeout=TIMEOUT_S)
    except (TypeError, ValueError) as exc:  # confluent-kafka's own checks (a user twice)
        return fail(str(exc), 2)
    status = 0
    for user, future in sorted(futures.items()):
        try:
            future.result()
        except Exception as exc:
            print(f"Error: {user}: {_printable(describe_error(exc))}", file=sys.stderr)
            status = 1
        else:
            print(f"Altered SCRAM credentials of {user}")
    return status
