"""SASL/PLAIN (RFC 4616) as Kafka's PlainSaslServer: one message,
`authzid NUL user NUL password`, checked against the JAAS config's users."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from oncelog.security.sasl_errors import SaslAuthenticationFailed, SaslFailed

MECHANISM = "PLAIN"


class PlainServer:
    """Checks one client message against the JAAS `user_<name>` passwords."""

    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self.complete = False
        self.username: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        if self.complete:
            raise SaslFailed("PLAIN exchange already complete")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SaslAuthenticationFailed("Invalid SASL/PLAIN response: not UTF-8") from exc
        tokens = text.split("\0")
        if len(tokens) != 3:
            raise SaslAuthenticationFailed(
                f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(tokens)}"
            )
        authzid, username, password = tokens
        if not username:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(username)
        # compare_digest on both branches: a missing user costs what a wrong password does
        ok = hmac.compare_digest(
            password.encode(), (expected if expected is not None else "\0" + password).encode()
        )
        if expected is None or not ok:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.username = username
        self.complete = True
        return b""


def client_message(username: str, password: str) -> bytes:
    return f"\0{username}\0{password}".encode()
