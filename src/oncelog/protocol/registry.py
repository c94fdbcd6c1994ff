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
    FIND_COORDINATOR = 10
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    DESCRIBE_CONFIGS = 32


SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 11),
    ApiKey.FETCH: (4, 12),
    ApiKey.LIST_OFFSETS: (1, 7),
    ApiKey.METADATA: (0, 12),
    ApiKey.FIND_COORDINATOR: (0, 4),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 5),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
}


def supported_range(api_key: int) -> tuple[int, int] | None:
    try:
        return SUPPORTED_VERSIONS[ApiKey(api_key)]
    except ValueError:
        return None


def is_supported(api_key: int, version: int) -> bool:
    bounds = supported_range(api_key)
    return bounds is not None and bounds[0] <= version <= bounds[1]
