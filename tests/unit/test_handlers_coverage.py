"""Every API the dispatcher serves has a test of its handler on the in-process broker: the
tests/unit/test_handlers_*.py tests mark what they cover with `@covers(ApiKey.X)`
(tests/harness/in_process.py), and a new API without such a test fails here."""

from __future__ import annotations

import importlib
from pathlib import Path

from oncelog.broker.dispatcher import HANDLERS
from oncelog.protocol.registry import SUPPORTED_VERSIONS
from tests.harness.in_process import COVERED


def test_every_supported_api_key_has_a_handler_test() -> None:
    for path in sorted(Path(__file__).parent.glob("test_handlers_*.py")):
        importlib.import_module(f"tests.unit.{path.stem}")
    assert set(HANDLERS) == set(SUPPORTED_VERSIONS)
    missing = sorted(k.name for k in SUPPORTED_VERSIONS if k not in COVERED)
    assert not missing, f"no handler test on the in-process broker covers {missing}"
