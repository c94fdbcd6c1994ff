"""Replication and controller metrics of a three-broker cluster, scraped from each broker's
/metrics: one active controller; a broker's death shows as under-replicated and at-min-ISR
partitions, an ISR shrink, a leader election and an offline partition; its return as an ISR
expansion and a healthy cluster again."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import pytest
from confluent_kafka import Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.broker_process import BrokerProcess
from tests.cluster_process import Cluster

pytestmark = pytest.mark.integration

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(broker: BrokerProcess) -> Samples:
    match = re.search(r", console (http://127\.0\.0\.1:\d+/)$", broker.ready_line)
    assert match, broker.ready_line
    with urllib.request.urlopen(match.group(1) + "metrics", timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def gauge(broker: BrokerProcess, name: str) -> float:
    return scrape(broker)[(name, frozenset())]


@pytest.mark.timeout(180)
def test_replication_health_and_controller_metrics(tmp_path: Path) -> None:
    with Cluster(tmp_path, overrides={"http.listeners": "http://127.0.0.1:0"}) as cluster:
        brokers = cluster.brokers
        cluster.wait_for(
            lambda: sum(gauge(b, "oncelog_active_controller") for b in brokers.values()) == 1,
            30,
            "one active controller",
        )
        controller = next(n for n, b in brokers.items() if gauge(b, "oncelog_active_controller"))
        victim, other = (n for n in brokers if n != controller)
        c = brokers[controller]
        # The victim leads "led" (the controller must elect a new leader when it dies) and
        # follows in "follows" (its leader, the controller, shrinks the ISR); "solo" lives
        # on the victim alone and goes offline with it.
        cluster.create_topic(
            "led", assignment=[[victim, controller, other]], configs={"min.insync.replicas": "2"}
        )
        cluster.create_topic("follows", assignment=[[controller, victim, other]])
        cluster.create_topic("solo", assignment=[[victim]])
        cluster.wait_isr_full("led")
        cluster.wait_isr_full("follows")
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
        for i in range(5):
            producer.produce("follows", value=f"v{i}".encode(), partition=0)
        assert producer.flush(30) == 0
        page = scrape(c)
        assert page[("oncelog_messages_in_total", frozenset({("topic", "follows")}))] == 5
        # acks=all: both followers fetched the records before the producer heard back.
        topic = frozenset({("topic", "follows")})
        appended = page[("oncelog_bytes_in_total", topic)]
        assert appended > 0
        assert page[("oncelog_replication_bytes_out_total", topic)] >= 2 * appended
        for follower in (victim, other):
            stored = scrape(brokers[follower])[("oncelog_replication_bytes_in_total", topic)]
            assert stored == appended, follower  # the leader's batches, byte for byte
        for b in brokers.values():
            page = scrape(b)
            assert page[("oncelog_under_replicated_partitions", frozenset())] == 0
            assert page[("oncelog_offline_partitions", frozenset())] == 0
        # Kafka's count: the one-replica "solo" (min.insync.replicas 1) is at its minimum.
        assert gauge(brokers[victim], "oncelog_at_min_isr_partitions") == 1
        assert gauge(c, "oncelog_at_min_isr_partitions") == 0
        elections = gauge(c, "oncelog_leader_elections_total")
        shrinks = gauge(c, "oncelog_isr_shrinks_total")
        expands = gauge(c, "oncelog_isr_expands_total")

        brokers[victim].kill()
        cluster.wait_for(
            lambda: gauge(c, "oncelog_offline_partitions") == 1,
            30,
            "solo offline on the controller",
        )
        cluster.wait_for(
            lambda: gauge(c, "oncelog_under_replicated_partitions") >= 2, 30, "led and follows"
        )
        page = scrape(c)
        assert page[("oncelog_leader_elections_total", frozenset())] >= elections + 1
        assert page[("oncelog_isr_shrinks_total", frozenset())] >= shrinks + 1
        # "led" is led by the controller now with ISR {controller, other}: at its minimum.
        assert page[("oncelog_at_min_isr_partitions", frozenset())] == 1
        assert page[("oncelog_under_min_isr_partitions", frozenset())] == 0
        assert gauge(brokers[other], "oncelog_active_controller") == 0
        assert gauge(brokers[other], "oncelog_offline_partitions") == 0  # controller only

        brokers[victim].start()
        cluster.wait_isr_full("led")
        cluster.wait_isr_full("follows")
        cluster.wait_for(
            lambda: gauge(c, "oncelog_under_replicated_partitions") == 0, 30, "a whole ISR"
        )
        page = scrape(c)
        assert page[("oncelog_offline_partitions", frozenset())] == 0
        assert page[("oncelog_isr_expands_total", frozenset())] >= expands + 1
        assert page[("oncelog_at_min_isr_partitions", frozenset())] == 0
