"""`--command-config FILE` of the admin tools (`acls`, `configs`, `users`, `get-offsets`,
`delete-records`, `log-dirs`): client settings in properties form (`key=value` lines, `#` and
`!` comments).

The settings go to confluent-kafka's AdminClient as they are (librdkafka's names:
`security.protocol`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
`ssl.ca.location`, ...). `log-dirs` also speaks through `oncelog.client`, which takes the same
file's security settings as a `SaslLogin` and an `ssl.SSLContext`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib
import ssl
import time
from typing import Any

from oncelog.cli.console import describe_error
from oncelog.client.connection import SaslLogin

#: How often a wait looks at librdkafka's error callbacks.
POLL_S = 0.1

HELP = (
    "a properties file of client settings (security.protocol, sasl.mechanism, sasl.username, "
    "sasl.password, ssl.ca.location, ...)"
)


class UsageError(Exception):
    """A bad command line or input file: one `Error:` line, exit status 2."""


def add_command_config(parser: Any) -> None:
    parser.add_argument("--command-config", metavar="FILE", help=HELP)


def settings(args: argparse.Namespace) -> dict[str, str]:
    """librdkafka settings: the bootstrap servers, librdkafka's own log silenced (an
    unreachable broker is one `Error:` line, not a line per reconnect), then the file's."""
    out = {"bootstrap.servers": args.bootstrap_server, "log_level": "0"}
    if not args.command_config:
        return out
    try:
        with open(args.command_config) as f:
            lines = [line.strip() for line in f]
    except OSError as exc:
        raise UsageError(f"cannot read --command-config: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--command-config is not a text file: {args.command_config}") from None
    for line in lines:
        if line and not line.startswith(("#", "!")):
            key, sep, value = line.partition("=")
            if not sep:
                raise UsageError(f"--command-config: not key=value: {line}")
            out[key.strip()] = value.strip()
    return out


class LoginFailed(Exception):
    """The brokers refused the client's login (SASL or TLS authentication)."""


class AdminSession:
    """confluent-kafka's AdminClient with these settings (UsageError if librdkafka refuses
    them: an unknown key, a bad value), whose waits end as soon as a login is refused.

    librdkafka keeps retrying a refused login until the request times out, then reports a
    transport failure; its error callback knows why, so waits poll it and raise LoginFailed
    with the broker's reason at once."""

    #: librdkafka's local _AUTHENTICATION and Kafka's SASL_AUTHENTICATION_FAILED.
    LOGIN_ERRORS = (-169, 58)

    def __init__(self, config: dict[str, str]) -> None:
        self._errors: list[Any] = []
        try:
            admin = importlib.import_module("confluent_kafka.admin")
            self.admin: Any = admin.AdminClient({**config, "error_cb": self._errors.append})
        except Exception as exc:  # librdkafka refuses unknown or bad settings
            raise UsageError(f"bad client settings: {exc}") from None

    def check_login(self) -> None:
        self.admin.poll(0)  # serves the error callbacks
        for error in self._errors:
            if error.code() in self.LOGIN_ERRORS:
                raise LoginFailed(describe_error(error))

    def result(self, future: Any, timeout: float) -> Any:
        """The future's result, waiting at most `timeout` s (TimeoutError)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return future.result(min(POLL_S, max(deadline - time.monotonic(), 0)))
            except concurrent.futures.TimeoutError:
                self.check_login()
                if time.monotonic() >= deadline:
                    raise TimeoutError from None

    def list_topics(self, timeout: float) -> Any:
        """Metadata of every topic; KafkaException if no broker answers within `timeout` s."""
        kafka_exception = importlib.import_module("confluent_kafka").KafkaException
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.admin.list_topics(timeout=min(POLL_S * 5, timeout))
            except kafka_exception:
                self.check_login()
                if time.monotonic() >= deadline:
                    raise


def protocol_security(props: dict[str, str]) -> tuple[SaslLogin | None, ssl.SSLContext | None]:
    """The SASL login and TLS context `oncelog.client` needs for the same listener."""
    protocol = props.get("security.protocol", "plaintext").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise UsageError(f"unknown security.protocol: {props['security.protocol']}")
    login = None
    if protocol.startswith("SASL_"):
        mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms", "GSSAPI"))
        if mechanism.upper() not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise UsageError(f"sasl.mechanism {mechanism} is not supported by this tool")
        login = SaslLogin(
            mechanism.upper(), props.get("sasl.username", ""), props.get("sasl.password", "")
        )
    context = None
    if protocol.endswith("SSL"):
        try:
            context = ssl.create_default_context(cafile=props.get("ssl.ca.location"))
            if props.get("ssl.endpoint.identification.algorithm", "https").lower() == "none":
                context.check_hostname = False
            if props.get("enable.ssl.certificate.verification", "true").lower() == "false":
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            certificate = props.get("ssl.certificate.location")
            if certificate:
                context.load_cert_chain(
                    certificate, props.get("ssl.key.location"), props.get("ssl.key.password")
                )
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"bad TLS settings: {exc}") from None
    return login, context
