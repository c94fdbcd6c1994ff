"""The ACL authorizer's decisions and the ACL filters, as Kafka's StandardAuthorizer makes them."""

from __future__ import annotations

import pytest

from oncelog.config import BrokerConfig
from oncelog.errors import InvalidConfig
from oncelog.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    PatternType,
    PermissionType,
    ResourcePattern,
    ResourceType,
    operations_bitfield,
    parse_enum,
    validate_binding,
)
from oncelog.security.authorizer import Authorizer, all_operations, parse_super_users

Op = AclOperation
T = ResourceType
LIT = PatternType.LITERAL
PRE = PatternType.PREFIXED
ALLOW = PermissionType.ALLOW
DENY = PermissionType.DENY
ALICE = "User:alice"


def acl(
    rt: ResourceType,
    name: str,
    op: AclOperation,
    principal: str = ALICE,
    perm: PermissionType = ALLOW,
    pattern: PatternType = LIT,
    host: str = "*",
) -> AclBinding:
    entry = AccessControlEntry(principal, host, op, perm)
    return AclBinding(ResourcePattern(rt, name, pattern), entry)


def test_literal_allow_is_for_that_name_principal_and_operation_only() -> None:
    auth = Authorizer(acls=[acl(T.TOPIC, "a", Op.WRITE)])
    assert auth.authorize(ALICE, "127.0.0.1", Op.WRITE, T.TOPIC, "a")
    assert not auth.authorize(ALICE, "127.0.0.1", Op.READ, T.TOPIC, "a")
    assert not auth.authorize(ALICE, "127.0.0.1", Op.WRITE, T.TOPIC, "ab")
    assert not auth.authorize("User:bob", "127.0.0.1", Op.WRITE, T.TOPIC, "a")
    assert not auth.authorize(ALICE, "127.0.0.1", Op.WRITE, T.GROUP, "a")


def test_implied_operations() -> None:
    auth = Authorizer(
        acls=[
            acl(T.TOPIC, "r", Op.READ),
            acl(T.TOPIC, "w", Op.WRITE),
            acl(T.TOPIC, "d", Op.DELETE),
            acl(T.TOPIC, "al", Op.ALTER),
            acl(T.TOPIC, "ac", Op.ALTER_CONFIGS),
            acl(T.TOPIC, "c", Op.CREATE),
            acl(T.TOPIC, "all", Op.ALL),
        ]
    )
    for name in ("r", "w", "d", "al", "all"):
        assert auth.authorize(ALICE, "h", Op.DESCRIBE, T.TOPIC, name), name
    assert not auth.authorize(ALICE, "h", Op.DESCRIBE, T.TOPIC, "c")
    assert not auth.authorize(ALICE, "h", Op.DESCRIBE, T.TOPIC, "ac")
    assert auth.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T.TOPIC, "ac")
    assert not auth.authorize(ALICE, "h", Op.DESCRIBE_CONFIGS, T.TOPIC, "r")
    assert not auth.authorize(ALICE, "h", Op.READ, T.TOPIC, "w")
    assert auth.authorize(ALICE, "h", Op.DELETE, T.TOPIC, "all")


def test_deny_wins_and_deny_does_not_imply() -> None:
    auth = Authorizer(
        acls=[
            acl(T.TOPIC, "*", Op.ALL, principal="User:*"),
            acl(T.TOPIC, "secret", Op.READ, perm=DENY, pattern=PRE),
        ]
    )
    assert auth.authorize(ALICE, "h", Op.READ, T.TOPIC, "public")
    assert not auth.authorize(ALICE, "h", Op.READ, T.TOPIC, "secret-1")
    # A DENY of Read does not deny the Describe that Read implies.
    assert auth.authorize(ALICE, "h", Op.DESCRIBE, T.TOPIC, "secret-1")
    auth.acls.add(acl(T.TOPIC, "secret-1", Op.ALL, principal="User:*", perm=DENY))
    assert not auth.authorize(ALICE, "h", Op.DESCRIBE, T.TOPIC, "secret-1")
    assert auth.authorize(ALICE, "h", Op.DESCRIBE, T.TOPIC, "secret-2")


def test_wildcards_prefixes_and_hosts() -> None:
    auth = Authorizer(
        acls=[
            acl(T.GROUP, "*", Op.READ, principal="User:*"),
            acl(T.TOPIC, "orders.", Op.WRITE, pattern=PRE),
            acl(T.TOPIC, "local", Op.WRITE, host="10.0.0.1"),
        ]
    )
    assert auth.authorize("User:anyone", "h", Op.READ, T.GROUP, "g")
    assert auth.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "orders.eu")
    assert auth.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "orders.")
    assert not auth.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "orders")
    assert auth.authorize(ALICE, "10.0.0.1", Op.WRITE, T.TOPIC, "local")
    assert not auth.authorize(ALICE, "10.0.0.2", Op.WRITE, T.TOPIC, "local")
    # A literal "*" ACL name is the wildcard; a resource literally named "*" is not a prefix.
    assert not auth.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "*")


def test_super_users_and_no_acl_found() -> None:
    users = parse_super_users(" User:admin ;User:bob;")
    assert users == {"User:admin", "User:bob"}
    strict = Authorizer(users, False, [acl(T.TOPIC, "a", Op.READ)])
    assert strict.authorize("User:admin", "h", Op.ALTER, T.CLUSTER, "kafka-cluster")
    assert not strict.authorize(ALICE, "h", Op.READ, T.TOPIC, "b")
    lenient = Authorizer(users, True, [acl(T.TOPIC, "a", Op.READ)])
    assert lenient.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "b")  # b has no ACL at all
    assert not lenient.authorize("User:bob2", "h", Op.READ, T.TOPIC, "a")  # a has one
    assert not lenient.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "a")


def test_authorize_any_of_type() -> None:
    auth = Authorizer(
        acls=[
            acl(T.TOPIC, "a", Op.WRITE),
            acl(T.TOPIC, "a", Op.WRITE, principal="User:bob"),
            acl(T.TOPIC, "a", Op.WRITE, principal="User:bob", perm=DENY),
            acl(T.TOPIC, "p.", Op.WRITE, principal="User:carol", pattern=PRE),
            acl(T.TOPIC, "p", Op.WRITE, principal="User:carol", perm=DENY, pattern=PRE),
        ]
    )
    assert auth.authorize_any(ALICE, "h", Op.WRITE, T.TOPIC)
    assert not auth.authorize_any(ALICE, "h", Op.READ, T.TOPIC)
    assert not auth.authorize_any("User:bob", "h", Op.WRITE, T.TOPIC)
    assert not auth.authorize_any("User:carol", "h", Op.WRITE, T.TOPIC)
    assert not auth.authorize_any(ALICE, "h", Op.WRITE, T.TRANSACTIONAL_ID)


def test_authorized_operations_bitfield() -> None:
    auth = Authorizer(acls=[acl(T.TOPIC, "a", Op.WRITE), acl(T.TOPIC, "a", Op.ALTER_CONFIGS)])
    bits = auth.authorized_operations(ALICE, "h", T.TOPIC, "a")
    assert bits == operations_bitfield(
        [Op.WRITE, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS]
    )
    assert bits == (1 << 4) | (1 << 8) | (1 << 11) | (1 << 10)
    assert all_operations(T.GROUP) == (1 << 3) | (1 << 8) | (1 << 6)


def test_filters() -> None:
    index = AclIndex(
        [
            acl(T.TOPIC, "a", Op.READ),
            acl(T.TOPIC, "*", Op.READ, principal="User:bob"),
            acl(T.TOPIC, "a", Op.WRITE, pattern=PRE),
            acl(T.TOPIC, "ab", Op.WRITE, pattern=PRE, perm=DENY),
            acl(T.GROUP, "a", Op.READ),
        ]
    )
    assert len(index.matching(AclBindingFilter())) == 5
    assert len(index.matching(AclBindingFilter(T.TOPIC))) == 4
    # ANY pattern type: the exact name, literal or prefixed.
    names = {(b.pattern.name, b.pattern.pattern_type) for b in index.matching(
        AclBindingFilter(T.TOPIC, "a", PatternType.ANY)
    )}
    assert names == {("a", LIT), ("a", PRE)}
    # MATCH: everything that applies to topic "abc".
    matched = index.matching(AclBindingFilter(T.TOPIC, "abc", PatternType.MATCH))
    assert {(b.pattern.name, b.pattern.pattern_type) for b in matched} == {
        ("*", LIT), ("a", PRE), ("ab", PRE)
    }
    assert [b.pattern.name for b in index.matching(AclBindingFilter(T.TOPIC, "a", LIT))] == ["a"]
    assert len(index.matching(AclBindingFilter(principal="User:bob"))) == 1
    assert len(index.matching(AclBindingFilter(permission=DENY))) == 1
    assert len(index.matching(AclBindingFilter(operation=Op.WRITE))) == 2
    assert AclBindingFilter(T.UNKNOWN).problem() is not None


def test_index_removal_keeps_prefix_lookups_right() -> None:
    a, b = acl(T.TOPIC, "x", Op.READ, pattern=PRE), acl(T.TOPIC, "x", Op.WRITE, pattern=PRE)
    auth = Authorizer(acls=[a, b])
    assert auth.acls.remove(a)
    assert not auth.acls.remove(a)
    assert auth.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "xy")
    assert auth.acls.remove(b)
    assert len(auth.acls) == 0 and not auth.acls.has_type(T.TOPIC)
    assert not auth.authorize(ALICE, "h", Op.WRITE, T.TOPIC, "xy")


def test_many_acls_lookup_is_indexed() -> None:
    index = AclIndex(acl(T.TOPIC, f"t{i}", Op.READ, principal=f"User:u{i}") for i in range(20000))
    tables = index.applying(T.TOPIC, "t5")
    assert sum(len(entries) for t in tables for entries in t.values()) == 1


def test_validation_and_serialisation() -> None:
    good = acl(T.TRANSACTIONAL_ID, "tx-", Op.WRITE, pattern=PRE)
    assert validate_binding(good) is None
    assert AclBinding.from_json(good.to_json()) == good
    same = acl(T.TRANSACTIONAL_ID, "tx-", Op.WRITE, pattern=PRE)
    assert len(good.key()) == 32 and good.key() == same.key()
    assert validate_binding(acl(T.CLUSTER, "other", Op.ALTER)) is not None
    assert validate_binding(acl(T.TOPIC, "", Op.READ)) is not None
    assert validate_binding(acl(T.TOPIC, "a", Op.READ, principal="alice")) is not None
    assert validate_binding(acl(T.TOPIC, "a", Op.ANY)) is not None
    assert validate_binding(acl(T.ANY, "a", Op.READ)) is not None
    assert validate_binding(acl(T.TOPIC, "a", Op.READ, pattern=PatternType.MATCH)) is not None
    assert parse_enum(AclOperation, "IdempotentWrite") is Op.IDEMPOTENT_WRITE
    assert parse_enum(ResourceType, "transactional-id") is T.TRANSACTIONAL_ID
    with pytest.raises(ValueError, match="unknown AclOperation"):
        parse_enum(AclOperation, "fly")


def test_authorizer_class_name_config() -> None:
    for name in ("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                 "kafka.security.authorizer.AclAuthorizer"):
        assert BrokerConfig.load(None, [("authorizer.class.name", name)]).get(
            "authorizer.class.name"
        ) == name
    with pytest.raises(InvalidConfig, match="only Kafka's ACL authorizer"):
        BrokerConfig.load(None, [("authorizer.class.name", "com.example.Custom")])
