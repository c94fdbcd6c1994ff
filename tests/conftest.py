"""Shared fixtures: a real broker process per test, on an ephemeral port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[type[BrokerProcess]]:
    started: list[BrokerProcess] = []

    class Factory(BrokerProcess):
        def __init__(self, name: str = "data", overrides: dict[str, str] | None = None) -> None:
            super().__init__(tmp_path / name, overrides)
            started.append(self)

    yield Factory
    for proc in started:
        proc.kill()


@pytest.fixture
def broker(broker_factory: type[BrokerProcess]) -> BrokerProcess:
    """A running broker with default config; `broker.bootstrap` is its address."""
    return broker_factory().start()
