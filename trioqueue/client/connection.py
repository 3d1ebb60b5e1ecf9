"""The client's way to the broker: a pool of pipelined channels, over TCP or in process.

:func:`open_connection` is the one switch between the two modes; everything built on a
:class:`Connection` (Queue, Worker, QueueEvents, FlowProducer) is the same either way,
and runs under trio or asyncio alike (it is written on anyio; the channels of
:mod:`.channels` hold the one part written per event loop):

- **TCP**: ``pool_size`` sockets, opened on first use, each pipelined (many commands in
  flight, replies matched by ``reqId``). A socket that breaks fails the commands in
  flight on it with :class:`ConnectionLost`; the next command opens a new one,
  retrying with exponential backoff (100 ms doubling to 30 s, with jitter) until
  ``connect_timeout_s``, and logging each failed attempt (``trioqueue.client``), so an
  unreachable broker is never silent. With a token, ``Auth`` is the first frame of
  every socket.
- **Embedded** (trio only): the broker (:class:`~trioqueue.actors.broker.Broker`)
  runs in the caller's trio program and each channel is a broker session fed
  directly, no socket. Messages still go through the CBOR codec both ways, so a caller
  never shares a mutable object with the broker (and the wire's number rules are the
  same). Under asyncio it is refused: the broker is a trio program.

Event subscriptions (``SubscribeEvents``) get a channel of their own; see
:meth:`Connection.subscribe`.

Why a task group: a subscription has a reconnecting reader (on trio also a task
reading its socket), and command timeouts a sweeper task, so the connection is an
async context manager that owns them, and closing it cancels them; a command still
waiting then fails with :class:`ConnectionLost`. (A trio command channel has no task
of its own: its waiting commands read it, see :mod:`.trio_tcp`.)
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc

from ..config import Config
from ..transport.wire.codec import CBOR, MSGPACK
from .channels import (
    EMBEDDED_NEEDS_TRIO,
    Channel,
    EmbeddedChannel,
    backoff_s,
    current_backend,
    log,
    open_tcp,
)
from .errors import ConnectionLost, TrioqueueError, error_for

DEFAULT_PORT = 6789
# How long a lone command polls for its reply before it sleeps (open_connection).
DEFAULT_REPLY_POLL_MS = 0.5

__all__ = ["DEFAULT_PORT", "Connection", "EventStream", "backoff_s", "open_connection"]


class Connection:
    """A pool of channels to one broker. Use :func:`open_connection` to get one."""

    def __init__(self, task_group: anyio.abc.TaskGroup, *, host: str, port: int,
                 token: str | None, pool_size: int, codec: str, connect_timeout_s: float,
                 broker: Any = None, command_timeout_s: float | None = None,
                 reply_poll_ms: float = DEFAULT_REPLY_POLL_MS) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self._task_group = task_group
        self.host = host
        self.port = port
        self.token = token
        self.pool_size = pool_size
        self.codec = CBOR if codec == "cbor" else MSGPACK
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.reply_poll_s = reply_poll_ms / 1000.0
        self.broker = broker
        self.backend = current_backend()
        self._slots: list[Channel | None] = [None] * pool_size
        self._slot_locks = [anyio.Lock() for _ in range(pool_size)]
        self._others: set[Channel] = set()
        self._sweeping = False
        self._failed_attempts = 0  # since the last success (see _open_tcp)
        self.closed = False

    @property
    def embedded(self) -> bool:
        return self.broker is not None

    # ------------------------------------------------------------------ commands

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one command; its reply (``ok`` true), or the typed refusal raised."""
        reply = await self._request({"cmd": cmd, **fields})
        if not reply.get("ok"):
            raise error_for(str(reply.get("error", "")), cmd)
        return reply

    async def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send one command and return its reply as the broker sent it."""
        return await self._request(dict(msg))  # the copy gets the reqId, not ``msg``

    async def _request(self, msg: dict[str, Any]) -> dict[str, Any]:
        channel = self._ready_channel() or await self._channel()
        if self.command_timeout_s is None:
            return await channel.call(msg)
        if not self._sweeping:
            self._sweeping = True
            self._task_group.start_soon(self._sweep)
        return await channel.call(msg, self.command_timeout_s + _hold_s(msg))

    async def _sweep(self) -> None:
        """Fail the commands that outlived their limit (CommandTimeout), a few times a
        limit: a timeout is noticed at most a quarter of ``command_timeout_s`` (and
        never more than 1 s) late."""
        assert self.command_timeout_s is not None
        tick = min(max(self.command_timeout_s / 4, 0.01), 1.0)
        while not self.closed:
            await anyio.sleep(tick)
            now = time.monotonic()
            for channel in list(self._others):
                if channel.expire(now):
                    await channel.aclose()

    def _ready_channel(self) -> Channel | None:
        """The least busy open slot, when every slot is open (the common case, with no
        await); None when one must be opened first."""
        if self.closed:
            raise ConnectionLost("connection closed")
        best: Channel | None = None
        least = -1
        for channel in self._slots:
            if channel is None or channel.broken:
                return None
            load = channel.load
            if best is None or load < least:
                best, least = channel, load
                if not load:
                    break  # an idle one: none is less busy
        return None if best is None or best.stale() else best

    async def _channel(self) -> Channel:
        # The least busy slot, so that a slot held by long-polls does not slow others.
        index = min(range(self.pool_size),
                    key=lambda i: -1 if self._slots[i] is None else self._slots[i].load)  # type: ignore[union-attr]
        channel = self._slots[index]
        if channel is not None and not channel.stale():
            return channel
        async with self._slot_locks[index]:
            channel = self._slots[index]
            if channel is None or channel.stale():
                channel = self._slots[index] = await self.open_channel()
        return channel

    async def open_channel(self, on_event: Any = None) -> Channel:
        """A new channel (retried with backoff until ``connect_timeout_s``), owned by
        this connection and closed with it."""
        if self.closed:
            raise ConnectionLost("connection closed")
        channel: Channel
        if self.broker is not None:
            channel = EmbeddedChannel(self.broker)
        else:
            channel = await self._open_tcp(events=on_event is not None)
        channel.on_event = on_event
        # Forget channels that broke (a reconnecting subscription makes one per outage).
        self._others = {other for other in self._others if not other.broken}
        self._others.add(channel)
        if self.token is not None:
            reply = await channel.call({"cmd": "Auth", "token": self.token})
            if not reply.get("ok"):
                await channel.aclose()
                raise error_for(str(reply.get("error", "")), "Auth")
        return channel

    async def _open_tcp(self, events: bool) -> Channel:
        # The failed attempts are counted on the connection, not per call: the backoff
        # keeps growing across connect_timeout_s windows while the broker stays away,
        # and the first success after any failure says so once.
        last: Exception | None = None
        deadline = time.monotonic() + self.connect_timeout_s
        with anyio.move_on_after(self.connect_timeout_s):
            while True:
                try:
                    channel, reader = await open_tcp(self.host, self.port, self.codec, events,
                                                       self.reply_poll_s)
                    break
                except OSError as exc:
                    last = exc
                    attempt = self._failed_attempts
                    self._failed_attempts += 1
                    # What is waited: the backoff, or what is left of the window.
                    delay = max(min(backoff_s(attempt), deadline - time.monotonic()), 0.0)
                    # Said at once, not after connect_timeout_s: a worker pointed at a
                    # closed port must not look idle.
                    log.warning("cannot connect to %s:%s: %s (attempt %d; retrying in "
                                "%.1f s)", self.host, self.port, _reason(exc), attempt + 1,
                                delay)
                    await anyio.sleep(delay)
            if self._failed_attempts:
                self._failed_attempts = 0
                log.warning("connected to %s:%s", self.host, self.port)
            if reader is not None:
                self._task_group.start_soon(reader)
            return channel
        raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: "
                             f"{_reason(last) if last else 'timed out'}")

    # ------------------------------------------------------------------ events

    @asynccontextmanager
    async def subscribe(self, queue: str) -> AsyncIterator[EventStream]:
        """A stream of the events of ``queue`` on a channel of its own.

        If the broker goes away the stream reconnects with backoff, subscribes again,
        and yields ``{"eventType": "reconnected", "queue": queue}`` so that a reader
        knows events may have been missed in between (the broker keeps none for it).
        """
        stream = EventStream(self, queue)
        async with anyio.create_task_group() as task_group:
            await task_group.start(stream.run)
            try:
                yield stream
            finally:
                task_group.cancel_scope.cancel()
                await stream.close_channel()

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        for channel in list(self._others):
            with anyio.CancelScope(shield=True):
                await channel.aclose()
        self._others.clear()


def _reason(exc: BaseException) -> str:
    """An OSError's words (``[Errno 111] Connection refused``), or its class."""
    return str(exc) or type(exc).__name__


def _hold_s(msg: dict[str, Any]) -> float:
    """How long a command may rightly wait at the broker before answering."""
    if msg.get("cmd") in ("PULL", "PULLB", "WaitJob"):
        timeout = msg.get("timeout")
        if isinstance(timeout, (int, float)) and timeout > 0:
            return float(timeout) / 1000.0
        if msg.get("cmd") == "WaitJob":
            return 30.0  # the broker's default hold
    return 0.0


class EventStream:
    """The events of one queue, as an async iterator of event maps."""

    def __init__(self, connection: Connection, queue: str) -> None:
        self.connection = connection
        self.queue = queue
        self._send, self._receive = anyio.create_memory_object_stream[dict[str, Any]](
            math.inf)
        self._channel: Channel | None = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self._receive.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        attempt = 0
        started = False
        while True:
            try:
                channel = await self.connection.open_channel(on_event=self._send.send_nowait)
                self._channel = channel
                await channel.call({"cmd": "SubscribeEvents", "queue": self.queue})
            except ConnectionLost:
                if not started:
                    raise
                await anyio.sleep(backoff_s(attempt))
                attempt += 1
                continue
            except TrioqueueError:
                raise
            if started:
                self._send.send_nowait({"eventType": "reconnected", "queue": self.queue})
            else:
                started = True
                task_status.started()
            attempt = 0
            await channel.wait_broken()
            await anyio.sleep(backoff_s(attempt))
            attempt += 1

    async def close_channel(self) -> None:
        if self._channel is not None:
            with anyio.CancelScope(shield=True):
                await self._channel.aclose()
        self._send.close()


@asynccontextmanager
async def open_connection(
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    token: str | None = None,
    pool_size: int = 4,
    codec: str = "cbor",
    connect_timeout_s: float = 5.0,
    command_timeout_s: float | None = 30.0,
    reply_poll_ms: float = DEFAULT_REPLY_POLL_MS,
    embedded: bool = False,
    config: Config | None = None,
) -> AsyncIterator[Connection]:
    """Connect to a broker over TCP, or (``embedded=True``, trio only) run one in this
    program.

    ``command_timeout_s`` bounds the wait for any reply (None: no bound); a command that
    holds on purpose (a long-poll ``PULL``/``PULLB``, ``WaitJob``) gets its own
    ``timeout`` on top. Past it the command fails with :class:`CommandTimeout` and its
    socket is dropped (a broker that does not answer one command is not trusted with
    the next). A refusal is never a timeout: it raises its own error at once.

    ``reply_poll_ms`` (TCP only): a command alone in flight on its socket keeps the event
    loop polling for its reply this long before it sleeps, which spares it the wake-up
    from ``epoll_wait`` (a large part of a round trip on loopback; see
    :mod:`.trio_tcp`). Other tasks keep running meanwhile; the price is CPU while a
    command waits, at most this long per command. 0: sleep at once.

    Embedded, the broker uses ``config`` (memory storage when none is given: pass
    ``Config(data_dir=...)`` for an LMDB store), and stops when the block ends, after
    the commands already accepted are applied and committed.
    """
    if codec not in ("cbor", "msgpack"):
        raise ValueError("codec must be 'cbor' or 'msgpack'")
    if (isinstance(reply_poll_ms, bool) or not isinstance(reply_poll_ms, (int, float))
            or not 0 <= reply_poll_ms <= 1000):
        raise ValueError("reply_poll_ms must be a number of milliseconds from 0 to 1000")
    if embedded and current_backend() != "trio":
        raise RuntimeError(EMBEDDED_NEEDS_TRIO)
    raised: BaseException | None = None
    async with anyio.create_task_group() as task_group:
        broker = None
        broker_scope = anyio.CancelScope()
        if embedded:
            from ..actors.broker import Broker

            broker = Broker(config if config is not None else Config(memory=True))

            async def run_broker(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
                with broker_scope:
                    await broker.run(task_status=task_status)

            await task_group.start(run_broker)
            if config is not None and config.auth_tokens and token is None:
                token = config.auth_tokens[0]
        conn = Connection(task_group, host=host, port=port, token=token,
                          pool_size=pool_size, codec=codec,
                          connect_timeout_s=connect_timeout_s, broker=broker,
                          command_timeout_s=command_timeout_s,
                          reply_poll_ms=reply_poll_ms)
        try:
            yield conn
        except BaseException as exc:
            # Raised again below, outside the task group: the caller's own exception
            # must not come back wrapped in an ExceptionGroup by our background tasks'
            # task group.
            raised = exc
        finally:
            with anyio.CancelScope(shield=True):
                await conn.aclose()
                if broker is not None:
                    await broker.settle()
            broker_scope.cancel()
            task_group.cancel_scope.cancel()
    if raised is not None:
        raise raised
