"""The source's `reader` option and when the Fetch reader serves a read."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")

from oncelog.spark.kafka_fetch import fetch_supported
from oncelog.spark.options import OptionError, parse_options


def opts(**extra: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t", **extra}


def test_the_fetch_reader_is_the_default() -> None:
    assert parse_options(opts(), streaming=False).reader == "fetch"
    assert fetch_supported(parse_options(opts(), streaming=False))
    plain = opts(**{"kafka.security.protocol": "PLAINTEXT"})
    assert fetch_supported(parse_options(plain, streaming=True))


def test_consumer_reader_on_request_and_for_tls_or_sasl() -> None:
    assert not fetch_supported(parse_options(opts(reader="Consumer"), streaming=False))
    for key, value in (
        ("kafka.security.protocol", "SASL_SSL"),
        ("kafka.sasl.mechanism", "PLAIN"),
        ("kafka.ssl.ca.location", "/ca.pem"),
    ):
        assert not fetch_supported(parse_options(opts(**{key: value}), streaming=False))


def test_a_bad_reader_is_refused() -> None:
    with pytest.raises(OptionError, match="'reader'"):
        parse_options(opts(reader="jvm"), streaming=False)


def test_the_driver_consumer_reconnects_quickly_unless_told_otherwise() -> None:
    assert (
        parse_options(opts(), streaming=False).consumer_config("g")["reconnect.backoff.ms"] == "10"
    )
    slow = parse_options(opts(**{"kafka.reconnect.backoff.ms": "100"}), streaming=False)
    assert slow.consumer_config("g")["reconnect.backoff.ms"] == "100"
