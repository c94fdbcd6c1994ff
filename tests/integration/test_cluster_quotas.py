"""Client quotas in a cluster: set through one broker, they are in etcd, every broker's watch
applies them (each describes and enforces them), a restarted broker reads them back, and a
removal reaches every broker too."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tests.cluster_process import Cluster
from tests.integration.test_client_quotas import Admin, produce

pytestmark = pytest.mark.integration

ENTITY = (("client-id", "slow"),)
SET = {ENTITY: {"producer_byte_rate": 20_000.0}}


def described(bootstrap: str) -> dict[tuple[tuple[str, str | None], ...], dict[str, float]]:
    admin = Admin(bootstrap)
    try:
        return admin.quotas()
    finally:
        admin.close()


@pytest.mark.timeout(180)
def test_a_quota_set_on_one_broker_holds_on_every_broker(tmp_path: Path) -> None:
    with Cluster(tmp_path) as cluster:
        first = cluster.brokers[1]
        admin = Admin(first.bootstrap)
        try:
            assert admin.alter(list(ENTITY), {"producer_byte_rate": 20_000.0}) == (0, None)
        finally:
            admin.close()
        for broker in cluster.brokers.values():
            cluster.wait_for(
                lambda b=broker: (
                    described(b.bootstrap) == {ENTITY: {"producer_byte_rate": 20_000.0}}
                ),
                30,
                f"broker {broker.port} describing the quota",
            )
        # Enforced by a broker that did not take the request: a topic led by broker 3.
        cluster.create_topic("quota", 1, 1, assignment=[[3]])
        _, throttles, delivered = produce(cluster.brokers[3].bootstrap, "slow", 400)
        assert delivered == 400 and any(t > 0 for t in throttles), throttles

        cluster.brokers[2].restart()
        assert described(cluster.brokers[2].bootstrap) == SET

        admin = Admin(cluster.brokers[2].bootstrap)
        try:
            assert admin.alter(list(ENTITY), {"producer_byte_rate": None}) == (0, None)
        finally:
            admin.close()
        for broker in cluster.brokers.values():
            cluster.wait_for(
                lambda b=broker: described(b.bootstrap) == {}, 30, "the quota gone everywhere"
            )

        # Two keys of one entity set at once through two brokers: etcd applies each change
        # to what it holds, so neither is lost.
        def set_key(node: int, key: str) -> None:
            admin = Admin(cluster.brokers[node].bootstrap)
            try:
                assert admin.alter([("user", "carol")], {key: 1000.0}) == (0, None)
            finally:
                admin.close()

        keys = ["producer_byte_rate", "consumer_byte_rate", "request_percentage"]
        threads = [
            threading.Thread(target=set_key, args=(node, key))
            for node, key in zip((1, 2, 3), keys, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        both = {(("user", "carol"),): dict.fromkeys(keys, 1000.0)}
        for broker in cluster.brokers.values():
            cluster.wait_for(
                lambda b=broker: described(b.bootstrap) == both, 30, "all three keys everywhere"
            )
