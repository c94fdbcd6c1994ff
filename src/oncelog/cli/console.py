"""What every console tool prints the same way: tables, times, errors, a closed stdout.

Kafka's tools are the model: aligned columns with `-` for a missing value, error codes by
their Kafka name, one line on stderr for an error and never a traceback.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from oncelog.config import check_bootstrap
from oncelog.errors import InvalidConfig, error_name

#: What Kafka's tools print for a value that does not exist (no committed offset, no member).
MISSING = "-"

#: The exit status of a Unix tool killed by SIGPIPE (128 + 13), as a shell would report it.
EXIT_BROKEN_PIPE = 141

BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_HELP = f"the broker(s) to connect to, host:port[,host:port...] (default {BOOTSTRAP})"


class BootstrapServers(argparse.Action):
    """`--bootstrap-server HOST:PORT[,...]`, its ports checked as the broker checks its own
    (config.check_bootstrap): a bad one ends the tool with one `Error: ...` line, status 2."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, option: Any = None
    ) -> None:
        try:
            check_bootstrap(str(values), str(option or self.dest))
        except InvalidConfig as exc:
            parser.exit(2, f"Error: {exc}\n")
        setattr(namespace, self.dest, values)


def add_bootstrap(parser: Any) -> None:
    parser.add_argument(
        "--bootstrap-server", "-b", default=BOOTSTRAP, help=BOOTSTRAP_HELP, action=BootstrapServers
    )


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Columns padded to their widest value, like Kafka's `prettyPrintTable`."""
    cells = [[str(c) for c in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def fail(message: str, status: int = 1) -> int:
    """Print one `Error: ...` line on stderr and return the exit status to use."""
    print(f"Error: {message}", file=sys.stderr)
    return status


def coded(code: int, message: str) -> str:
    """A broker's error code by Kafka's name and number, then what it means here:
    `UNKNOWN_TOPIC_OR_PARTITION (3): Topic 't' does not exist.`"""
    return f"{error_name(code)}: {message}"


def describe_error(err: Any) -> str:
    """A confluent-kafka error (or the exception carrying one) by its name and code.

    librdkafka's names are Kafka's except for a few abbreviations (UNKNOWN_TOPIC_OR_PART);
    its local errors (negative codes, such as _MSG_TIMED_OUT) start with an underscore.
    """
    if isinstance(err, BaseException) and err.args and hasattr(err.args[0], "name"):
        err = err.args[0]
    if hasattr(err, "name") and hasattr(err, "code"):
        text = f"{err.name()} ({err.code()})"
        detail = err.str()
        return f"{text}: {detail}" if detail and detail != err.name() else text
    return str(err)


def timestamp(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC (`2024-10-25T03:33:01.123Z`); `-` for none (< 0)."""
    if ms < 0:
        return MISSING
    moment = datetime.fromtimestamp(ms / 1000, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def duration(ms: int) -> str:
    """A span of milliseconds for a human: `850ms`, `12.3s`, `4m05s`, `2h07m`, `3d04h`."""
    if ms < 0:
        return MISSING
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{ms / 1000:.1f}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def exits_quietly(run: Callable[[Any], int]) -> Callable[[Any], int]:
    """Make a command behave like a Unix tool when its reader goes away (`... | head`).

    The rest of the output goes to /dev/null (the recipe of Python's `signal` docs), so
    neither the command nor the interpreter's final flush raises BrokenPipeError.
    """

    @functools.wraps(run)
    def wrapper(args: Any) -> int:
        try:
            return run(args)
        except BrokenPipeError:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
            return EXIT_BROKEN_PIPE

    return wrapper


def exit_on_sigterm() -> None:
    """SIGTERM (a CI cancel, `timeout`) ends a long command like Ctrl-C: the brokers, etcd
    and client processes it started are stopped on the way out, not left behind."""
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
