"""The client's way to the broker: a pool of pipelined channels, over TCP or in process.

:func:`open_connection` is the one switch between the two modes; everything built on a
:class:`Connection` (Queue, Worker, QueueEvents, FlowProducer) is the same either way:

- **TCP**: ``pool_size`` sockets, opened on first use, each pipelined (many commands in
  flight, replies matched by ``reqId``) with a reader task. A socket that breaks fails
  the commands in flight on it with :class:`ConnectionLost`; the next command opens a
  new one, retrying with exponential backoff (100 ms doubling to 30 s, with jitter)
  until ``connect_timeout_s``. With a token, ``Auth`` is the first frame of every
  socket.
- **Embedded**: the broker (:class:`~trioqueue.actors.broker.Broker`) runs in the
  caller's trio program and each channel is a broker session fed directly, no socket.
  Messages still go through the CBOR codec both ways, so a caller never shares a
  mutable object with the broker (and the wire's number rules are the same).

Event subscriptions (``SubscribeEvents``) get a channel of their own; see
:meth:`Connection.subscribe`.

Why a nursery: every channel has a task (the TCP reader, or none in process) and a
subscription a reconnecting reader, so the connection is an async context manager
that owns them, and closing it cancels them; a command still waiting then fails with
:class:`ConnectionLost`.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import cbor2
import trio

from ..config import Config
from ..transport.codec import CBOR, MSGPACK, Codec
from ..transport.framing import FrameDecoder, encode_frame
from ..transport.sockio import DirectReader, write_now
from .errors import CommandTimeout, ConnectionLost, TrioqueueError, error_for

DEFAULT_PORT = 6789
RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 30.0
_MAX_FRAME_BYTES = 64 * 1024 * 1024 + 1024


def backoff_s(attempt: int) -> float:
    """Reconnect delay before attempt ``attempt`` (0-based): doubling, capped, 0-30%
    jitter so that many clients of a restarted broker do not come back in step."""
    base = min(RECONNECT_FIRST_S * (2 ** attempt), RECONNECT_MAX_S)
    return float(base * (1 + random.random() * 0.3))


class _Pending:
    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: dict[str, Any] | None = None


class _Channel:
    """One pipelined path to the broker: a socket, or a session in process."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pending: dict[Any, _Pending] = {}
        self.broken = False
        self.broken_event = trio.Event()
        self.on_event: Any = None  # called with each event frame's ``event`` map

    @property
    def load(self) -> int:
        return len(self._pending)

    def _settle(self, reply: dict[str, Any]) -> None:
        if reply.get("type") == "event" and "reqId" not in reply:
            if self.on_event is not None:
                self.on_event(reply.get("event") or {})
            return
        pending = self._pending.pop(reply.get("reqId"), None)
        if pending is not None:
            pending.reply = reply
            pending.done.set()

    def _break(self) -> None:
        """Every command in flight here fails; the pool will not use this one again."""
        self.broken = True
        self.broken_event.set()
        pending, self._pending = self._pending, {}
        for item in pending.values():
            item.done.set()  # reply None: ConnectionLost

    async def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        if self.broken:
            raise ConnectionLost("connection closed")
        req_id = f"c{next(self._ids)}"
        pending = self._pending[req_id] = _Pending()
        try:
            await self._send({**msg, "reqId": req_id})
            await pending.done.wait()
        finally:
            self._pending.pop(req_id, None)
        if pending.reply is None:
            raise ConnectionLost(f"connection lost before the reply to {msg.get('cmd')}")
        return pending.reply

    async def _send(self, msg: dict[str, Any]) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        self._break()


class _TcpChannel(_Channel):
    def __init__(self, stream: trio.SocketStream, codec: Codec) -> None:
        super().__init__()
        self.stream = stream
        self.codec = codec
        self._send_lock = trio.Lock()
        self._fd = stream.socket.fileno()  # for direct reads and writes (transport.sockio)
        # Replies come from the broker the caller chose to trust: CBOR is decoded as
        # is, without the validating walk the broker runs over client input (a fifth
        # of a worker's time). msgpack keeps the codec, which also maps bunqueue's
        # ext-0 ``undefined`` to absent.
        self._decode = cbor2.loads if codec is CBOR else codec.decode

    async def _send(self, msg: dict[str, Any]) -> None:
        frame = encode_frame(self.codec.encode(msg))
        lock = self._send_lock
        try:
            if lock.locked():
                await lock.acquire()
                written = 0
            else:
                # Nobody is sending: write at once, in this scheduler pass (most frames
                # fit in the socket buffer). The lock is held until the frame is
                # whole, so a partly written one is finished before any other starts.
                lock.acquire_nowait()
                written = write_now(self._fd, frame)
            try:
                if written < len(frame):
                    await self.stream.send_all(memoryview(frame)[written:])
            finally:
                lock.release()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._break()
            raise ConnectionLost(f"connection lost: {exc}") from exc

    async def read_loop(self) -> None:
        decoder = FrameDecoder(_MAX_FRAME_BYTES)
        reader = DirectReader(self._fd, 1 << 16)
        try:
            while True:
                data = await reader.receive()
                if not data:
                    break
                for payload in decoder.feed(data):
                    self._settle(self._decode(payload))
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        except Exception:  # a corrupt stream: nothing after it can be trusted
            pass
        finally:
            self._break()
            with trio.CancelScope(shield=True):
                await self.stream.aclose()

    async def aclose(self) -> None:
        self._break()
        await self.stream.aclose()


class _EmbeddedChannel(_Channel):
    """A broker session fed in process: the same command handling as a socket's."""

    def __init__(self, broker: Any) -> None:
        from ..transport.session import SENT, Session

        super().__init__()
        self._sent = SENT
        self.session = Session(broker, send_now=self._send_now)

    def _send_now(self, replies: list[dict[str, Any]]) -> str:
        for reply in replies:
            self._settle(CBOR.decode(CBOR.encode(reply)))  # never share an object
        return self._sent

    async def _send(self, msg: dict[str, Any]) -> None:
        payload = CBOR.encode(msg)
        await self.session.handle([(CBOR.decode(payload), len(payload), None)])

    async def aclose(self) -> None:
        self._break()
        self.session.close()


class Connection:
    """A pool of channels to one broker. Use :func:`open_connection` to get one."""

    def __init__(self, nursery: trio.Nursery, *, host: str, port: int, token: str | None,
                 pool_size: int, codec: str, connect_timeout_s: float,
                 broker: Any = None, command_timeout_s: float | None = None) -> None:
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        self._nursery = nursery
        self.host = host
        self.port = port
        self.token = token
        self.pool_size = pool_size
        self.codec = CBOR if codec == "cbor" else MSGPACK
        self.connect_timeout_s = connect_timeout_s
        self.command_timeout_s = command_timeout_s
        self.broker = broker
        self._slots: list[_Channel | None] = [None] * pool_size
        self._slot_locks = [trio.Lock() for _ in range(pool_size)]
        self._others: set[_Channel] = set()
        self.closed = False

    @property
    def embedded(self) -> bool:
        return self.broker is not None

    # ------------------------------------------------------------------ commands

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send one command; its reply (``ok`` true), or the typed refusal raised."""
        reply = await self.request({"cmd": cmd, **fields})
        if not reply.get("ok"):
            raise error_for(str(reply.get("error", "")), cmd)
        return reply

    async def request(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send one command and return its reply as the broker sent it."""
        channel = await self._channel()
        if self.command_timeout_s is None:
            return await channel.call(msg)
        limit = self.command_timeout_s + _hold_s(msg)
        with trio.move_on_after(limit):
            return await channel.call(msg)
        await channel.aclose()
        raise CommandTimeout(f"no reply to {msg.get('cmd')} within {limit:g} s")

    async def _channel(self) -> _Channel:
        if self.closed:
            raise ConnectionLost("connection closed")
        # The least busy slot, so that a slot held by long-polls does not slow others.
        index = min(range(self.pool_size),
                    key=lambda i: -1 if self._slots[i] is None else self._slots[i].load)  # type: ignore[union-attr]
        channel = self._slots[index]
        if channel is not None and not channel.broken:
            return channel
        async with self._slot_locks[index]:
            channel = self._slots[index]
            if channel is None or channel.broken:
                channel = self._slots[index] = await self.open_channel()
        return channel

    async def open_channel(self, on_event: Any = None) -> _Channel:
        """A new channel (retried with backoff until ``connect_timeout_s``), owned by
        this connection and closed with it."""
        if self.closed:
            raise ConnectionLost("connection closed")
        channel: _Channel
        if self.broker is not None:
            channel = _EmbeddedChannel(self.broker)
        else:
            channel = await self._open_tcp()
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

    async def _open_tcp(self) -> _TcpChannel:
        attempt = 0
        last: Exception | None = None
        with trio.move_on_after(self.connect_timeout_s):
            while True:
                try:
                    stream = await trio.open_tcp_stream(self.host, self.port)
                    break
                except OSError as exc:
                    last = exc
                    await trio.sleep(backoff_s(attempt))
                    attempt += 1
            channel = _TcpChannel(stream, self.codec)
            self._nursery.start_soon(channel.read_loop)
            return channel
        raise ConnectionLost(f"cannot connect to {self.host}:{self.port}: {last}")

    # ------------------------------------------------------------------ events

    @asynccontextmanager
    async def subscribe(self, queue: str) -> AsyncIterator[EventStream]:
        """A stream of the events of ``queue`` on a channel of its own.

        If the broker goes away the stream reconnects with backoff, subscribes again,
        and yields ``{"eventType": "reconnected", "queue": queue}`` so that a reader
        knows events may have been missed in between (the broker keeps none for it).
        """
        stream = EventStream(self, queue)
        async with trio.open_nursery() as nursery:
            await nursery.start(stream.run)
            try:
                yield stream
            finally:
                nursery.cancel_scope.cancel()
                await stream.close_channel()

    # ------------------------------------------------------------------ closing

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        for channel in list(self._others):
            with trio.CancelScope(shield=True):
                await channel.aclose()
        self._others.clear()


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
        self._send, self._receive = trio.open_memory_channel[dict[str, Any]](math.inf)
        self._channel: _Channel | None = None

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
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
                await trio.sleep(backoff_s(attempt))
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
            await channel.broken_event.wait()
            await trio.sleep(backoff_s(attempt))
            attempt += 1

    async def close_channel(self) -> None:
        if self._channel is not None:
            with trio.CancelScope(shield=True):
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
    embedded: bool = False,
    config: Config | None = None,
) -> AsyncIterator[Connection]:
    """Connect to a broker over TCP, or (``embedded=True``) run one in this program.

    ``command_timeout_s`` bounds the wait for any reply (None: no bound); a command that
    holds on purpose (a long-poll ``PULL``/``PULLB``, ``WaitJob``) gets its own
    ``timeout`` on top. Past it the command fails with :class:`CommandTimeout` and its
    socket is dropped (a broker that does not answer one command is not trusted with
    the next).

    Embedded, the broker uses ``config`` (memory storage when none is given: pass
    ``Config(data_dir=...)`` for an LMDB store), and stops when the block ends, after
    the commands already accepted are applied and committed.
    """
    if codec not in ("cbor", "msgpack"):
        raise ValueError("codec must be 'cbor' or 'msgpack'")
    raised: BaseException | None = None
    async with trio.open_nursery() as nursery:
        broker = None
        broker_scope = trio.CancelScope()
        if embedded:
            from ..actors.broker import Broker

            broker = Broker(config if config is not None else Config(memory=True))

            async def run_broker(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
                with broker_scope:
                    await broker.run(task_status=task_status)

            await nursery.start(run_broker)
            if config is not None and config.auth_tokens and token is None:
                token = config.auth_tokens[0]
        conn = Connection(nursery, host=host, port=port, token=token, pool_size=pool_size,
                          codec=codec, connect_timeout_s=connect_timeout_s, broker=broker,
                          command_timeout_s=command_timeout_s)
        try:
            yield conn
        except BaseException as exc:
            # Raised again below, outside the nursery: the caller's own exception must
            # not come back wrapped in an ExceptionGroup by our background tasks' nursery.
            raised = exc
        finally:
            with trio.CancelScope(shield=True):
                await conn.aclose()
                if broker is not None:
                    await broker.settle()
            broker_scope.cancel()
            nursery.cancel_scope.cancel()
    if raised is not None:
        raise raised
