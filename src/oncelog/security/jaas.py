"""Kafka's JAAS config strings (`sasl.jaas.config`), parsed without Java.

`<LoginModule class> <flag> key="value" key2=value2;` as Kafka's JaasConfig reads them; the
broker needs the options (PLAIN's `user_<name>`, the inter-broker `username` / `password`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from oncelog.errors import InvalidConfig

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
FLAGS = ("required", "requisite", "sufficient", "optional")

_TOKEN = re.compile(r'\s*(?:"((?:[^"\\]|\\.)*)"|([^\s=;"]+)|(=)|(;))')


@dataclass(frozen=True, slots=True)
class LoginModule:
    name: str
    flag: str
    options: dict[str, str] = field(default_factory=dict)


def _tokens(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if match is None or match.end() == pos:
            if text[pos:].strip() == "":
                break
            raise InvalidConfig(f"Invalid JAAS config: unexpected text at {text[pos:][:20]!r}")
        quoted, word, equals, semi = match.groups()
        if quoted is not None:
            tokens.append(("value", re.sub(r"\\(.)", r"\1", quoted)))
        elif word is not None:
            tokens.append(("word", word))
        elif equals is not None:
            tokens.append(("=", "="))
        elif semi is not None:
            tokens.append((";", ";"))
        pos = match.end()
    return tokens


def parse_jaas(text: str) -> list[LoginModule]:
    """Parse one or more `module flag options;` entries; InvalidConfig names what is wrong."""
    tokens = _tokens(text)
    modules: list[LoginModule] = []
    i = 0
    while i < len(tokens):
        if i + 1 >= len(tokens) or tokens[i][0] != "word" or tokens[i + 1][0] != "word":
            raise InvalidConfig("Invalid JAAS config: expected '<LoginModule> <flag>'")
        name, flag = tokens[i][1], tokens[i + 1][1].lower()
        if flag not in FLAGS:
            raise InvalidConfig(f"Invalid JAAS config: invalid control flag {tokens[i + 1][1]!r}")
        i += 2
        options: dict[str, str] = {}
        while i < len(tokens) and tokens[i][0] != ";":
            if (
                i + 2 >= len(tokens)
                or tokens[i][0] != "word"
                or tokens[i + 1][0] != "="
                or tokens[i + 2][0] not in ("word", "value")
            ):
                raise InvalidConfig("Invalid JAAS config: expected key=value options")
            options[tokens[i][1]] = tokens[i + 2][1]
            i += 3
        if i >= len(tokens):
            raise InvalidConfig("Invalid JAAS config: login module not terminated by ';'")
        i += 1
        modules.append(LoginModule(name, flag, options))
    if not modules:
        raise InvalidConfig("JAAS config entry must have at least one login module")
    return modules


def plain_users(modules: list[LoginModule]) -> dict[str, str]:
    """PLAIN's users: the `user_<name>="<password>"` options of the PlainLoginModule."""
    return {
        key[len("user_") :]: value
        for module in modules
        if module.name == PLAIN_MODULE
        for key, value in module.options.items()
        if key.startswith("user_")
    }


def client_login(modules: list[LoginModule]) -> tuple[str, str] | None:
    """The `username` / `password` the broker logs in to its peers with, if configured."""
    for module in modules:
        if "username" in module.options and "password" in module.options:
            return module.options["username"], module.options["password"]
    return None
