"""message.format.version, log.message.format.version and inter.broker.protocol.version take
what Kafka's MetadataVersionValidator takes: a known version after fromVersionString's
trimming (0.10.0.0 is 0.10.0, 2.8.1 is 2.8), kept as written."""

from __future__ import annotations

import pytest

from oncelog.config import (
    METADATA_VERSIONS,
    BrokerConfig,
    InvalidConfig,
    metadata_version_key,
    validate_topic_configs,
)

ACCEPTED = [
    "0.8.0", "0.8.2.2", "0.9.0.1", "0.10.0", "0.10.0.0", "0.10.0-IV0", "0.10.0-IV1",
    "0.10.1.1", "0.10.2-IV0", "0.11.0.2", "1.0", "1.0.2", "1.1-IV0", "2.8.1", "2.8-IV1",
    "3.0-IV1", "3.9", "3.9.1", "4.0", "4.0-IV3",
]  # fmt: skip
REFUSED = ["", "three", "0.10", "0.10.3", "0.10.0-IV2", "0.7.0", "2.9", "3.0-IV9", "4.1", "5"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("0.10.0.0", "0.10.0"),
        ("0.10.0-IV1", "0.10.0-IV1"),
        ("0.11.0.2", "0.11.0"),
        ("2.8.1", "2.8"),
        ("2.8-IV1", "2.8-IV1"),
        ("3.0", "3.0"),
        ("1.0.2.7", "1.0"),
    ],
)
def test_kafkas_trimming(text: str, key: str) -> None:
    assert metadata_version_key(text) == key


def test_kafkas_versions() -> None:
    assert len(METADATA_VERSIONS) == 30 + 55  # 30 releases, 55 internal versions (Kafka 4.0)
    assert {"0.9.0", "0.10.1-IV2", "3.7-IV4", "4.0-IV3"} <= METADATA_VERSIONS
    assert "0.9.0-IV0" not in METADATA_VERSIONS


@pytest.mark.parametrize("value", ACCEPTED)
@pytest.mark.parametrize("key", ["message.format.version"])
def test_topic_config_accepts_kafkas_versions_as_written(key: str, value: str) -> None:
    assert validate_topic_configs({key: value}) == {key: value}


@pytest.mark.parametrize("value", REFUSED)
def test_topic_config_refuses_what_kafka_refuses(value: str) -> None:
    with pytest.raises(InvalidConfig) as caught:
        validate_topic_configs({"message.format.version": value})
    assert str(caught.value) == (
        f"Invalid value {value} for configuration message.format.version: "
        f"Version {value} is not a valid version"
    )


@pytest.mark.parametrize("key", ["log.message.format.version", "inter.broker.protocol.version"])
def test_broker_configs_take_the_same_versions(key: str) -> None:
    for value in ("0.10.0.0", "0.10.0-IV1", "0.11.0.2", "2.8.1"):
        assert BrokerConfig({key: value}).get(key) == value
    with pytest.raises(InvalidConfig, match=r"Version 2\.9 is not a valid version"):
        BrokerConfig({key: "2.9"}).get(key)
