"""The standalone broker: the broker core plus its TCP and WebSocket listeners.

One root nursery holds everything. On SIGINT/SIGTERM (or cancellation) the listeners
stop first, so no new command arrives; commands already accepted are drained; then the
broker is cancelled and its own ``finally`` commits and answers the last batch under a
shielded deadline before the store closes.
"""

from __future__ import annotations

import gc
import logging
import signal
from functools import partial
from typing import Any

import trio

from ..actors.broker import Broker
from ..actors.slow_steps import SlowSteps
from ..cluster.member import Joining
from ..config import Config
from ..core.broker_events import broker_event
from ..core.clock import Clock
from ..storage.port import Storage
from ..transport.context import ListenerContext
from ..transport.http.front import HttpPort, serve_http
from ..transport.limits import Shell
from ..transport.tcp.listener import serve_tcp
from .gc_passes import FullCollections
from .process_heap import keep_freed_heap

log = logging.getLogger("trioqueue")


def new_broker(config: Config, storage: Storage | None = None,
               clock: Clock | None = None) -> Broker:
    """The broker ``config`` describes: with ``cluster``, a member of its cluster
    (trioqueue.cluster, wired in here, above the broker, which knows of no cluster)."""
    joining = Joining(config) if config.cluster else None
    return Broker(config, storage, clock, joining=joining)


class Server:
    def __init__(self, config: Config, broker: Broker | None = None) -> None:
        self.config = config
        self.broker = broker or new_broker(config)
        self.tcp_port: int | None = None
        self.ws_port: int | None = None  # the HTTP port (WebSocket, REST, SSE)
        self.http: HttpPort | None = None
        self._stop = trio.Event()
        self._stop_reason = "stop"
        # What every connection shares (limits, broker-wide budgets, their timers).
        self.shell = Shell(config)
        self.shell.graveyard = self.broker.dismantler.graveyard
        # Run by serve() only, as tune_gc is: an embedded broker leaves the GC alone.
        self.collections = FullCollections(config.gc_full_interval_s,
                                           config.gc_full_after_young_objects)

    def stop(self, reason: str = "stop") -> None:
        """Begin the shutdown; ``reason`` (the signal's name) is told to the dashboard
        (``server:shutdown``) while the connections are still open."""
        self._stop_reason = reason
        self._stop.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        config = self.config
        async with trio.open_nursery() as root:
            await root.start(self.broker.run)
            sessions_scope = trio.CancelScope()
            listeners_scope = trio.CancelScope()

            sessions_closed = trio.Event()

            async def hold_sessions(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                # Connections live here, apart from the accept loops, so shutdown can
                # stop accepting first and close connections only after draining.
                try:
                    with sessions_scope:
                        async with trio.open_nursery() as sessions:
                            task_status.started(sessions)
                            await trio.sleep_forever()
                finally:
                    sessions_closed.set()

            sessions: trio.Nursery = await root.start(hold_sessions)
            # The connections' deadlines run beside them, and stop with them.
            await sessions.start(self.shell.timers.run)

            context = listener_context(self.broker)

            async def listen(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                with listeners_scope:
                    async with trio.open_nursery() as nursery:
                        tcp = await nursery.start(
                            partial(serve_tcp, shell=self.shell, handler_nursery=sessions),
                            context, config.host, config.tcp_port)
                        self.tcp_port = tcp[0].socket.getsockname()[1]
                        ws = await nursery.start(
                            partial(serve_http, shell=self.shell, handler_nursery=sessions),
                            context, config.host, config.ws_port)
                        self.http = ws
                        self.ws_port = ws.port
                        task_status.started()

            await root.start(listen)
            await self.broker.join_cluster(self.tcp_port or config.tcp_port)  # (a cluster)
            log.info(
                "trioqueue ready: tcp %s:%s ws %s:%s data %s fsync %s auth %s",
                config.host, self.tcp_port, config.host, self.ws_port,
                "memory" if config.memory else (
                    self.broker.storage.location or config.data_dir),
                config.fsync,
                auth_state(config),
            )
            task_status.started(self)
            self._tell_started()
            await self._stop.wait()
            self.broker.router.announce([broker_event(
                "server:shutdown", self.broker.clock.now_ms(), signal=self._stop_reason)])
            # Its frames leave on the open connections, after what each had queued.
            with trio.move_on_after(config.shutdown_notice_s):
                await self.shell.senders.sent()
            # 1. no new connections; 2. commands already accepted are applied and their
            # replies sent on the still-open connections; 3. connections close, which
            # hands their un-renewed jobs back to the queues (uncharged), and those
            # releases are applied too; 4. the broker commits the last batch and stops.
            log.info("shutting down: closing listeners")
            listeners_scope.cancel()
            await self.broker.settle()
            sessions_scope.cancel()
            with trio.move_on_after(config.shutdown_grace_s):
                await sessions_closed.wait()  # every connection has handed its jobs back
            await self.broker.settle()
            root.cancel_scope.cancel()


    def _tell_started(self) -> None:
        """``server:started`` and ``server:recovered`` (what recovery brought back), as
        bunqueue tells them at startup: they reach only who listens already (in a
        cluster, the subscribers of brokers streaming this one's events)."""
        router = self.broker.router
        now = self.broker.clock.now_ms()
        router.announce([
            broker_event("server:started", now, tcpPort=self.tcp_port, httpPort=self.ws_port),
            broker_event("server:recovered", now, queues=len(router.actors),
                         jobs=router.live_jobs)])


def listener_context(broker: Broker) -> ListenerContext:
    """What the listeners use of ``broker`` (transport/context.py), not the broker."""
    return ListenerContext(session_host=broker, connection_slots=broker.connections,
                           open_connections=broker.open_connections, stats=broker.router,
                           now_ms=lambda: broker.clock.now_ms())


def auth_state(config: Config) -> str:
    """Auth as the ready line says it: ``on (N tokens)`` or ``off``."""
    count = len(config.auth_tokens)
    if not count:
        return "off"
    return f"on ({count} token{'s' if count > 1 else ''})"


# A threshold the collector's older generations never reach: only the young one runs.
_NEVER = 1 << 30


def tune_gc(config: Config) -> bool:
    """Collect only the young generation (standalone broker only).

    Every live job is a few GC-tracked objects. A collection of an older generation
    traverses all of them: with a million jobs, a full collection holds the event loop
    for about a second, and Python's default policy runs one each time the survivors
    grow by a quarter. A young collection costs what was allocated since the last one,
    and more per object the more jobs the queues hold (each young object's referents
    are looked at, and at a million jobs those are cache misses): so
    ``gc_gen0_threshold`` is kept low (2,000 by default), making each young collection
    short inside the slice it falls in, for a little more collection time in all. What
    survives a young collection moves to the middle generation, which only the passes of
    ``gc_passes.FullCollections`` collect; each freezes what survived it, so nothing is
    traversed by more than one pass.

    The broker's paths make no reference cycles: what they drop is freed by reference
    counting, and ``tests/test_server_gc.py`` checks that a full collection after the
    broker's paths (connections that close or are closed, errors, flows, WebSocket)
    finds nothing. Cyclic garbage from elsewhere (a crashed actor's traceback, a
    library) is freed by the passes of :class:`~trioqueue.server.gc_passes.FullCollections`
    every ``gc_full_interval_s``, which ``serve`` runs when this returns True. An
    embedded broker leaves the host program's GC settings alone;
    ``gc_gen0_threshold = 0`` keeps Python's own policy (and returns False).
    """
    if config.gc_gen0_threshold > 0:
        gc.set_threshold(config.gc_gen0_threshold, _NEVER, _NEVER)
        return True
    return False


async def serve(config: Config, broker: Broker | None = None) -> None:
    """Run until SIGINT or SIGTERM (``broker``: a prepared one, e.g. on a faulty store)."""
    tuned = tune_gc(config)
    keep_freed_heap(config.heap_keep_bytes)
    if config.log_slow_step_ms > 0:
        trio.lowlevel.add_instrument(SlowSteps(config.log_slow_step_ms))
    server = Server(config, broker)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            if config.idle_spin_ms > 0:
                nursery.start_soon(server.shell.spin.run)
            # What recovery loaded lives long: keep it out of every later collection.
            gc.freeze()
            if tuned:  # the older generations, collected a pass at a time
                nursery.start_soon(server.collections.run)
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                server.stop(signal.Signals(signum).name)
                server.shell.spin.close()
                server.collections.close()
                break
    log.info("trioqueue stopped")
