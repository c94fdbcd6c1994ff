"""The broker's SCRAM credentials (user -> mechanism -> salted credential) and the rules of
Alter/DescribeUserScramCredentials as Kafka's ScramControlManager applies them.

Where they live is the caller's business: the metadata image on a single node, etcd keys on a
cluster; both hand every change to `ScramCredentials`, which the SASL mechanisms read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.errors import ErrorCode
from oncelog.security.scram import (
    MAX_ITERATIONS,
    MECHANISM_BY_TYPE,
    MECHANISMS,
    MIN_ITERATIONS,
    ScramCredential,
    credential_from_salted,
)


class ScramCredentials:
    """In memory; `to_json` / `from_json` are the persisted form (image and etcd)."""

    def __init__(self) -> None:
        self._by_user: dict[str, dict[str, ScramCredential]] = {}

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def put(self, user: str, mechanism: str, credential: ScramCredential) -> None:
        self._by_user.setdefault(user, {})[mechanism] = credential

    def remove(self, user: str, mechanism: str) -> bool:
        mechanisms = self._by_user.get(user)
        if mechanisms is None or mechanisms.pop(mechanism, None) is None:
            return False
        if not mechanisms:
            del self._by_user[user]
        return True

    def users(self) -> list[str]:
        return sorted(self._by_user)

    def of(self, user: str) -> Mapping[str, ScramCredential]:
        return self._by_user.get(user, {})

    def to_json(self) -> list[dict[str, Any]]:
        return [
            {"name": user, "mechanism": mechanism, **credential.to_json()}
            for user, mechanisms in sorted(self._by_user.items())
            for mechanism, credential in sorted(mechanisms.items())
        ]

    @classmethod
    def from_json(cls, items: Iterable[Any]) -> ScramCredentials:
        """ValueError on an entry that is not a credential."""
        out = cls()
        for item in items:
            if not isinstance(item, dict) or item.get("mechanism") not in MECHANISMS:
                raise ValueError(f"not a SCRAM credential entry: {item!r}")
            if not isinstance(item.get("name"), str):
                raise ValueError(f"not a SCRAM credential entry: {item!r}")
            out.put(item["name"], item["mechanism"], ScramCredential.from_json(item))
        return out


@dataclass(frozen=True, slots=True)
class Change:
    """One accepted alteration: a credential to store, or (credential None) to delete."""

    user: str
    mechanism: str
    credential: ScramCredential | None


def describe(credentials: ScramCredentials, users: list[str] | None) -> list[dict[str, Any]]:
    """DescribeUserScramCredentials' results: every user (users null or empty, as Kafka
    reads it), or those asked for."""
    if not users:
        names = credentials.users()
        duplicates: set[str] = set()
    else:
        names = list(dict.fromkeys(users))
        duplicates = {name for name in names if users.count(name) > 1}
    results = []
    for name in names:
        infos = [
            {"mechanism": MECHANISMS[mechanism][1], "iterations": credential.iterations}
            for mechanism, credential in sorted(credentials.of(name).items())
        ]
        if name in duplicates:
            code = ErrorCode.duplicate_resource
            message: str | None = (
                "Cannot describe SCRAM credentials for the same user twice in a single "
                f"request: {name}"
            )
            infos = []
        elif not infos:
            code = ErrorCode.resource_not_found
            message = f"Attempt to describe a user credential that does not exist: {name}"
        else:
            code, message = ErrorCode.none, None
        results.append(
            {"user": name, "error_code": code, "error_message": message, "credential_infos": infos}
        )
    return results


def plan_alter(
    credentials: ScramCredentials, deletions: Iterable[Any], upsertions: Iterable[Any]
) -> tuple[list[dict[str, Any]], list[Change]]:
    """The results of AlterUserScramCredentials and the changes to apply (all or none per
    user), as ScramControlManager.alterCredentials decides them."""
    errors: dict[str, tuple[ErrorCode, str]] = {}
    to_delete: dict[str, Any] = {}
    to_upsert: dict[str, Any] = {}
    duplicate = (
        ErrorCode.duplicate_resource,
        "A user credential cannot be altered twice in the same request",
    )
    for deletion in deletions:
        name = deletion.name
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None:
            errors[name] = duplicate
            continue
        error = _check_name_and_mechanism(name, deletion.mechanism)
        if error is None and credentials.get(name, MECHANISM_BY_TYPE[deletion.mechanism]) is None:
            error = (
                ErrorCode.resource_not_found,
                "Attempt to delete a user credential that does not exist",
            )
        if error is not None:
            errors[name] = error
        else:
            to_delete[name] = deletion
    for upsertion in upsertions:
        name = upsertion.name
        if name in errors:
            continue
        if to_delete.pop(name, None) is not None or to_upsert.pop(name, None) is not None:
            errors[name] = duplicate
            continue
        error = _check_upsertion(upsertion)
        if error is not None:
            errors[name] = error
        else:
            to_upsert[name] = upsertion
    results: list[dict[str, Any]] = []
    changes: list[Change] = []
    for name, deletion in to_delete.items():
        changes.append(Change(name, MECHANISM_BY_TYPE[deletion.mechanism], None))
        results.append({"user": name, "error_code": ErrorCode.none, "error_message": None})
    for name, upsertion in to_upsert.items():
        mechanism = MECHANISM_BY_TYPE[upsertion.mechanism]
        credential = credential_from_salted(
            mechanism, bytes(upsertion.salted_password), bytes(upsertion.salt), upsertion.iterations
        )
        changes.append(Change(name, mechanism, credential))
        results.append({"user": name, "error_code": ErrorCode.none, "error_message": None})
    for name, (code, message) in errors.items():
        results.append({"user": name, "error_code": code, "error_message": message})
    return results, changes


def _check_upsertion(upsertion: Any) -> tuple[ErrorCode, str] | None:
    error = _check_name_and_mechanism(upsertion.name, upsertion.mechanism)
    if error is None and upsertion.iterations < MIN_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too few iterations"
    if error is None and upsertion.iterations > MAX_ITERATIONS:
        return ErrorCode.unacceptable_credential, "Too many iterations"
    return error


def _check_name_and_mechanism(name: str, mechanism: int) -> tuple[ErrorCode, str] | None:
    if not name:
        return ErrorCode.unacceptable_credential, "Username must not be empty"
    if mechanism not in MECHANISM_BY_TYPE:
        return ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"
    return None
