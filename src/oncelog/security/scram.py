"""SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka's ScramSaslServer and
ScramFormatter: salted credentials, the server's two steps and a client for the broker's own
connections to its peers.

The broker keeps only (salt, iterations, StoredKey, ServerKey): enough to check a client's
proof and to prove itself, never the password.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from oncelog.security.sasl_errors import SaslAuthenticationFailed, SaslFailed

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096

#: name -> (hashlib name, the type byte of Describe/AlterUserScramCredentials)
MECHANISMS: dict[str, tuple[str, int]] = {
    "SCRAM-SHA-256": ("sha256", 1),
    "SCRAM-SHA-512": ("sha512", 2),
}
MECHANISM_BY_TYPE = {type_: name for name, (_, type_) in MECHANISMS.items()}


@dataclass(frozen=True, slots=True)
class ScramCredential:
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, obj: Any) -> ScramCredential:
        """ValueError on anything but the shape `to_json` writes."""
        if not isinstance(obj, dict) or not isinstance(obj.get("iterations"), int):
            raise ValueError(f"not a SCRAM credential: {obj!r}")
        try:
            return cls(
                base64.b64decode(obj["salt"], validate=True),
                base64.b64decode(obj["stored_key"], validate=True),
                base64.b64decode(obj["server_key"], validate=True),
                obj["iterations"],
            )
        except (KeyError, TypeError, binascii.Error) as exc:
            raise ValueError(f"not a SCRAM credential: {exc}") from exc


def _hash(mechanism: str) -> str:
    return MECHANISMS[mechanism][0]


def _hmac(mechanism: str, key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, _hash(mechanism)).digest()


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi() of RFC 5802: PBKDF2 with HMAC of the mechanism's hash."""
    return hashlib.pbkdf2_hmac(_hash(mechanism), password.encode(), salt, iterations)


def credential_from_salted(
    mechanism: str, salted: bytes, salt: bytes, iterations: int
) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    stored_key = hashlib.new(_hash(mechanism), client_key).digest()
    server_key = _hmac(mechanism, salted, b"Server Key")
    return ScramCredential(salt, stored_key, server_key, iterations)


def make_credential(
    mechanism: str, password: str, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS
) -> ScramCredential:
    salt = salt if salt is not None else secrets.token_bytes(32)
    salted = salted_password(mechanism, password, salt, iterations)
    return credential_from_salted(mechanism, salted, salt, iterations)


def _decode_name(name: str) -> str:
    """saslname of RFC 5802: ',' and '=' travel as '=2C' and '=3D'."""
    if re.search(r"=(?!2C|3D)", name):
        raise SaslFailed("Invalid username")
    return name.replace("=2C", ",").replace("=3D", "=")


def _encode_name(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attributes(parts: list[str], what: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise SaslFailed(f"Invalid SCRAM {what}")
        out.setdefault(key, value)
    return out


def _new_nonce() -> str:
    return secrets.token_urlsafe(24)


class ScramServer:
    """Kafka's ScramSaslServer: client-first -> server-first, client-final -> server-final."""

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        nonce: Callable[[], str] = _new_nonce,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism}")
        self.mechanism = mechanism
        self._lookup = lookup
        self._nonce = nonce
        self._state = "first"
        self._credential: ScramCredential | None = None
        self._auth_prefix = b""
        self._full_nonce = ""
        self.complete = False
        self.username: str | None = None

    def evaluate(self, response: bytes) -> bytes:
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SaslFailed("SCRAM message is not UTF-8") from exc
        if self._state == "first":
            return self._client_first(text)
        if self._state == "final":
            return self._client_final(text)
        raise SaslFailed(f"Unexpected challenge in Sasl server state {self._state}")

    def _client_first(self, text: str) -> bytes:
        parts = text.split(",")
        if len(parts) < 4 or parts[0] not in ("n", "y") or not re.fullmatch(r"(a=.*)?", parts[1]):
            raise SaslFailed("Invalid SCRAM client first message")
        authzid = _decode_name(parts[1][2:]) if parts[1] else ""
        bare = ",".join(parts[2:])
        attrs = _attributes(parts[2:], "client first message")
        if not parts[2].startswith("n=") or not parts[3].startswith("r=") or not attrs["r"]:
            raise SaslFailed("Invalid SCRAM client first message")
        username = _decode_name(attrs["n"])
        if attrs.get("tokenauth", "false").lower() == "true":
            raise SaslFailed("Token Authentication failed: Invalid tokenId : " + username)
        credential = self._lookup(username)
        if credential is None:
            raise SaslFailed("Authentication failed: Invalid user credentials")
        if authzid and authzid != username:
            raise SaslAuthenticationFailed(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        if credential.iterations < MIN_ITERATIONS:
            raise SaslFailed(
                f"Iterations {credential.iterations} is less than the minimum "
                f"{MIN_ITERATIONS} for {self.mechanism}"
            )
        self._credential = credential
        self.username = username
        self._full_nonce = attrs["r"] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        server_first = f"r={self._full_nonce},s={salt},i={credential.iterations}"
        self._auth_prefix = f"{bare},{server_first},".encode()
        self._state = "final"
        return server_first.encode()

    def _client_final(self, text: str) -> bytes:
        assert self._credential is not None
        without_proof, sep, proof_b64 = text.rpartition(",p=")
        parts = without_proof.split(",")
        if not sep or len(parts) < 2:
            raise SaslFailed("Authentication failed: Invalid client final message")
        attrs = _attributes(parts, "client final message")
        if not parts[0].startswith("c=") or not parts[1].startswith("r="):
            raise SaslFailed("Authentication failed: Invalid client final message")
        if attrs["r"] != self._full_nonce:
            raise SaslFailed("Invalid client nonce in the final client message.")
        try:
            proof = base64.b64decode(proof_b64, validate=True)
        except binascii.Error as exc:
            raise SaslFailed("Authentication failed: Invalid client final message") from exc
        auth_message = self._auth_prefix + without_proof.encode()
        signature = _hmac(self.mechanism, self._credential.stored_key, auth_message)
        if len(proof) != len(signature):
            raise SaslFailed("Invalid client credentials")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        computed = hashlib.new(_hash(self.mechanism), client_key).digest()
        if not hmac.compare_digest(computed, self._credential.stored_key):
            raise SaslFailed("Invalid client credentials")
        server_signature = _hmac(self.mechanism, self._credential.server_key, auth_message)
        self._state = "complete"
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


class ScramClient:
    """The client side, for the broker's connections to its peers (and tests)."""

    def __init__(
        self, mechanism: str, username: str, password: str, nonce: Callable[[], str] = _new_nonce
    ) -> None:
        self.mechanism = mechanism
        self._password = password
        self._client_nonce = nonce()
        self._bare = f"n={_encode_name(username)},r={self._client_nonce}"
        self._server_signature = b""

    def first(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final(self, server_first: bytes) -> bytes:
        text = server_first.decode("utf-8", "replace")
        attrs = _attributes(text.split(","), "server first message")
        if "e" in attrs:
            raise SaslAuthenticationFailed(f"SCRAM error from the server: {attrs['e']}")
        nonce, salt_b64, iterations = attrs.get("r", ""), attrs.get("s", ""), attrs.get("i", "")
        if not nonce.startswith(self._client_nonce) or not iterations.isdigit():
            raise SaslFailed("Invalid SCRAM server first message")
        salt = base64.b64decode(salt_b64)
        salted = salted_password(self.mechanism, self._password, salt, int(iterations))
        without_proof = f"c=biws,r={nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        stored_key = hashlib.new(_hash(self.mechanism), client_key).digest()
        signature = _hmac(self.mechanism, stored_key, auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = _hmac(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        attrs = _attributes(text.split(","), "server final message")
        if "e" in attrs:
            raise SaslAuthenticationFailed(f"SCRAM error from the server: {attrs['e']}")
        if not hmac.compare_digest(
            base64.b64decode(attrs.get("v", "")), self._server_signature
        ):
            raise SaslFailed("Invalid server signature in the final server message")


class AddScramError(ValueError):
    """A malformed `--add-scram` argument (Kafka's FormatterException)."""


def split_scram_argument(argument: str) -> tuple[str, dict[str, str]]:
    """`MECHANISM=[key=value,...]` as Kafka's ScramParser splits it: the mechanism and the
    keys (quotes around a value dropped)."""
    text = argument.strip()
    mechanism, sep, config = text.partition("=")
    if not sep:
        raise AddScramError(f"Failed to find equals sign in SCRAM argument '{text}'")
    if mechanism not in MECHANISMS:
        raise AddScramError(f"The add-scram mechanism {mechanism} is not supported.")
    if not config.startswith("["):
        raise AddScramError("Expected configuration string to start with [")
    if not config.endswith("]"):
        raise AddScramError("Expected configuration string to end with ]")
    return mechanism, _components(config[1:-1])


def parse_add_scram(argument: str) -> tuple[str, str, ScramCredential]:
    """`SCRAM-SHA-256=[name=alice,password=secret,iterations=8192,salt=BASE64]` as Kafka's
    ScramParser reads it (also `saltedpassword=` with `salt=`); returns (mechanism, user,
    salted credential)."""
    mechanism, components = split_scram_argument(argument)
    name = components.pop("name", None)
    if name is None:
        raise AddScramError("You must supply 'name' to add-scram")
    salt_text = components.pop("salt", None)
    salt = None if salt_text is None else _b64(salt_text, "salt")
    iterations = DEFAULT_ITERATIONS
    if "iterations" in components:
        iterations_text = components.pop("iterations")
        if not re.fullmatch(r"-?[0-9]+", iterations_text):
            raise AddScramError(f"Failed to parse iterations count: {iterations_text}")
        iterations = int(iterations_text)
    password = components.pop("password", None)
    salted_text = components.pop("saltedpassword", None)
    if components:
        raise AddScramError("Unknown SCRAM configurations: " + ", ".join(sorted(components)))
    if iterations < MIN_ITERATIONS:
        raise AddScramError(
            f"The 'iterations' value must be >= {MIN_ITERATIONS} for add-scram using {mechanism}"
        )
    if iterations > MAX_ITERATIONS:
        raise AddScramError(
            f"The 'iterations' value must be <= {MAX_ITERATIONS} for add-scram using {mechanism}"
        )
    if password is None:
        if salted_text is None:
            raise AddScramError(
                "You must supply one of 'password' or 'saltedpassword' to add-scram"
            )
        if salt is None:
            raise AddScramError("You must supply 'salt' with 'saltedpassword' to add-scram")
        salted = _b64(salted_text, "saltedPassword")
        return mechanism, name, credential_from_salted(mechanism, salted, salt, iterations)
    return mechanism, name, make_credential(mechanism, password, salt, iterations)


def _components(text: str) -> dict[str, str]:
    components: dict[str, str] = {}
    for component in text.split(","):
        key, sep, value = component.partition("=")
        if not sep:
            raise AddScramError(
                f"Unable to find an equal sign in configuration {component.strip()}"
            )
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        components[key.strip()] = value
    return components


def _b64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise AddScramError(f"Failed to decode given {what}: {text}") from exc
