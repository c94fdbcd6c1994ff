"""The HTTP listener's users are the broker's: HTTP basic auth, checked by logging in to the
broker over SASL with the same name and password, and every API request then reads the
cluster as that user, so the broker's own checks (SCRAM or PLAIN credentials, ACLs) apply.

Aborting a transaction needs the Alter operation on the cluster (asked of the broker with
DescribeCluster's authorized operations); the broker itself then checks WriteTxnMarkers
(ClusterAction, as Kafka), so an operator needs both, which ALL on the cluster gives.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ssl
import time
from dataclasses import dataclass, field

from aiohttp import web

from oncelog.client.admin import Admin
from oncelog.client.connection import Connection, SaslLogin, SaslLoginFailed, parse_bootstrap
from oncelog.client.overview import OPERATIONS_NOT_REQUESTED, cluster_operations

#: Kafka's AclOperation code of Alter: its bit in the authorized-operations field.
ALTER = 7
#: How long a checked login is trusted before the broker is asked again.
LOGIN_CACHE_S = 30.0


@dataclass(frozen=True, slots=True)
class User:
    name: str
    password: str = field(repr=False)


def parse_basic(header: str) -> tuple[str, str] | None:
    """(user, password) of an `Authorization: Basic ...` header; None if it is not one."""
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value.strip():
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    name, sep, password = decoded.partition(":")
    if not sep or not name:
        return None
    return name, password


class BrokerLogins:
    """`ConsoleSettings.authenticate`, `admin_for` and `may_abort` for a broker with a SASL
    listener at `bootstrap` offering `mechanisms` (tried in order at the first login)."""

    def __init__(
        self,
        bootstrap: str,
        mechanisms: list[str],
        timeout: float = 10.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: the listener is SASL_SSL."""
        self.bootstrap = bootstrap
        self.mechanisms = mechanisms
        self.timeout = timeout
        self.tls = tls
        self._checked: dict[tuple[str, bytes], tuple[str, float]] = {}

    def _key(self, name: str, password: str) -> tuple[str, bytes]:
        return name, hashlib.sha256(password.encode()).digest()

    def login(self, name: str, password: str) -> str | None:
        """The mechanism the broker accepts this login with, or None (blocking)."""
        host, port = parse_bootstrap(self.bootstrap)
        for mechanism in self.mechanisms:
            try:
                login = SaslLogin(mechanism, name, password)
                Connection(host, port, self.timeout, login, self.tls).close()
            except SaslLoginFailed:
                continue
            return mechanism
        return None

    async def authenticate(self, request: web.Request) -> User | None:
        parsed = parse_basic(request.headers.get("Authorization", ""))
        if parsed is None:
            return None
        name, password = parsed
        key = self._key(name, password)
        checked = self._checked.get(key)
        if checked is None or checked[1] < time.monotonic():
            mechanism = await asyncio.to_thread(self.login, name, password)
            if mechanism is None:
                return None
            self._checked[key] = (mechanism, time.monotonic() + LOGIN_CACHE_S)
        return User(name, password)

    def _sasl(self, user: User) -> SaslLogin:
        checked = self._checked.get(self._key(user.name, user.password))
        mechanism = checked[0] if checked is not None else self.mechanisms[0]
        return SaslLogin(mechanism, user.name, user.password)

    def admin_for(self, user: object) -> Admin:
        assert isinstance(user, User)
        return Admin(self.bootstrap, timeout=self.timeout, sasl=self._sasl(user), tls=self.tls)

    def may_abort(self, user: object) -> bool:
        """Alter on the cluster, as the broker's authorizer answers for this user."""
        if not isinstance(user, User):
            return False
        with self.admin_for(user) as admin:
            operations = cluster_operations(admin)
        return operations != OPERATIONS_NOT_REQUESTED and bool(operations & (1 << ALTER))
