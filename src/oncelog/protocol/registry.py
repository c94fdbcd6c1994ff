"""The APIs and versions this broker implements completely, and nothing more.

ApiVersions advertises exactly this table. Ranges are bounded below by what kio can decode
and what magic-v2-only brokers accept, and above by what our handlers implement in full.
"""

from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    DESCRIBE_CLUSTER = 60
    SASL_HANDSHAKE = 17
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DELETE_GROUPS = 42
    ALTER_CONFIGS = 33
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31


SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    # Classic consumer groups. OffsetCommit v0/v1 and OffsetFetch v0 are not in kio; OffsetFetch
    # v8+ batches groups, v9 adds KIP-848's member epoch, v10 names topics by id.
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 10),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    # v6 (KIP-1043): GROUP_ID_NOT_FOUND for an unknown group.
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    # v4 is KIP-890's broker-to-broker form (batched, verify_only); clients send v0-3.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    # v0-3: librdkafka sends up to 3, aiokafka 0; v4+ (KIP-890 part 2) is not offered.
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    # v0 is not in kio (Kafka 4 dropped it too); v5 (KIP-1066) says no dir is cordoned.
    ApiKey.DESCRIBE_LOG_DIRS: (1, 5),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    # v0 has no election type (preferred only); v1 adds it and the top-level error code.
    ApiKey.ELECT_LEADERS: (0, 2),
    # v1 (KIP-860) adds allow_replication_factor_change.
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    # v1 adds endpoint_type (brokers only; controllers: UNSUPPORTED_ENDPOINT_TYPE), v2
    # include_fenced_brokers (no broker is ever fenced).
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    # Handled before authentication by oncelog.security.sasl; the handlers answer
    # ILLEGAL_SASL_STATE afterwards. A v0 handshake is followed by raw tokens.
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # v0 is not in kio (no pattern type; Kafka 4 dropped it too).
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
}


_SUPPORTED_BY_NUMBER: dict[int, tuple[int, int]] = {
    int(key): bounds for key, bounds in SUPPORTED_VERSIONS.items()
}
"""By plain number: every request is looked up here, and `ApiKey(n)` costs an enum call."""


def supported_range(api_key: int) -> tuple[int, int] | None:
    return _SUPPORTED_BY_NUMBER.get(api_key)


def is_supported(api_key: int, version: int) -> bool:
    bounds = supported_range(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]
