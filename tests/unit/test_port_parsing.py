"""Every port a setting or an option names is read by one function, `config.parse_port`: a
port outside 0-65535 is refused with one line naming it, never wrapped round by the socket
layer (`--listen 127.0.0.1:99999` once listened on 34463)."""

from __future__ import annotations

import argparse

import pytest

from oncelog.cli.console import add_bootstrap
from oncelog.client.connection import parse_bootstrap
from oncelog.config import BrokerConfig, Listener, check_bootstrap, parse_port
from oncelog.console.listener import HttpListenerError
from oncelog.console.listener import parse as parse_http
from oncelog.errors import InvalidConfig
from oncelog.server.etcd import parse_etcd_connect


@pytest.mark.parametrize("text", ["0", "1", "9092", "65535"])
def test_ports_in_range(text: str) -> None:
    assert parse_port(text, "x") == int(text)


@pytest.mark.parametrize("text", ["65536", "99999", "123456789012"])
def test_ports_out_of_range(text: str) -> None:
    with pytest.raises(InvalidConfig, match=f"^port {text} is out of range 0-65535 in x$"):
        parse_port(text, "x")


@pytest.mark.parametrize("text", ["", "-1", "9o92", "٩٠٩٢", " 1"])
def test_ports_that_are_not_numbers(text: str) -> None:
    with pytest.raises(InvalidConfig, match="is not a number in x"):
        parse_port(text, "x")


def test_lowest_port() -> None:
    with pytest.raises(InvalidConfig, match="port 0 is out of range 1-65535"):
        parse_port("0", "x", lowest=1)


def test_listeners_and_advertised_listeners() -> None:
    assert Listener.parse("PLAINTEXT://127.0.0.1:65535").port == 65535
    with pytest.raises(
        InvalidConfig, match=r"port 99999 is out of range 0-65535 in listeners=PLAINTEXT://h:99999"
    ):
        BrokerConfig({"listeners": "PLAINTEXT://h:99999"})
    with pytest.raises(InvalidConfig, match=r"port 70000 is out of range 0-65535 in advertised"):
        BrokerConfig({"advertised.listeners": "PLAINTEXT://h:70000"})


def test_http_listeners() -> None:
    listener = parse_http(["http://127.0.0.1:65535"])
    assert listener is not None and listener.port == 65535
    with pytest.raises(HttpListenerError, match="port 99999 is out of range 0-65535"):
        parse_http(["http://127.0.0.1:99999"])


def test_etcd_connect() -> None:
    assert parse_etcd_connect("h:2379,[::1]:65535/p").endpoints == (("h", 2379), ("::1", 65535))
    with pytest.raises(
        ValueError, match=r"^etcd\.connect: port 99999 is out of range 1-65535 in 'h:2379,h:99999'$"
    ):
        parse_etcd_connect("h:2379,h:99999")
    with pytest.raises(ValueError, match="port 0 is out of range 1-65535"):
        parse_etcd_connect("h:0")


def test_bootstrap_servers() -> None:
    assert check_bootstrap("a:9092,[::1]:9093,b,::1") == "a:9092,[::1]:9093,b,::1"
    for bad in ("a:9092,b:99999", "a:0", "[::1]:65536"):
        with pytest.raises(InvalidConfig, match="is out of range 1-65535 in --bootstrap-server"):
            check_bootstrap(bad)
    assert parse_bootstrap("h:65535,x:1") == ("h", 65535)
    assert parse_bootstrap("h") == ("h", 9092)
    with pytest.raises(InvalidConfig, match="port 99999 is out of range"):
        parse_bootstrap("h:99999")


def test_bootstrap_option_is_one_error_line_and_status_2(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = argparse.ArgumentParser()
    add_bootstrap(parser)
    assert parser.parse_args(["-b", "h:1"]).bootstrap_server == "h:1"
    assert parser.parse_args([]).bootstrap_server == "127.0.0.1:9092"
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--bootstrap-server", "127.0.0.1:99999"])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "Error: port 99999 is out of range 1-65535 in --bootstrap-server 127.0.0.1:99999\n"
    )
