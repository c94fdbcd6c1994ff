"""A TLS listener accepts its connections itself, so its quotas come before the handshake.

Kafka's acceptor counts a connection against `max.connections.per.ip` and `max.connections`
as it accepts the socket, before any TLS. asyncio's `create_server(ssl=...)` tells a protocol
of its connection only once the handshake is done: a client over the limit still cost a
handshake, and connections that never finished one (asyncio gives them 60 s) were not
counted at all. (A plain protocol that pauses and then calls `start_tls` cannot do it under
uvloop, which starts reading after `connection_made` whatever it paused, and the ClientHello
would be lost.) So a TLS listener's loop accepts each socket, asks the quotas with its
address, and only then hands it to `connect_accepted_socket` for the handshake.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Callable

from oncelog.server.connection import Connection

log = logging.getLogger(__name__)

#: After an accept failed for want of descriptors or memory, as asyncio's servers wait.
ACCEPT_RETRY_S = 1.0
#: The listen backlog, as the broker's plain listeners have.
BACKLOG = 1024


class TlsAcceptor:
    def __init__(
        self,
        listening: socket.socket,
        context: ssl.SSLContext,
        new_connection: Callable[[], Connection],
    ) -> None:
        self._listening = listening
        self._context = context
        self._new_connection = new_connection
        self._handshakes: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._listening.setblocking(False)
        self._listening.listen(BACKLOG)
        self._task = asyncio.get_running_loop().create_task(self._accept())

    def close(self) -> None:
        """Stop accepting and drop the handshakes in progress (served connections are the
        broker's to close)."""
        if self._task is not None:
            self._task.cancel()
        for task in list(self._handshakes):
            task.cancel()
        self._listening.close()

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                client, address = await loop.sock_accept(self._listening)
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue
            except OSError as exc:  # EMFILE, ENOBUFS and the like: the next may work
                log.warning("accepting a TLS connection failed: %s", exc)
                await asyncio.sleep(ACCEPT_RETRY_S)
                continue
            conn = self._new_connection()
            if not conn.admit(address):  # refused: logged and counted
                client.close()
                conn.connection_lost(None)
                continue
            task = loop.create_task(self._handshake(client, conn))
            self._handshakes.add(task)
            task.add_done_callback(self._handshakes.discard)

    async def _handshake(self, client: socket.socket, conn: Connection) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(lambda: conn, client, ssl=self._context)
        except asyncio.CancelledError:
            client.close()
            conn.connection_lost(None)
            raise
        except (OSError, ssl.SSLError, TimeoutError, EOFError) as exc:
            log.debug("TLS handshake with %s failed: %s", conn.peer, exc)
            client.close()
            conn.connection_lost(exc)
