"""PLAIN, SCRAM and JAAS parsing against the RFC examples and Kafka's wording."""

from __future__ import annotations

import base64

import pytest

from oncelog.errors import InvalidConfig
from oncelog.security.jaas import client_login, parse_jaas, plain_users
from oncelog.security.plain import PlainServer, client_message
from oncelog.security.sasl_errors import SaslAuthenticationFailed, SaslFailed
from oncelog.security.scram import (
    AddScramError,
    ScramClient,
    ScramCredential,
    ScramServer,
    make_credential,
    parse_add_scram,
)

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
    'password="admin-secret" user_admin="admin-secret" user_alice="a;l\\"ice";'
)


def test_jaas_options_and_plain_users() -> None:
    (module,) = parse_jaas(JAAS)
    assert module.name.endswith("PlainLoginModule") and module.flag == "required"
    assert plain_users([module]) == {"admin": "admin-secret", "alice": 'a;l"ice'}
    assert client_login([module]) == ("admin", "admin-secret")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "org.Foo required",  # no ';'
        "org.Foo mandatory;",  # bad flag
        'org.Foo required user="x" broken;',
    ],
)
def test_bad_jaas_is_refused(text: str) -> None:
    with pytest.raises(InvalidConfig):
        parse_jaas(text)


def test_plain_accepts_the_right_password_only() -> None:
    server = PlainServer({"alice": "pw"})
    assert server.evaluate(client_message("alice", "pw")) == b""
    assert server.complete and server.username == "alice"
    for message, why in [
        (client_message("alice", "nope"), "Invalid username or password"),
        (client_message("bob", "pw"), "Invalid username or password"),
        (b"\0alice", "expected 3 tokens, got 2"),
        (b"\0\0pw", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"bob\0alice\0pw", "authorization id that is different"),
    ]:
        with pytest.raises(SaslAuthenticationFailed, match=why):
            PlainServer({"alice": "pw"}).evaluate(message)


# RFC 7677 section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return make_credential("SCRAM-SHA-256", "pencil", RFC_SALT, 4096)


def test_scram_server_reproduces_rfc7677() -> None:
    server = ScramServer(
        "SCRAM-SHA-256", {"user": rfc_credential()}.get, nonce=lambda: RFC_SERVER_NONCE
    )
    assert server.evaluate(b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode()) == RFC_SERVER_FIRST
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_scram_client_reproduces_rfc7677() -> None:
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=lambda: RFC_CLIENT_NONCE)
    assert client.first() == b"n,,n=user,r=" + RFC_CLIENT_NONCE.encode()
    assert client.final(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)
    with pytest.raises(SaslFailed):
        client.verify(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_round_trip_and_wrong_password(mechanism: str) -> None:
    creds = {"alice": make_credential(mechanism, "secret", iterations=4096)}
    server = ScramServer(mechanism, creds.get)
    client = ScramClient(mechanism, "alice", "secret")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.complete
    server = ScramServer(mechanism, creds.get)
    bad = ScramClient(mechanism, "alice", "wrong")
    first = server.evaluate(bad.first())
    with pytest.raises(SaslFailed, match="Invalid client credentials"):
        server.evaluate(bad.final(first))
    assert not server.complete


def test_scram_unknown_user_tampered_nonce_and_garbage() -> None:
    creds = {"alice": make_credential("SCRAM-SHA-256", "secret")}
    with pytest.raises(SaslFailed, match="Invalid user credentials"):
        ScramServer("SCRAM-SHA-256", creds.get).evaluate(b"n,,n=bob,r=abc")
    server = ScramServer("SCRAM-SHA-256", creds.get)
    client = ScramClient("SCRAM-SHA-256", "alice", "secret")
    final = client.final(server.evaluate(client.first()))
    with pytest.raises(SaslFailed, match="nonce"):
        server.evaluate(final.replace(b"r=", b"r=x", 1))
    for garbage in [b"", b"\xff\xfe", b"hello", b"n,,r=abc", b"x,,n=a,r=b"]:
        with pytest.raises(SaslFailed):
            ScramServer("SCRAM-SHA-256", creds.get).evaluate(garbage)


def test_scram_names_are_escaped() -> None:
    creds = {"a,b=c": make_credential("SCRAM-SHA-512", "pw")}
    server = ScramServer("SCRAM-SHA-512", creds.get)
    client = ScramClient("SCRAM-SHA-512", "a,b=c", "pw")
    assert b"n=a=2Cb=3Dc" in client.first()
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.username == "a,b=c"


def test_add_scram_arguments() -> None:
    salt = base64.b64encode(b"0123456789").decode()
    mechanism, name, cred = parse_add_scram(
        f"SCRAM-SHA-256=[name=alice,password=pw,iterations=8192,salt={salt}]"
    )
    assert (mechanism, name, cred.iterations, cred.salt) == (
        "SCRAM-SHA-256",
        "alice",
        8192,
        b"0123456789",
    )
    assert cred == make_credential("SCRAM-SHA-256", "pw", b"0123456789", 8192)
    _, _, default = parse_add_scram('SCRAM-SHA-512=[name="bob",password="pw"]')
    assert default.iterations == 4096 and len(default.salt) >= 16
    for bad, why in [
        ("SCRAM-SHA-1=[name=a,password=b]", "not supported"),
        ("SCRAM-SHA-256", "equals sign"),
        ("SCRAM-SHA-256=name=a,password=b", "start with"),
        ("SCRAM-SHA-256=[password=b]", "'name'"),
        ("SCRAM-SHA-256=[name=a]", "'password' or 'saltedpassword'"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=100]", ">= 4096"),
        ("SCRAM-SHA-256=[name=a,password=b,iterations=20000]", "<= 16384"),
        ("SCRAM-SHA-256=[name=a,password=b,colour=red]", "Unknown SCRAM configurations"),
        ("SCRAM-SHA-256=[name=a,password=b,salt=***]", "decode given salt"),
    ]:
        with pytest.raises(AddScramError, match=why):
            parse_add_scram(bad)


def test_credential_json_round_trip() -> None:
    password = "correct horse battery staple"  # spaces: never inside base64 by chance
    cred = make_credential("SCRAM-SHA-512", password)
    assert ScramCredential.from_json(cred.to_json()) == cred
    assert password not in str(cred.to_json())
    with pytest.raises(ValueError):
        ScramCredential.from_json({"salt": "x"})
