"""The one error a broker's start-up reports: its message is the line the broker prints."""

from __future__ import annotations


class StartupError(Exception):
    """The broker cannot start; the message is the one line it prints."""
