"""Waiting for an event with a time limit, cancellation-safe.

`asyncio.timeout`, not `wait_for`: Python 3.11's `wait_for` swallows a cancellation that
arrives as the awaited event completes, so a task being stopped could go on running.
"""

from __future__ import annotations

import asyncio
import contextlib


async def event_or_timeout(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait until `event` is set or `timeout_s` passes; whether it was set."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout_s):
            await event.wait()
    return event.is_set()
