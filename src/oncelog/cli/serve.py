"""`oncelog serve`: run a broker (server.properties, then flags)."""

from __future__ import annotations

import argparse
import socket
import ssl
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from oncelog.config import BrokerConfig
from oncelog.errors import InvalidConfig

if TYPE_CHECKING:
    from oncelog.config import Listener
    from oncelog.console.app import ConsoleServer, ConsoleSettings
    from oncelog.console.listener import HttpListener
    from oncelog.server.app import BrokerServer

EXIT_CONFIG_ERROR = 2

DESCRIPTION = """\
Run one Kafka-compatible broker until SIGTERM or Ctrl-C (SIGINT), which stop it cleanly:
connections closed, logs flushed, the clean-shutdown marker written.

When it is ready it prints one line on stdout, with the bound port (useful with port 0):
  oncelog broker NODE_ID ready on HOST:PORT (log.dirs=DIRS)
With http.listeners set (e.g. --override http.listeners=http://127.0.0.1:9644) the line
ends with the HTTP listener's URL (/metrics and the web console):
  oncelog broker NODE_ID ready on HOST:PORT (log.dirs=DIRS), console http://HOST:PORT/
With several Kafka listeners (listeners=PLAINTEXT://...,SASL_SSL://...) HOST:PORT is the
first one's and the line names every listener's bound port before the console's:
  ..., listeners=PLAINTEXT://HOST:PORT,SASL_SSL://HOST:PORT

Configuration uses Kafka's broker keys, names and defaults: the properties file is read
first, then --override and the shortcuts win over it. The keys are listed in
docs/configuration.md; each key's default and Kafka bound is in oncelog/config.py.
Values outside Kafka's bounds exit with status 2; unknown keys are logged as warnings.
A log directory is locked (<dir>/.lock) while a broker uses it; a second broker on it, a
taken port (Kafka or HTTP) or an unusable directory exit with status 1 and one line on stderr."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve",
        help="run a broker",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "properties",
        nargs="?",
        type=Path,
        help="a Kafka server.properties file (key=value lines), read before the flags",
    )
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help="shortcut for listeners=PLAINTEXT://HOST:PORT (default 127.0.0.1:9092; "
        "port 0 picks a free port, printed in the ready line)",
    )
    p.add_argument(
        "--data-dir",
        metavar="DIR",
        help="shortcut for log.dirs=DIR (default ./oncelog-data; created with its parents)",
    )
    p.add_argument("--node-id", type=int, help="shortcut for node.id (default 1)")
    p.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set any broker config, e.g. --override log.segment.bytes=1048576 (repeatable)",
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
    from oncelog.console.listener import HttpListenerError
    from oncelog.console.listener import parse as parse_http
    from oncelog.server.app import run as run_broker
    from oncelog.server.etcd import parse_etcd_connect

    try:
        config = config_from_args(args)
        http_listeners = config.get("http.listeners")
        assert isinstance(http_listeners, list)
        http = parse_http(http_listeners)
        etcd_connect = config.get("etcd.connect")
        if etcd_connect:  # a bad value is a configuration error (2), not a failed start-up
            parse_etcd_connect(str(etcd_connect))
    except (InvalidConfig, HttpListenerError, ValueError, OSError) as exc:
        print(f"oncelog: configuration error: {exc}", file=sys.stderr, flush=True)
        return EXIT_CONFIG_ERROR
    config.warn_unknown()
    return run_broker(config, [HttpCompanion(http, config)] if http is not None else [])


class HttpCompanion:
    """The HTTP listener beside the broker (server.app.Companion): /metrics renders the
    broker's registry; the console reads the broker through its own Kafka listener."""

    def __init__(self, listener: HttpListener, config: BrokerConfig) -> None:
        self.listener = listener
        self.config = config
        self._sock: socket.socket | None = None
        self._ssl: ssl.SSLContext | None = None
        self._server: ConsoleServer | None = None

    def bind(self) -> None:
        from oncelog.server.app import bind_address

        if self.listener.tls:
            from oncelog.server.tls import server_context

            # listener.name.https.ssl.* or the broker's ssl.*; a bad setting stops the start
            self._ssl = server_context(self.config, "HTTPS")
        where = self.listener.url(self.listener.port).rstrip("/")
        self._sock = bind_address(self.listener.host, self.listener.port, where)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()

    async def start(self, server: BrokerServer) -> str:
        from oncelog.console.app import ConsoleServer

        assert self._sock is not None and server.dispatcher is not None
        metrics = server.dispatcher.broker.metrics
        settings = console_settings(server, getattr(metrics, "registry", None))
        self._server = ConsoleServer(settings, self._sock, self._ssl)
        port = await self._server.start()
        return f"console {self.listener.url(port)}"

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.stop()


def console_settings(server: BrokerServer, registry: Any) -> ConsoleSettings:
    """Where the console reads the cluster, and whether it asks for logins: through a
    SASL listener when there is one, plaintext first (the HTTP listener then takes the broker's
    users with basic auth, and each request reads as its user), else a PLAINTEXT or SSL one
    (no login)."""
    from oncelog.console.app import ConsoleSettings
    from oncelog.console.auth import BrokerLogins
    from oncelog.server.startup import StartupError

    config = server.config
    by_protocol: dict[str, list[Listener]] = {}
    for listener in config.listeners:
        by_protocol.setdefault(config.security_protocol(listener.name), []).append(listener)
    chosen = next(
        (
            listeners[0]
            for protocol in ("SASL_PLAINTEXT", "SASL_SSL", "PLAINTEXT", "SSL")
            if (listeners := by_protocol.get(protocol))
        ),
        None,
    )
    if chosen is None:
        raise StartupError("the HTTP listener found no Kafka listener to read the cluster through")
    protocol = config.security_protocol(chosen.name)
    host = "127.0.0.1" if chosen.host in ("", "0.0.0.0", "::") else chosen.host
    bootstrap = f"{host}:{server.ports.get(chosen.name, server.port)}"
    tls = None
    if protocol.endswith("SSL"):
        from oncelog.server.tls import own_listener_client_context

        tls = own_listener_client_context(config, chosen.name)
    if not protocol.startswith("SASL"):
        return ConsoleSettings(bootstrap=bootstrap, registry=registry, tls=tls)
    mechanisms = config.listener_setting(chosen.name, "sasl.enabled.mechanisms")
    assert isinstance(mechanisms, list)
    logins = BrokerLogins(bootstrap, [str(m) for m in mechanisms], tls=tls)
    return ConsoleSettings(
        bootstrap=bootstrap,
        registry=registry,
        authenticate=logins.authenticate,
        may_abort=logins.may_abort,
        admin_for=logins.admin_for,
        tls=tls,
    )
