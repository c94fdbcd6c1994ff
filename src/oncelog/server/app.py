"""The composition root: builds the broker from its config and runs it on asyncio.

Owns the listener, the connections, the purgatory timers and the periodic tasks: the
coordinators' timeouts and expiries, idle connections, and the log's housekeeping
(`log_housekeeping.py`: retention, flushing rolled segments, checkpoints, the log cleaner,
whose rounds run in a worker process, `log.cleaner.threads` of them, since a cleaning
decodes records in Python and would otherwise take the event loop's share of the GIL).
SIGTERM and SIGINT stop it cleanly: connections are closed, logs flushed, the clean-shutdown
marker written.

Start-up goes port first, then the log dirs' locks, then the disk: a taken port or a log dir
in use stops the broker before it writes anything. Every start-up failure is one line on
stderr and exit status 1, never a traceback (run with --log-level DEBUG to see one).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import sys
import threading
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Protocol

from oncelog.broker.assembly import ServerHooks, assemble
from oncelog.broker.authz import load_authorizer
from oncelog.broker.context import BrokerContext, Node
from oncelog.broker.dispatcher import Dispatcher
from oncelog.broker.metrics import BrokerMetrics
from oncelog.broker.partition import Partition
from oncelog.broker.purgatory import Delayed, Purgatory
from oncelog.broker.quotas import image_quotas
from oncelog.clock import Clock, SystemClock
from oncelog.config import BrokerConfig, Listener
from oncelog.coordinator.txn import Marker
from oncelog.errors import KafkaError
from oncelog.security.credentials import ScramCredentials
from oncelog.server import loop_monitor
from oncelog.server.connection import Connection
from oncelog.server.connection_quotas import ConnectionQuotas
from oncelog.server.listeners import ListenerSetup, authenticator_factory, setup_listeners
from oncelog.server.log_housekeeping import LogHousekeeping
from oncelog.server.request_memory import RequestMemory
from oncelog.server.startup import StartupError
from oncelog.server.tls_accept import BACKLOG, TlsAcceptor
from oncelog.storage.log_manager import LogDirError, lock_log_dirs
from oncelog.types import TopicPartition

if TYPE_CHECKING:
    from oncelog.server.cluster import ClusterRuntime
    from oncelog.server.marker_sender import TxnMarkerSender

log = logging.getLogger(__name__)

CONNECTIONS_MAX_IDLE_MS = 600_000
EXIT_STARTUP_FAILED = 1


def bind_listener(listener: Listener, receive_buffer: int = -1) -> socket.socket:
    """Bind the listener's address without listening yet: a taken port is found before the
    disk is touched, and clients are refused (not left waiting) until the broker serves."""
    where = f"{listener.host}:{listener.port}"
    return bind_address(listener.host, listener.port, where, receive_buffer)


def bind_address(host: str, port: int, where: str, receive_buffer: int = -1) -> socket.socket:
    """Bind `host:port` (not yet listening); StartupError naming `where` if it cannot be.
    `receive_buffer` (socket.receive.buffer.bytes, -1: the OS's autotuned default) is set on
    the listening socket, as Kafka does: accepted sockets inherit it, and it must be in place
    before their handshake, which fixes the window scale they offer."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
    try:
        # as asyncio's create_server: a restart may rebind while old connections linger
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if receive_buffer != -1:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
    return sock


def bind_listeners(config: BrokerConfig) -> list[socket.socket]:
    """Bind every listener of `listeners` (see bind_listener); all or none."""
    socks: list[socket.socket] = []
    receive_buffer = config.get_int("socket.receive.buffer.bytes")
    try:
        for listener in config.listeners:
            socks.append(bind_listener(listener, receive_buffer))
    except StartupError:
        _close_all(socks)
        raise
    return socks


def _complete(op: Delayed, response: object) -> None:
    """Hand a completed operation's response to its connection, and drop the callback: it
    refers back to the operation (the connection compares it with the one it waits for), a
    cycle that only the GC's oldest generation would free. A waiting Fetch or acks=all
    Produce leaves some 45 objects in such a cycle; at a few hundred a second they were what
    made full collections run every second, 70-230 ms each (bench/latency.py, issue 15)."""
    done, op.on_done = op.on_done, None
    if done is not None:
        done(response)


def _close_all(socks: Sequence[socket.socket]) -> None:
    for sock in socks:
        sock.close()


class BrokerServer:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock | None = None,
        sock: socket.socket | Sequence[socket.socket] | None = None,
    ) -> None:
        """`sock`: the listeners already bound by `bind_listeners` (else bound in start), in
        the order of `listeners`."""
        self.config = config
        self._socks: list[socket.socket] | None = (
            None if sock is None else [sock] if isinstance(sock, socket.socket) else list(sock)
        )
        #: The SCRAM credentials the SASL listeners check logins against.
        self.credentials = ScramCredentials()
        #: Bound port of each listener, by name (in the order of `listeners`).
        self.ports: dict[str, int] = {}
        self.clock = clock or SystemClock()
        self.purgatory = Purgatory()
        self._to_wake: set[Hashable] = set()
        clustered = bool(config.get("etcd.connect"))
        # The wiring diagram is broker/assembly.py; these are what reaches this loop.
        self.core = assemble(
            config,
            self.clock,
            ServerHooks(
                wake=self._on_append,
                group_timers_changed=self._schedule_group_timer,
                segment_rolled=self._rolled,
                checkpoint_soon=self._checkpoint_files_soon,
                isr_change=self._propose_isr,
                send_markers=self._send_markers if clustered else None,
            ),
        )
        self.replicas = self.core.replicas
        self.housekeeping = LogHousekeeping(self.replicas.logs)
        self.groups = self.core.groups
        self.txns = self.core.txns
        #: A broker of an etcd cluster (etcd.connect set), else None: a single node, which
        #: never imports the etcd client.
        self.cluster: ClusterRuntime | None = None
        self.markers: TxnMarkerSender
        if clustered:
            from oncelog.server.cluster import ClusterRuntime

            self.cluster = ClusterRuntime(
                config, self.replicas, self._on_append, self._leadership_moved
            )
            from oncelog.server.marker_sender import TxnMarkerSender

            self.markers = TxnMarkerSender(
                self.cluster.view,
                config.get_int("replica.socket.timeout.ms") / 1000,
                f"broker-{config.node_id}-txn-marker-sender",
                config.get_int("socket.receive.buffer.bytes"),
            )
            self.markers.security = self.cluster.channel_security
        self._group_timer: asyncio.TimerHandle | None = None
        self._group_timer_at = 0
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._expiry_at = 0
        self.connections: set[Connection] = set()
        #: Bytes of received, unhandled requests (queued.max.request.bytes).
        self.request_memory = RequestMemory(self.config.queued_max_request_bytes)
        self.quotas = ConnectionQuotas.from_config(self.config)
        self._servers: list[asyncio.Server] = []
        self._tls_acceptors: list[TlsAcceptor] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._stopped = asyncio.Event()
        self.port = 0
        self.dispatcher: Dispatcher | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = -1  # the loop's thread once started (`_on_append`)

    def _watch_connections(self, metrics: BrokerMetrics) -> None:
        """The connection gauges, read at scrape time."""
        metrics.count_connections(lambda: len(self.connections))
        memory = self.request_memory
        metrics.watch_request_memory(lambda: memory.used, lambda: memory.waiting)

    def _load_credentials_and_quotas(self, context: BrokerContext) -> None:
        """SCRAM credentials and client quotas: the image's on a single node, etcd's
        (watched) in a cluster."""
        if self.cluster is None:
            self.credentials = ScramCredentials.from_json(self.replicas.metadata.scram)
            context.quotas.replace_all(image_quotas(self.replicas.metadata.client_quotas))
        else:
            self.cluster.scram = self.credentials
            self.cluster.attach_client_quotas(context.quotas)
        context.scram = self.credentials

    async def start(self) -> int:
        """Recover the logs, bind the listener and start housekeeping; return the port."""
        loop = self._loop = self.housekeeping.loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        setups = setup_listeners(self.config)  # a bad TLS/SASL setting stops us before the disk
        await loop.run_in_executor(None, self.replicas.startup)
        if self.cluster is None:
            # In a cluster the coordinators' partitions are loaded where they are led.
            await loop.run_in_executor(None, self.groups.startup)
            await loop.run_in_executor(None, self.txns.startup)
        if self._socks is None:
            self._socks = bind_listeners(self.config)
        endpoints: list[tuple[str, str, int]] = []
        for setup, sock in zip(setups, self._socks, strict=True):
            listener = setup.listener
            bound = sock.getsockname()[1]
            self.ports[listener.name] = bound
            advertised = self.config.advertised_for(listener.name)
            host = advertised.host if advertised else listener.host
            port = advertised.port if advertised and advertised.port else bound
            if host in ("0.0.0.0", "", "::"):
                host = "127.0.0.1"
            endpoints.append((listener.name, host, port))
        self.port = self.ports[setups[0].name]
        inter_broker = self.config.inter_broker_listener_name
        _, host, port = next(ep for ep in endpoints if ep[0] == inter_broker)
        node = Node(self.config.node_id, host, port, tuple(endpoints))
        context = self.core.context(node)
        # A single node keeps its ACLs in the metadata image; a cluster's come from etcd.
        context.authorizer = load_authorizer(context, from_image=self.cluster is None)
        self._load_credentials_and_quotas(context)
        self._watch_connections(context.metrics)
        if self.cluster is not None:
            context.metrics.controller = self.cluster.controller
        if self.cluster is not None:
            # Joined before serving: a client never sees a broker with an empty cluster view,
            # and peers find it once it listens.
            context.cluster = self.cluster.view
            context.cluster_ops = self.cluster
            self.cluster.authorizer = context.authorizer
            await self.cluster.start(node)
        self.dispatcher = Dispatcher(context)
        await self._serve(setups, self._socks)
        self._schedule_group_timer()
        self._tasks = [
            asyncio.create_task(
                self._every(
                    self.config.get_int(
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms"
                    )
                    / 1000,
                    self._transaction_timeouts,
                )
            ),
            asyncio.create_task(self._every(10.0, self._close_idle)),
            asyncio.create_task(
                self._every(
                    self.config.get_int("offsets.retention.check.interval.ms") / 1000,
                    self._expire_offsets,
                )
            ),
        ]
        self._tasks += [
            asyncio.create_task(self._every(seconds, job))
            for seconds, job in self.housekeeping.periodic(self.config)
        ]
        return self.port

    async def _serve(self, setups: list[ListenerSetup], socks: list[socket.socket]) -> None:
        """Accept on every listener; a TLS one accepts by itself, to ask the connection
        quotas before the handshake (server/tls_accept.py)."""
        loop = asyncio.get_running_loop()
        for setup, sock in zip(setups, socks, strict=True):
            factory = self._connection_factory(setup)
            if setup.ssl_context is not None:
                acceptor = TlsAcceptor(sock, setup.ssl_context, factory)
                acceptor.start()
                self._tls_acceptors.append(acceptor)
            else:
                self._servers.append(await loop.create_server(factory, sock=sock, backlog=BACKLOG))

    def _connection_factory(self, setup: ListenerSetup) -> Callable[[], Connection]:
        new_authenticator = (
            authenticator_factory(
                setup,
                self.credentials,
                self.config.get_int("connections.max.reauth.ms"),
                self.clock.monotonic_ms,
            )
            if setup.sasl
            else None
        )
        max_auth_frame = self.config.get_int("sasl.server.max.receive.size")
        failed_auth_delay_ms = self.config.get_int("connection.failed.authentication.delay.ms")
        send_buffer = self.config.get_int("socket.send.buffer.bytes")

        def new_connection() -> Connection:
            assert self.dispatcher is not None
            conn = Connection(
                self.dispatcher,
                max_frame_bytes=self.config.socket_request_max_bytes,
                max_queued=self.config.queued_max_requests,
                on_pending=self._watch,
                on_close=self._connection_closed,
                now_ms=self.clock.monotonic_ms,
                listener_name=setup.name,
                authenticator=new_authenticator() if new_authenticator else None,
                max_auth_frame_bytes=max_auth_frame,
                failed_auth_delay_ms=failed_auth_delay_ms,
                memory=self.request_memory,
                admit=self._admit,
                send_buffer=send_buffer,
            )
            self.connections.add(conn)
            return conn

        return new_connection

    def _admit(self, conn: Connection) -> str | None:
        """Kafka's connection quotas; why `conn` is refused, or None (counted then)."""
        refused = self.quotas.admit(conn.listener_name, conn.client_ip)
        if refused is None:
            return None
        setting, why = refused
        if self.dispatcher is not None:
            self.dispatcher.broker.metrics.record_rejected_connection(setting)
        return f"{why} ({setting})"

    def _connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if conn.admitted:
            conn.admitted = False
            self.quotas.release(conn.listener_name, conn.client_ip)

    def _propose_isr(self, replica: Partition, isr: frozenset[int]) -> None:
        """A leader's ISR change, written by the cluster runtime (only a clustered broker
        has leaders with followers)."""
        if self.cluster is not None:
            self.cluster.propose_isr(replica, isr)

    def _send_markers(
        self, txn_id: str, markers: list[Marker], state_tp: TopicPartition, decided_below: int
    ) -> None:
        """Markers go out once the transaction's state partition is replicated past its
        decision, by this broker still leading it in the same epoch. The wait is in the
        purgatory, on the partition's high watermark: the markers leave on the move that
        covers the decision, not on a poll's next tick."""
        replica = self.replicas.replicas_by_tp.get(state_tp)
        epoch = replica.leader_epoch if replica is not None else -1

        def replicated() -> bool | None:
            return self.replicas.replicated_to(state_tp, decided_below, epoch)

        def attempt(force: bool) -> bool | None:
            ready = replicated()
            if ready:
                return True
            return False if ready is None or force else None

        def send(ready: object) -> None:
            if ready is not True:  # the leadership moved, or the followers did not follow
                self.txns.markers_sent(txn_id, False)
                return
            self.txns.decision_replicated(txn_id)
            self.markers.send(
                txn_id, markers, self.txns.markers_sent, lambda: replicated() is not None
            )

        ready = attempt(False)
        if ready is not None:
            send(ready)
            return
        deadline = self.clock.monotonic_ms() + int(self.markers.timeout_s * 1000)
        self._watch(Delayed(attempt, deadline, (state_tp,), on_done=send))

    def _leadership_moved(self, tp: TopicPartition, leader: bool) -> None:
        """The coordinators load or unload the internal partitions this broker leads."""
        self.groups.on_leadership(tp, leader)
        self.txns.on_leadership(tp, leader)
        self._schedule_group_timer()

    # -- purgatory ---------------------------------------------------------------------------

    def _watch(self, op: Delayed) -> None:
        self.purgatory.watch(op)
        self._schedule_expiry(op.deadline_ms)

    def _schedule_expiry(self, deadline_ms: int) -> None:
        """One timer, for the purgatory's earliest deadline (a sooner one replaces it). Not
        a timer per waiting request: an acks=all Produce's 30 s timer outlived its request by
        seconds, and thousands of them (with their handles) aged into the oldest GC
        generation (issue 15)."""
        if self._expiry_timer is not None:
            if self._expiry_at <= deadline_ms:
                return
            self._expiry_timer.cancel()
        delay = max(0.0, (deadline_ms - self.clock.monotonic_ms()) / 1000)
        self._expiry_at = deadline_ms
        self._expiry_timer = asyncio.get_running_loop().call_later(delay, self._expire)

    def _expire(self) -> None:
        self._expiry_timer = None
        try:
            for op, response in self.purgatory.expire(self.clock.monotonic_ms()):
                _complete(op, response)
        finally:
            deadline = self.purgatory.next_deadline()
            if deadline is not None:
                self._schedule_expiry(deadline)

    def _on_append(self, keys: Sequence[Hashable]) -> None:
        """Wake the operations watching `keys` on the loop's next turn, not in the middle of
        the handler that appended: a request being handled registers its own wait first, so
        an append made while it is handled (say, a produce its follower fetch released) is
        never missed by it (it would otherwise sleep until replica.fetch.wait.max.ms)."""
        loop = self._loop
        # Start-up work in a thread: nobody is waiting yet. (A thread check, not
        # `get_running_loop`, which costs a getpid system call per append.)
        if loop is None or threading.get_ident() != self._loop_thread:
            self._wake(keys)
            return
        if not self._to_wake:
            loop.call_soon(self._wake_pending)
        self._to_wake.update(keys)

    def _wake_pending(self) -> None:
        keys, self._to_wake = self._to_wake, set()
        self._wake(list(keys))

    def _wake(self, keys: Sequence[Hashable]) -> None:
        for op, response in self.purgatory.on_append(keys):
            _complete(op, response)

    # -- group coordinator timers ------------------------------------------------------------

    def _schedule_group_timer(self) -> None:
        """Arm one timer for the coordinator's next deadline (sooner ones replace it)."""
        deadline = self.groups.coordinator.next_deadline()
        if deadline is None:
            return
        if self._group_timer is not None:
            if self._group_timer_at <= deadline:
                return
            self._group_timer.cancel()
        delay = max(0.0, (deadline - self.clock.monotonic_ms()) / 1000)
        self._group_timer_at = deadline
        self._group_timer = asyncio.get_running_loop().call_later(delay, self._group_tick)

    def _group_tick(self) -> None:
        self._group_timer = None
        try:
            self.groups.tick()
        except Exception:
            log.exception("group coordinator timers failed")
        self._schedule_group_timer()

    # -- housekeeping ------------------------------------------------------------------------

    async def _transaction_timeouts(self) -> None:
        self.txns.tick()

    async def _every(self, seconds: float, job: Callable[[], Awaitable[None]]) -> None:
        while True:
            await asyncio.sleep(seconds)
            try:
                await job()
            except Exception:
                log.exception("housekeeping job %s failed", getattr(job, "__name__", job))

    def _rolled(self) -> None:
        """A partition rolled (storage's hook, on the loop or a start-up thread)."""
        self.housekeeping.rolled()

    def _checkpoint_files_soon(self) -> None:
        """Storage asks for the checkpoint files (after a DeleteRecords)."""
        self.housekeeping.checkpoint_files_soon()

    async def _expire_offsets(self) -> None:
        removed = self.groups.expire_offsets()
        if removed:
            log.info("expired %d offset/group records (offsets.retention.minutes)", removed)

    async def _close_idle(self) -> None:
        now = self.clock.monotonic_ms()
        for conn in list(self.connections):
            if now - conn.last_active_ms > CONNECTIONS_MAX_IDLE_MS:
                conn.close("idle longer than connections.max.idle.ms")

    # -- lifecycle ---------------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM and SIGINT stop the broker cleanly; installed before the ready line, so
        a signal sent as soon as it is read is never taken by the default action."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError):
                loop.add_signal_handler(sig, self._stopped.set)

    async def serve_until_stopped(self) -> None:
        self.install_signal_handlers()
        # Latency diagnostics (loop lag, stalls, GC pauses) when ONCELOG_LOOP_MONITOR is set.
        monitor = loop_monitor.from_environment()
        if monitor is not None:
            monitor.start()
        try:
            await self._stopped.wait()
            await self.stop()
        finally:
            if monitor is not None:
                monitor.stop()

    def request_stop(self) -> None:
        self._stopped.set()

    async def stop(self) -> None:
        log.info("shutting down")
        for listening in self._servers:
            listening.close()
        for acceptor in self._tls_acceptors:
            acceptor.close()
        for task in self._tasks:
            task.cancel()
        if self._group_timer is not None:
            self._group_timer.cancel()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
        for conn in list(self.connections):
            conn.abort()
        self.housekeeping.stop()
        if self.cluster is not None:
            await self.markers.stop()
            await self.cluster.stop()
        self.replicas.shutdown()
        log.info("shut down cleanly")


class Companion(Protocol):
    """A server run beside the broker on its loop (the HTTP listener, composed by `oncelog
    serve`): its port is bound with the broker's, before the disk is touched; it starts once
    the broker serves, adds to the ready line, and stops after the broker."""

    def bind(self) -> None:
        """Bind the port now; StartupError (one line) when it cannot."""

    def close(self) -> None:
        """Release what bind took, when the broker does not start."""

    async def start(self, server: BrokerServer) -> str:
        """Serve; return what the ready line adds (", " joins it), e.g. the URL."""

    async def stop(self) -> None: ...


def run(config: BrokerConfig, companions: Sequence[Companion] = ()) -> int:
    """Run a broker until SIGTERM/SIGINT; print one line when ready, or one line on stderr
    and return 1 when it cannot start."""
    try:
        sock = bind_listeners(config)
        try:
            for companion in companions:
                companion.bind()
            locks = lock_log_dirs(config.log_dirs)
        except (LogDirError, StartupError) as exc:
            _close_all(sock)
            for companion in companions:
                companion.close()
            raise StartupError(str(exc)) from exc
    except StartupError as exc:
        return _startup_failed(exc)

    async def main() -> None:
        try:
            server = BrokerServer(config, sock=sock)
            port = await server.start()
            notes = [await companion.start(server) for companion in companions]
        except StartupError:
            raise
        except (OSError, ValueError, KafkaError) as exc:
            raise StartupError(f"start-up failed: {exc}") from exc
        except Exception as exc:
            raise StartupError(f"start-up failed: {type(exc).__name__}: {exc}") from exc
        server.install_signal_handlers()
        _freeze_startup_objects()
        listener = config.listener
        dirs = ",".join(str(d) for d in config.log_dirs)
        notes[:0] = _listeners_note(config, server.ports)
        print(
            f"oncelog broker {config.node_id} ready on {listener.host}:{port} (log.dirs={dirs})"
            + "".join(f", {note}" for note in notes),
            flush=True,
        )
        await server.serve_until_stopped()
        for companion in companions:
            await companion.stop()

    try:
        try:
            import uvloop

            uvloop.run(main())
        except ImportError:
            asyncio.run(main())
    except StartupError as exc:
        return _startup_failed(exc)
    except KeyboardInterrupt:  # Ctrl-C before the signal handlers are installed
        return _startup_failed(StartupError("interrupted while starting"))
    finally:
        for lock in locks:
            lock.release()
    sys.stdout.flush()
    return 0


def _freeze_startup_objects() -> None:
    """Move what start-up built (modules, kio's message classes, configs, loaded logs) out of
    the GC's reach: a full collection then walks only objects made while serving, not the
    ~60,000 of start-up again each time (20-60 ms a collection here). What start-up built
    lives as long as the broker, so leaving it out costs nothing (Instagram's gc.freeze)."""
    gc.collect()
    gc.freeze()


def _listeners_note(config: BrokerConfig, ports: dict[str, int]) -> list[str]:
    """With several listeners, the ready line names every one with its bound port (port 0
    picks one); the first one's stays where it always was."""
    if len(ports) < 2:
        return []
    return [
        "listeners="
        + ",".join(f"{item.name}://{item.host}:{ports[item.name]}" for item in config.listeners)
    ]


def _startup_failed(exc: StartupError) -> int:
    """One line on stderr; at DEBUG, first the traceback of what caused it (the OSError
    behind a taken port, say), which the one line names only by its message."""
    log.debug("start-up failed", exc_info=exc)
    print(f"oncelog: {exc}", file=sys.stderr, flush=True)
    return EXIT_STARTUP_FAILED
