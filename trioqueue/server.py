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

from .actors.broker import Broker
from .actors.slow_steps import SlowSteps
from .config import Config
from .transport.limits import Shell
from .transport.tcp import serve_tcp
from .transport.websocket import serve_ws

log = logging.getLogger("trioqueue")


class Server:
    def __init__(self, config: Config, broker: Broker | None = None) -> None:
        self.config = config
        self.broker = broker or Broker(config)
        self.tcp_port: int | None = None
        self.ws_port: int | None = None
        self._stop = trio.Event()
        # What every connection shares (limits, broker-wide budgets, their timers).
        self.shell = Shell(config)

    def stop(self) -> None:
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

            async def listen(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                with listeners_scope:
                    async with trio.open_nursery() as nursery:
                        tcp = await nursery.start(
                            partial(serve_tcp, shell=self.shell, handler_nursery=sessions),
                            self.broker, config.host, config.tcp_port)
                        self.tcp_port = tcp[0].socket.getsockname()[1]
                        ws = await nursery.start(
                            partial(serve_ws, shell=self.shell, handler_nursery=sessions),
                            self.broker, config.host, config.ws_port)
                        self.ws_port = ws.port
                        task_status.started()

            await root.start(listen)
            log.info(
                "trioqueue ready: tcp %s:%s ws %s:%s data %s fsync %s auth %s",
                config.host, self.tcp_port, config.host, self.ws_port,
                "memory" if config.memory else config.data_dir, config.fsync,
                auth_state(config),
            )
            task_status.started(self)
            await self._stop.wait()
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


def auth_state(config: Config) -> str:
    """Auth as the ready line says it: ``on (N tokens)`` or ``off``."""
    count = len(config.auth_tokens)
    if not count:
        return "off"
    return f"on ({count} token{'s' if count > 1 else ''})"


def tune_gc(config: Config) -> None:
    """Make the cyclic garbage collector run less often (standalone broker only).

    Every job is a few GC-tracked objects; with the default gen-0 threshold (700) a bulk
    push spends about a third of its time in collections that find nothing, because
    jobs live until they finish. The broker creates no reference cycles on its hot
    paths, so a larger threshold only delays the rare cyclic garbage. An embedded
    broker leaves the host program's GC settings alone.
    """
    if config.gc_gen0_threshold > 0:
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(config.gc_gen0_threshold, gen1, gen2)


async def serve(config: Config, broker: Broker | None = None) -> None:
    """Run until SIGINT or SIGTERM (``broker``: a prepared one, e.g. on a faulty store)."""
    tune_gc(config)
    if config.log_slow_step_ms > 0:
        trio.lowlevel.add_instrument(SlowSteps(config.log_slow_step_ms))
    server = Server(config, broker)
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(server.run)
            # What recovery loaded lives long: keep it out of every later collection.
            gc.freeze()
            async for signum in signals:
                log.info("received %s", signal.Signals(signum).name)
                server.stop()
                break
    log.info("trioqueue stopped")
