"""A clustered broker that cannot join says why in one line and exits 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster_process import free_port
from tests.integration.test_startup import one_line, serve


@pytest.mark.timeout(60)
def test_an_unreachable_etcd_stops_the_start_in_one_line(tmp_path: Path) -> None:
    dead = free_port()  # nothing listens there
    result = serve(
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "data"),
        "--override",
        f"etcd.connect=127.0.0.1:{dead}",
        "--override",
        "broker.session.timeout.ms=1000",
    )
    assert result.returncode == 1
    line = one_line(result)
    assert f"etcd at 127.0.0.1:{dead}/oncelog" in line, line


@pytest.mark.timeout(60)
def test_an_inter_broker_listener_name_that_names_no_listener_is_refused(tmp_path: Path) -> None:
    result = serve(
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "data"),
        "--override",
        f"etcd.connect=127.0.0.1:{free_port()}",
        "--override",
        "inter.broker.listener.name=REPLICATION",
    )
    assert result.returncode == 1
    assert "inter.broker.listener.name=REPLICATION names no listener" in one_line(result)


@pytest.mark.timeout(60)
def test_a_malformed_etcd_connect_is_refused(tmp_path: Path) -> None:
    result = serve(
        "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
        "--override", "etcd.connect=127.0.0.1:notaport",
    )  # fmt: skip
    assert result.returncode == 2  # a configuration error, as a value out of bounds
    line = one_line(result)
    assert "configuration error: etcd.connect" in line and "127.0.0.1:notaport" in line
