"""TLS contexts from Kafka's `ssl.*` keys (PEM only), for listeners and the broker's own
connections to its peers, and the SSL principal of a client certificate.

A bad setting is a StartupError naming the key, found before the broker serves.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from oncelog.config import BrokerConfig, ConfigValue
from oncelog.server.startup import StartupError

_PEM_CERTIFICATE = re.compile(
    r"-----BEGIN CERTIFICATE-----[A-Za-z0-9+/=\s]+?-----END CERTIFICATE-----"
)

#: RFC 2253 short names of the attributes Java's X500Principal prints by name.
_DN_NAMES = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}


def _setting(config: BrokerConfig, listener: str) -> Callable[[str], str | None]:
    def get(key: str) -> str | None:
        value: ConfigValue | None = config.listener_setting(listener, key)
        return None if value is None or value == "" else str(value)

    return get


def _load_keystore(context: ssl.SSLContext, get: Callable[[str], str | None], where: str) -> bool:
    """Load the key and chain if configured; False when none is."""
    location = get("ssl.keystore.location")
    key, chain = get("ssl.keystore.key"), get("ssl.keystore.certificate.chain")
    password = get("ssl.key.password")
    if location is None and key is None and chain is None:
        return False
    try:
        if location is not None:
            context.load_cert_chain(location, password=password)
            return True
        if key is None or chain is None:
            raise StartupError(
                f"{where}: ssl.keystore.key and ssl.keystore.certificate.chain go together"
            )
        # the ssl module loads keys from files only: a private file, removed at once
        fd, path = tempfile.mkstemp(prefix="oncelog-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(key.strip() + "\n" + chain.strip() + "\n")
            context.load_cert_chain(path, password=password)
        finally:
            os.unlink(path)
    except (ssl.SSLError, OSError) as exc:
        what = location if location is not None else "ssl.keystore.key"
        raise StartupError(
            f"{where}: cannot load the keystore {what}: {exc.strerror or exc}"
        ) from exc
    return True


def _load_truststore(
    context: ssl.SSLContext, get: Callable[[str], str | None], where: str
) -> bool:
    location, certificates = get("ssl.truststore.location"), get("ssl.truststore.certificates")
    try:
        if location is not None:
            context.load_verify_locations(cafile=location)
        elif certificates is not None:
            context.load_verify_locations(cadata=certificates)
        else:
            return False
    except (ssl.SSLError, OSError, ValueError) as exc:
        what = location if location is not None else "ssl.truststore.certificates"
        raise StartupError(
            f"{where}: cannot load the truststore {what}: {getattr(exc, 'strerror', None) or exc}"
        ) from exc
    return True


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    where = f"listener {listener}"
    get = _setting(config, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not _load_keystore(context, get, where):
        raise StartupError(
            f"{where}: TLS needs ssl.keystore.location or ssl.keystore.key with "
            f"ssl.keystore.certificate.chain"
        )
    has_trust = _load_truststore(context, get, where)
    client_auth = get("ssl.client.auth") or "none"
    if client_auth != "none":
        if not has_trust:
            raise StartupError(
                f"{where}: ssl.client.auth={client_auth} needs ssl.truststore.location or "
                "ssl.truststore.certificates"
            )
        context.verify_mode = ssl.CERT_REQUIRED if client_auth == "required" else ssl.CERT_OPTIONAL
    return context


def client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """For connections to a peer's `listener`: its truststore, our key if client auth is on."""
    where = f"inter-broker listener {listener}"
    get = _setting(config, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = (get("ssl.endpoint.identification.algorithm") or "") != ""
    if not _load_truststore(context, get, where):
        context.load_default_certs()
    _load_keystore(context, get, where)
    return context


def own_listener_client_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """For the broker's own console connecting to its `listener` on loopback: it trusts that
    listener's own certificate (pinned, so no CA is needed; the listener's truststore is
    trusted too) and presents it when the listener asks for client certificates."""
    where = f"listener {listener}"
    get = _setting(config, listener)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # our own listener, whatever name its certificate has
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
    location = get("ssl.keystore.location")
    try:
        pem = Path(location).read_text() if location is not None else ""
    except OSError as exc:
        raise StartupError(f"{where}: cannot read the keystore {location}: {exc}") from exc
    chain = _PEM_CERTIFICATE.findall(pem or get("ssl.keystore.certificate.chain") or "")
    if not chain:
        raise StartupError(f"{where}: the keystore holds no certificate")
    context.load_verify_locations(cadata="\n".join(chain))
    _load_truststore(context, get, where)
    _load_keystore(context, get, where)
    return context


def ssl_principal(peercert: Any) -> str | None:
    """`User:<subject DN>` in RFC 2253 order (Kafka's DEFAULT ssl.principal.mapping.rules),
    or None without a verified client certificate."""
    if not peercert or "subject" not in peercert:
        return None
    rdns = []
    for rdn in reversed(peercert["subject"]):
        rdns.append("+".join(f"{_DN_NAMES.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(rdns)


def _escape(value: str) -> str:
    out = "".join("\\" + c if c in ',+"\\<>;' else c for c in value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" "):
        out = out[:-1] + "\\ "
    return out
