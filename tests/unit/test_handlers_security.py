"""The security APIs' handlers on the in-process broker: ACLs created, enforced, described
and deleted; SCRAM credentials stored and described; client quotas set and described; the
SASL APIs after authentication."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from kio.schema.alter_client_quotas.v1.response import AlterClientQuotasResponse
from kio.schema.alter_user_scram_credentials.v0.response import (
    AlterUserScramCredentialsResponse,
)
from kio.schema.create_acls.v3.response import CreateAclsResponse
from kio.schema.create_topics.v7.response import CreateTopicsResponse
from kio.schema.delete_acls.v3.response import DeleteAclsResponse
from kio.schema.describe_acls.v3.response import DescribeAclsResponse
from kio.schema.describe_client_quotas.v1.response import DescribeClientQuotasResponse
from kio.schema.describe_user_scram_credentials.v0.response import (
    DescribeUserScramCredentialsResponse,
)
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse

from oncelog.errors import ErrorCode
from oncelog.protocol.registry import ApiKey
from tests.harness.in_process import InProcessBroker, build_broker, covers

ADMIN, ALICE = "User:admin", "User:alice"
TOPIC = "orders"
# Kafka's wire codes: resource TOPIC, pattern LITERAL / ANY, operation READ / ANY,
# permission ALLOW / ANY.
TOPIC_RESOURCE, LITERAL, ANY_PATTERN, READ, ANY_OP, ALLOW, ANY_PERMISSION = 2, 3, 1, 3, 1, 3, 1
SCRAM_SHA_256 = 1

ALICE_READS = {
    "resource_type": TOPIC_RESOURCE,
    "resource_name": TOPIC,
    "resource_pattern_type": LITERAL,
    "principal": ALICE,
    "host": "*",
    "operation": READ,
    "permission_type": ALLOW,
}
TOPIC_FILTER = {
    "resource_type_filter": TOPIC_RESOURCE,
    "resource_name_filter": TOPIC,
    "pattern_type_filter": ANY_PATTERN,
    "principal_filter": None,
    "host_filter": None,
    "operation": ANY_OP,
    "permission_type": ANY_PERMISSION,
}


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = build_broker(
        tmp_path,
        **{
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": ADMIN,
        },
    )
    b.create_topic(TOPIC)
    yield b
    b.close()


@pytest.fixture
def open_broker(tmp_path: Path) -> Iterator[InProcessBroker]:
    b = build_broker(tmp_path)
    yield b
    b.close()


def sees_topic(broker: InProcessBroker, principal: str) -> bool:
    answer = broker.ask(
        MetadataResponse,
        {
            "topics": [{"name": TOPIC, "topic_id": None}],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
        principal=principal,
    )
    code = answer.topics[0].error_code
    assert code in (ErrorCode.none, ErrorCode.topic_authorization_failed)
    return code == ErrorCode.none


def described(broker: InProcessBroker, principal: str = ADMIN) -> DescribeAclsResponse:
    return broker.ask(DescribeAclsResponse, TOPIC_FILTER, principal=principal)


@covers(ApiKey.CREATE_ACLS)
def test_a_created_acl_is_enforced(broker: InProcessBroker) -> None:
    assert not sees_topic(broker, ALICE)
    answer = broker.ask(CreateAclsResponse, {"creations": [ALICE_READS]}, principal=ADMIN)
    assert [r.error_code for r in answer.results] == [ErrorCode.none]
    assert sees_topic(broker, ALICE)


@covers(ApiKey.CREATE_ACLS)
def test_create_acls_needs_alter_on_the_cluster(broker: InProcessBroker) -> None:
    answer = broker.ask(CreateAclsResponse, {"creations": [ALICE_READS]}, principal=ALICE)
    assert answer.results[0].error_code == ErrorCode.cluster_authorization_failed
    assert not sees_topic(broker, ALICE)


@covers(ApiKey.CREATE_ACLS)
def test_create_acls_without_an_authorizer_is_security_disabled(
    open_broker: InProcessBroker,
) -> None:
    answer = open_broker.ask(CreateAclsResponse, {"creations": [ALICE_READS]})
    assert answer.results[0].error_code == ErrorCode.security_disabled


@covers(ApiKey.DESCRIBE_ACLS)
def test_describe_acls_lists_the_binding(broker: InProcessBroker) -> None:
    broker.ask(CreateAclsResponse, {"creations": [ALICE_READS]}, principal=ADMIN)
    answer = described(broker)
    assert answer.error_code == ErrorCode.none
    (resource,) = answer.resources
    assert resource.resource_name == TOPIC
    assert [(a.principal, a.operation) for a in resource.acls] == [(ALICE, READ)]
    assert described(broker, ALICE).error_code == ErrorCode.cluster_authorization_failed


@covers(ApiKey.DELETE_ACLS)
def test_deleted_acls_stop_applying(broker: InProcessBroker) -> None:
    broker.ask(CreateAclsResponse, {"creations": [ALICE_READS]}, principal=ADMIN)
    answer = broker.ask(DeleteAclsResponse, {"filters": [TOPIC_FILTER]}, principal=ADMIN)
    (result,) = answer.filter_results
    assert result.error_code == ErrorCode.none
    assert [m.principal for m in result.matching_acls] == [ALICE]
    assert described(broker).resources == ()
    assert not sees_topic(broker, ALICE)


@covers(ApiKey.CREATE_TOPICS)
def test_create_topics_needs_create_when_acls_are_on(broker: InProcessBroker) -> None:
    answer = broker.ask(
        CreateTopicsResponse,
        {
            "topics": [
                {
                    "name": "new",
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
            ],
            "timeout": timedelta(seconds=5),
            "validate_only": False,
        },
        principal=ALICE,
    )
    assert answer.topics[0].error_code == ErrorCode.topic_authorization_failed


@covers(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS)
def test_a_stored_scram_credential_is_described(open_broker: InProcessBroker) -> None:
    answer = open_broker.ask(
        AlterUserScramCredentialsResponse,
        {
            "deletions": [],
            "upsertions": [
                {
                    "name": "alice",
                    "mechanism": SCRAM_SHA_256,
                    "iterations": 4096,
                    "salt": b"salt" * 4,
                    "salted_password": b"p" * 32,
                }
            ],
        },
    )
    assert [(r.user, r.error_code) for r in answer.results] == [("alice", ErrorCode.none)]
    listed = open_broker.ask(
        DescribeUserScramCredentialsResponse, {"users": [{"name": "alice"}, {"name": "bob"}]}
    )
    assert listed.error_code == ErrorCode.none
    by_user = {r.user: r for r in listed.results}
    assert [(c.mechanism, c.iterations) for c in by_user["alice"].credential_infos] == [
        (SCRAM_SHA_256, 4096)
    ]
    assert by_user["bob"].error_code == ErrorCode.resource_not_found


@covers(ApiKey.ALTER_CLIENT_QUOTAS, ApiKey.DESCRIBE_CLIENT_QUOTAS)
def test_a_client_quota_is_set_and_described(open_broker: InProcessBroker) -> None:
    entity = [{"entity_type": "user", "entity_name": "alice"}]
    answer = open_broker.ask(
        AlterClientQuotasResponse,
        {
            "entries": [
                {
                    "entity": entity,
                    "ops": [{"key": "producer_byte_rate", "value": 1024.0, "remove": False}],
                }
            ],
            "validate_only": False,
        },
    )
    assert [e.error_code for e in answer.entries] == [ErrorCode.none]
    listed = open_broker.ask(
        DescribeClientQuotasResponse,
        {
            "components": [{"entity_type": "user", "match_type": 0, "match": "alice"}],
            "strict": False,
        },
    )
    assert listed.error_code == ErrorCode.none
    (entry,) = listed.entries
    assert [(v.key, v.value) for v in entry.values] == [("producer_byte_rate", 1024.0)]


@covers(ApiKey.ALTER_CLIENT_QUOTAS)
def test_alter_client_quotas_refuses_an_unknown_key(open_broker: InProcessBroker) -> None:
    answer = open_broker.ask(
        AlterClientQuotasResponse,
        {
            "entries": [
                {
                    "entity": [{"entity_type": "user", "entity_name": "alice"}],
                    "ops": [{"key": "no_such_rate", "value": 1.0, "remove": False}],
                }
            ],
            "validate_only": False,
        },
    )
    assert answer.entries[0].error_code == ErrorCode.invalid_request


@covers(ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)
def test_the_sasl_apis_after_authentication_are_an_illegal_state(
    open_broker: InProcessBroker,
) -> None:
    """The exchange happens before requests reach the handlers (oncelog.security.sasl)."""
    handshake = open_broker.ask(SaslHandshakeResponse, {"mechanism": "SCRAM-SHA-256"})
    assert handshake.error_code == ErrorCode.illegal_sasl_state
    authenticate = open_broker.ask(SaslAuthenticateResponse, {"auth_bytes": b"n,,n=alice"})
    assert authenticate.error_code == ErrorCode.illegal_sasl_state
