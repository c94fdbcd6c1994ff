"""Kafka's connection quotas against the real broker: a connection over
`max.connections.per.ip` or `max.connections` is closed as it opens, logged as Kafka logs it
and counted in `oncelog_connections_rejected`; the connections already open keep working, and a
closed one frees its slot."""

from __future__ import annotations

import time

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.rawclient import API_VERSIONS, Closed, RawClient, api_versions_body
from tests.integration.test_metrics import metrics_url, scrape, value

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def served(client: RawClient) -> bool:
    return client.call(API_VERSIONS, 3, api_versions_body()).error_code == 0


@pytest.mark.parametrize(
    ("setting", "log_line"),
    [
        (
            "max.connections.per.ip",
            "Rejected connection from /127.0.0.1: address already has the configured maximum "
            "of 3 connections (max.connections.per.ip)",
        ),
        (
            "max.connections",
            "Rejected connection from /127.0.0.1: the broker already has the configured "
            "maximum of 3 connections (max.connections)",
        ),
    ],
)
def test_a_connection_over_the_limit_is_closed_and_a_freed_slot_is_taken_again(
    broker_factory: type[BrokerProcess], setting: str, log_line: str
) -> None:
    proc = broker_factory(
        setting.replace(".", "-"), {setting: "3", "http.listeners": "http://127.0.0.1:0"}
    ).start()
    url = metrics_url(proc)
    clients = [RawClient(proc.port) for _ in range(3)]
    try:
        assert all(served(c) for c in clients)
        with RawClient(proc.port) as extra:
            extra.expect_closed()
        assert value(scrape(url), "oncelog_connections_rejected_total", limit=setting) == 1
        assert log_line in proc.log_path.read_text()
        assert all(served(c) for c in clients)  # the open ones are untouched
        clients.pop().close()
        for _ in range(50):  # the broker counts the close once its loop has seen it
            with RawClient(proc.port) as again:
                try:
                    if served(again):
                        break
                except Closed:
                    time.sleep(0.05)
        else:
            raise AssertionError("the freed slot was never taken again")
    finally:
        for c in clients:
            c.close()
