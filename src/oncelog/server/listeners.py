"""What each listener serves with: its name, security protocol, TLS context and SASL
mechanisms (Kafka's ChannelBuilders), built from the config once at start-up."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from dataclasses import dataclass, field

from oncelog.config import BrokerConfig, Listener
from oncelog.errors import InvalidConfig
from oncelog.protocol.registry import is_supported
from oncelog.security.credentials import ScramCredentials
from oncelog.security.jaas import parse_jaas, plain_users
from oncelog.security.plain import PlainServer
from oncelog.security.sasl import Mechanism, SaslAuthenticator
from oncelog.security.scram import MECHANISMS, ScramServer
from oncelog.server.startup import StartupError
from oncelog.server.tls import server_context


@dataclass(slots=True)
class ListenerSetup:
    listener: Listener
    protocol: str
    ssl_context: ssl.SSLContext | None = None
    mechanisms: list[str] = field(default_factory=list)
    plain_users: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.listener.name

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def setup_listeners(config: BrokerConfig) -> list[ListenerSetup]:
    """Every listener's setup; StartupError (one line) on a bad TLS or SASL setting."""
    try:
        return [_setup(config, listener) for listener in config.listeners]
    except InvalidConfig as exc:
        raise StartupError(str(exc)) from exc


def _setup(config: BrokerConfig, listener: Listener) -> ListenerSetup:
    protocol = config.security_protocol(listener.name)
    setup = ListenerSetup(listener, protocol)
    if protocol in ("SSL", "SASL_SSL"):
        setup.ssl_context = server_context(config, listener.name)
    if setup.sasl:
        mechanisms = config.listener_setting(listener.name, "sasl.enabled.mechanisms")
        assert isinstance(mechanisms, list)
        if not mechanisms:
            raise StartupError(f"listener {listener.name}: sasl.enabled.mechanisms is empty")
        setup.mechanisms = mechanisms
        if "PLAIN" in mechanisms:
            text = config.jaas_config(listener.name, "PLAIN")
            if text is None:
                raise StartupError(
                    f"listener {listener.name}: SASL/PLAIN needs a JAAS config with its users "
                    f"(listener.name.{listener.name.lower()}.plain.sasl.jaas.config or "
                    "sasl.jaas.config)"
                )
            try:
                setup.plain_users = plain_users(parse_jaas(text))
            except InvalidConfig as exc:
                raise StartupError(f"listener {listener.name}: {exc}") from exc
    return setup


def authenticator_factory(
    setup: ListenerSetup, credentials: ScramCredentials, reauth_ms: int, now_ms: Callable[[], int]
) -> Callable[[], SaslAuthenticator]:
    def new_server(mechanism: str) -> Mechanism:
        if mechanism == "PLAIN":
            return PlainServer(setup.plain_users)
        assert mechanism in MECHANISMS
        return ScramServer(mechanism, lambda user: credentials.get(user, mechanism))

    def new() -> SaslAuthenticator:
        return SaslAuthenticator(
            setup.mechanisms,
            new_server,
            supports_api_version=is_supported,
            reauth_ms=reauth_ms,
            now_ms=now_ms,
        )

    return new
