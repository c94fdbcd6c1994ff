"""The HTTP listener's start-up: the ready line names its URL, a taken HTTP port is a
one-line error with exit status 1 (before the disk is touched), a bad value exit status 2;
https:// serves TLS with the broker's key store."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess
from tests.integration.secure_broker import make_certs

pytestmark = pytest.mark.integration


def serve(data_dir: Path, http: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable, "-m", "oncelog", "serve", "--listen", "127.0.0.1:0",
            "--data-dir", str(data_dir), "--override", f"http.listeners={http}",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_taken_http_port_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve(tmp_path / "data", f"http://127.0.0.1:{port}")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"oncelog: cannot listen on http://127.0.0.1:{port}: Address already in use"
    )
    assert result.stdout == ""
    assert not (tmp_path / "data").exists()  # stopped before the log dirs


def test_bad_http_listener_is_a_config_error(tmp_path: Path) -> None:
    result = serve(tmp_path / "data", "127.0.0.1:9644")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "oncelog: configuration error: Invalid http.listeners entry '127.0.0.1:9644': "
        "expected http://HOST:PORT or https://HOST:PORT"
    )


def test_ready_line_names_the_console(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory(overrides={"http.listeners": "http://127.0.0.1:0"}).start()
    url = broker.ready_line.rsplit(", console ", 1)[1]
    assert url.startswith("http://127.0.0.1:") and url.endswith("/")
    with urllib.request.urlopen(url + "api/cluster", timeout=10) as response:
        cluster = response.read().decode()
    assert f'"port": {broker.port}' in cluster
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(url + "nothing-here", timeout=10)
    assert missing.value.code == 404
    assert broker.stop() == 0


def test_no_http_listener_by_default(broker_factory: type[BrokerProcess]) -> None:
    broker = broker_factory().start()
    assert "console" not in broker.ready_line


def test_https_with_the_brokers_key_store(
    broker_factory: type[BrokerProcess], tmp_path: Path
) -> None:
    certs = make_certs(tmp_path / "certs")
    broker = broker_factory(
        overrides={
            "http.listeners": "https://127.0.0.1:0",
            "ssl.keystore.location": str(certs.broker_keystore),
        }
    ).start()
    url = broker.ready_line.rsplit(", console ", 1)[1]
    assert url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(certs.ca))
    with urllib.request.urlopen(url + "metrics", timeout=10, context=context) as response:
        assert "oncelog_requests_total" in response.read().decode()
    with pytest.raises(urllib.error.URLError):  # not trusted without the CA
        urllib.request.urlopen(url + "metrics", timeout=10)


def test_https_without_a_key_store_is_one_line(tmp_path: Path) -> None:
    result = serve(tmp_path / "data", "https://127.0.0.1:0")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "oncelog: listener HTTPS: TLS needs ssl.keystore.location or ssl.keystore.key with "
        "ssl.keystore.certificate.chain"
    )
    assert not (tmp_path / "data").exists()
