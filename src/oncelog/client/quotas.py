"""Client quota requests (KIP-546): DescribeClientQuotas (48) and AlterClientQuotas (49), and
DescribeUserScramCredentials (50), which `kafka-configs --describe --entity-type users` shows
beside a user's quotas. `oncelog configs --entity-type users|clients` sends them through here.

An entity is a tuple of (entity type, name) pairs, the type Kafka's `user` or `client-id` and
a name of None for the default entity (Kafka's `<default>`).
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.client.admin import Admin
from oncelog.client.connection import ClientError
from oncelog.errors import error_name

DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, DESCRIBE_USER_SCRAM_CREDENTIALS = 48, 49, 50
USER, CLIENT_ID = "user", "client-id"
#: DescribeClientQuotas' match types: the name given, the default entity, any named entity.
MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
#: Kafka's RESOURCE_NOT_FOUND: a user without SCRAM credentials.
RESOURCE_NOT_FOUND = 91
#: SCRAM mechanisms by their DescribeUserScramCredentials id.
SCRAM_MECHANISMS = {1: "SCRAM-SHA-256", 2: "SCRAM-SHA-512"}

#: (entity type, name or None for the default), one pair per type.
QuotaEntity = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class ScramUser:
    """One user of a DescribeUserScramCredentials answer: its (mechanism, iterations), or
    its error (code and message) when it could not be described."""

    user: str
    credentials: tuple[tuple[str, int], ...]
    error_code: int = 0
    error_message: str | None = None


def _any_node(admin: Admin) -> int:
    ids = admin.node_ids()
    if not ids:
        raise ClientError("the cluster named no broker")
    return ids[0]


def describe_client_quotas(
    admin: Admin, components: list[tuple[str, int, str | None]], *, strict: bool = True
) -> list[tuple[QuotaEntity, dict[str, float]]]:
    """The entities a filter of (entity type, match type, match) matches and their quotas;
    `strict`: only entities of exactly the filter's types (Kafka's `containsOnly`)."""
    body = {
        "components": [
            {"entity_type": t, "match_type": m, "match": name} for t, m, name in components
        ],
        "strict": strict,
    }
    response = admin.node(_any_node(admin)).call(DESCRIBE_CLIENT_QUOTAS, (0, 1), body)
    code = int(response.error_code)
    if code != 0:
        raise ClientError(
            f"{error_name(code)}: {response.error_message}"
            if response.error_message
            else error_name(code)
        )
    return [
        (
            tuple((e.entity_type, e.entity_name) for e in entry.entity),
            {v.key: float(v.value) for v in entry.values},
        )
        for entry in response.entries or ()
    ]


def alter_client_quotas(
    admin: Admin,
    entity: QuotaEntity,
    ops: list[tuple[str, float | None]],
    *,
    validate_only: bool = False,
) -> None:
    """Set (a value) or remove (None) quotas of one entity; ClientError with the broker's
    message if it refuses."""
    body = {
        "entries": [
            {
                "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                "ops": [
                    {"key": k, "value": 0.0 if v is None else v, "remove": v is None}
                    for k, v in ops
                ],
            }
        ],
        "validate_only": validate_only,
    }
    response = admin.node(_any_node(admin)).call(ALTER_CLIENT_QUOTAS, (0, 1), body)
    for entry in response.entries:
        code = int(entry.error_code)
        if code != 0:
            raise ClientError(
                f"{error_name(code)}: {entry.error_message}"
                if entry.error_message
                else error_name(code)
            )


def describe_scram_users(admin: Admin, users: list[str]) -> list[ScramUser]:
    """Every user with SCRAM credentials (`users` empty) or those of `users` that have some,
    as Kafka's DescribeUserScramCredentialsResult.users() lists them."""
    body = {"users": [{"name": u} for u in users]}
    response = admin.node(_any_node(admin)).call(DESCRIBE_USER_SCRAM_CREDENTIALS, (0, 0), body)
    code = int(response.error_code)
    if code != 0:
        raise ClientError(
            f"{error_name(code)}: {response.error_message}"
            if response.error_message
            else error_name(code)
        )
    return [
        ScramUser(
            r.user,
            tuple(
                (
                    SCRAM_MECHANISMS.get(int(c.mechanism), f"UNKNOWN({int(c.mechanism)})"),
                    c.iterations,
                )
                for c in r.credential_infos
            ),
            int(r.error_code),
            r.error_message,
        )
        for r in response.results
        if int(r.error_code) != RESOURCE_NOT_FOUND
    ]
