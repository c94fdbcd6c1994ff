"""Every option and subcommand of the console tools explains itself in `--help` (issue 10 E),
and the small formatters they share print what Kafka's tools would."""

from __future__ import annotations

import argparse
from collections.abc import Iterator

import pytest

from oncelog.cli.console import duration, timestamp
from oncelog.cli.main import build_parser
from oncelog.errors import error_name

TOOLS = ("topics", "produce", "consume", "transactions", "groups", "configs", "acls")


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:  # type: ignore[type-arg]
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def _undocumented(name: str, parser: argparse.ArgumentParser) -> Iterator[str]:
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helped = {a.dest for a in action._choices_actions if a.help}
            for sub_name, sub in action.choices.items():
                if sub_name not in helped:
                    yield f"{name} {sub_name}"
                yield from _undocumented(f"{name} {sub_name}", sub)
        elif not action.help:
            yield f"{name} {'/'.join(action.option_strings) or action.dest}"


@pytest.mark.parametrize("tool", TOOLS)
def test_every_option_has_help(tool: str) -> None:
    parser = _subparsers(build_parser()).choices[tool]
    assert list(_undocumented(tool, parser)) == []


def test_error_codes_by_kafka_name() -> None:
    assert error_name(105) == "TRANSACTIONAL_ID_NOT_FOUND (105)"
    assert error_name(3) == "UNKNOWN_TOPIC_OR_PARTITION (3)"
    assert error_name(-1) == "UNKNOWN_SERVER_ERROR (-1)"
    assert error_name(32767) == "UNKNOWN_ERROR_CODE (32767)"


def test_times_for_humans() -> None:
    assert timestamp(-1) == "-"
    assert timestamp(1_729_827_181_123) == "2024-10-25T03:33:01.123Z"
    assert [duration(ms) for ms in (-1, 35, 1_250, 245_000, 7_620_000, 273_600_000)] == [
        "-",
        "35ms",
        "1.2s",
        "4m05s",
        "2h07m",
        "3d04h",
    ]
