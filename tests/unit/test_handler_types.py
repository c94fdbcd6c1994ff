"""The handlers' request types hold what the dispatcher decodes, and the generated module of
those types is current (oncelog.broker.handlers.types, scripts/gen_handler_types.py)."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from oncelog.broker.dispatcher import HANDLERS
from oncelog.protocol.codec import request_class
from oncelog.protocol.registry import SUPPORTED_VERSIONS, ApiKey

ROOT = Path(__file__).resolve().parents[2]

#: Handlers still `request: Any` would be strict xfails here (none left).
NOT_YET_TYPED: set[ApiKey] = set()


@pytest.mark.parametrize(
    "key",
    [
        pytest.param(k, marks=pytest.mark.xfail(strict=True)) if k in NOT_YET_TYPED else k
        for k in sorted(SUPPORTED_VERSIONS)
    ],
    ids=lambda k: k.name,
)
def test_a_handler_takes_every_version_the_dispatcher_decodes(key: ApiKey) -> None:
    """The table erases each handler's request type (`Handler[Any]`); this holds the erasure
    sound: every supported version's kio class is in the handler's annotated union."""
    hints = typing.get_type_hints(HANDLERS[key])
    assert "request" in hints, f"{key.name}'s handler has no request annotation"
    accepted = set(typing.get_args(hints["request"])) or {hints["request"]}
    low, high = SUPPORTED_VERSIONS[key]
    missing = [v for v in range(low, high + 1) if request_class(key, v) not in accepted]
    assert not missing, f"{key.name}'s handler is not typed for versions {missing}"


def test_the_generated_types_are_current() -> None:
    script = ROOT / "scripts" / "gen_handler_types.py"
    done = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
