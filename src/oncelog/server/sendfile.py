"""Sending a response whose stored batches are still in their segment files.

Over a plain TCP socket whose transport has nothing queued, the response goes straight to the
socket: each run of byte pieces with one writev, each FileRegion with os.sendfile, so record
bytes go from the page cache to the socket without a copy through Python (Kafka's
FileRecords.writeTo). TCP_CORK holds the small headers back until the records follow, so the
peer gets full segments. When the socket's buffer fills, what is left is handed back: the
connection gives its transport only the next `take` of it (read into memory), and sends the
rest once the transport has drained, so a slow reader costs a transport buffer, not a copy
of the whole answer.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator
from typing import cast

from oncelog.fileio import FileRegion
from oncelog.protocol.codec import Buffer

_CORK = getattr(socket, "TCP_CORK", None)
_IOV_MAX = 1024
Bytes = bytes | bytearray | memoryview


def send_direct(sock: socket.socket, parts: list[Buffer]) -> list[Buffer]:
    """Send `parts` in order without blocking; the parts not (fully) sent, in order."""
    fd = sock.fileno()
    with _corked(sock):
        i = 0
        while i < len(parts):
            part = parts[i]
            if isinstance(part, FileRegion):
                sent = _sendfile(fd, part)
                if sent < part.length:
                    rest = FileRegion(part.fd, part.offset + sent, part.length - sent)
                    return [rest, *parts[i + 1 :]]
                i += 1
                continue
            j = i + 1
            while j < len(parts) and not isinstance(parts[j], FileRegion):
                j += 1
            run = cast(list[Bytes], parts[i:j])
            left = _writev(fd, run)
            if left:
                return [*left, *parts[j:]]
            i = j
    return []


@contextlib.contextmanager
def _corked(sock: socket.socket) -> Iterator[None]:
    if _CORK is None:
        yield
        return
    sock.setsockopt(socket.IPPROTO_TCP, _CORK, 1)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):  # the peer may be gone; the caller finds out
            sock.setsockopt(socket.IPPROTO_TCP, _CORK, 0)


def _sendfile(fd: int, region: FileRegion) -> int:
    """Bytes of `region` sent before the socket's buffer filled (all of them, usually)."""
    sent = 0
    while sent < region.length:
        try:
            n = os.sendfile(fd, region.fd, region.offset + sent, region.length - sent)
        except BlockingIOError:
            break
        if n == 0:
            raise OSError(f"file region {region!r} shrank after {sent} bytes")
        sent += n
    return sent


def _writev(fd: int, run: list[Bytes]) -> list[Bytes]:
    """Write `run`; the unsent rest (empty when all of it went)."""
    while run:
        try:
            n = os.writev(fd, run[:_IOV_MAX])
        except BlockingIOError:
            return run
        run = _skip(run, n)
        if n == 0:
            return run
    return []


def _skip(run: list[Bytes], n: int) -> list[Bytes]:
    """`run` without its first `n` bytes."""
    i = 0
    while i < len(run) and n >= len(run[i]):
        n -= len(run[i])
        i += 1
    rest = run[i:]
    if n and rest:
        rest[0] = memoryview(rest[0])[n:]
    return rest


def take(parts: list[Buffer], budget: int) -> tuple[list[Bytes], list[Buffer]]:
    """The first `budget` bytes of `parts` in memory (regions read), and the rest as it is."""
    head: list[Bytes] = []
    i = 0
    while i < len(parts) and budget > 0:
        part = parts[i]
        if isinstance(part, FileRegion) and part.length > budget:
            first, rest = part.split(budget)
            head.append(first.read())
            return head, [rest, *parts[i + 1 :]]
        data = part.read() if isinstance(part, FileRegion) else part
        head.append(data)
        budget -= len(data)
        i += 1
    return head, parts[i:]
