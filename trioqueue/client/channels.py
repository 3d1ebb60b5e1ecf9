"""The client's paths to a broker: one pipelined channel each, over TCP or in process.

A channel carries many commands at once; each gets a ``reqId`` and waits for the reply
with that id. The waiting and the socket I/O are the one place where the client is
written twice, once per event loop, because they are its hot path:

- **trio** (:mod:`.trio_tcp`): the socket's file descriptor is written at once
  (:mod:`trioqueue.transport.tcp.sockio`, shared with the broker) and read directly by a
  waiting command, which reschedules the others waiting beside it itself;
- **asyncio**: an :class:`asyncio.Protocol`, whose ``data_received`` settles the
  waiting commands' futures itself, so a reply wakes its caller without a reader task
  in between;
- **embedded** (trio only): a broker session fed in process, no socket.

Everything above the channels (the pool, Queue, Worker, ...) is written once, on anyio.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import itertools
import logging
import socket
import time
from typing import Any

import cbor2
import sniffio
import trio

from ..core.backoff import reconnect_delay_s
from ..transport.wire.codec import CBOR, Codec
from ..transport.wire.framing import FrameDecoder, encode_frame
from .errors import CommandTimeout, ConnectionLost
from .values import check_message

log = logging.getLogger("trioqueue.client")

RECONNECT_FIRST_S = 0.1
RECONNECT_MAX_S = 30.0
MAX_FRAME_BYTES = 64 * 1024 * 1024 + 1024

EMBEDDED_NEEDS_TRIO = ("embedded mode needs trio; under asyncio connect over TCP to a "
                       "`trioqueue serve` broker: open_connection(host, port)")


def backoff_s(attempt: int) -> float:
    """Reconnect delay before attempt ``attempt`` (0-based): doubling, capped, 0-30%
    jitter so that many clients of a restarted broker do not come back in step."""
    return reconnect_delay_s(attempt, RECONNECT_FIRST_S, RECONNECT_MAX_S)


def current_backend() -> str:
    """``"trio"`` or ``"asyncio"``: the event loop running the caller."""
    name = sniffio.current_async_library()
    if name not in ("trio", "asyncio"):
        raise RuntimeError(f"trioqueue's client runs on trio or asyncio, not {name}")
    return name


class Channel(abc.ABC):
    """One pipelined path to the broker. Each backend's subclass provides the slot a
    command waits on and the way a frame goes out: abstract here, so a backend that
    misses one cannot be made at all."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self._pending: dict[Any, Any] = {}
        # reqId -> deadline on time.monotonic(), for the connection's sweeper: one
        # timer task per connection, not a cancel scope per command (a scope costs
        # about a fifth of a round trip's client time).
        self._deadlines: dict[Any, float] = {}
        self.broken = False
        self.on_event: Any = None  # called with each event frame's ``event`` map

    @property
    def load(self) -> int:
        return len(self._pending)

    def stale(self) -> bool:
        """True when this channel cannot take a command (the pool opens another)."""
        return self.broken

    def _settle(self, reply: dict[str, Any]) -> None:
        req_id = reply.get("reqId")
        if req_id is None:
            self._unaddressed(reply)
            return
        slot = self._pending.pop(req_id, None)
        if slot is not None:
            self._fill(slot, reply)

    def _unaddressed(self, reply: dict[str, Any]) -> None:
        if reply.get("type") == "event":
            if self.on_event is not None:
                self.on_event(reply.get("event") or {})
            return
        if reply.get("ok") is False and self._pending:
            # The broker refused a frame it could not read, so its answer names no
            # reqId. With one command in flight the answer is that command's; with
            # more it cannot be told whose it is, and waiting would hang the one it
            # was: the channel is given up (ConnectionLost for all of them) instead.
            if len(self._pending) == 1:
                req_id, slot = self._pending.popitem()
                self._fill(slot, {**reply, "reqId": req_id})
                return
            log.warning("the broker refused a frame it could not read (%s); dropping "
                        "the connection, as its answer does not say which command",
                        reply.get("error"))
            self._break()

    def _break(self) -> None:
        """Every command in flight here fails; the pool will not use this one again."""
        if self.broken:
            return
        self.broken = True
        pending, self._pending = self._pending, {}
        for slot in pending.values():
            self._fill(slot, None)  # reply None: ConnectionLost
        self._on_broken()

    async def call(self, msg: dict[str, Any], limit_s: float | None = None
                   ) -> dict[str, Any]:
        """Send ``msg`` (a map of the caller's making, which gets our ``reqId``) and
        return its reply. With ``limit_s``, a reply that has not come by then (as the
        connection's sweeper sees it) fails the command with CommandTimeout and drops
        the channel."""
        if self.broken:
            raise ConnectionLost("connection closed")
        check_message(msg)
        req_id = msg["reqId"] = f"c{next(self._ids)}"
        slot = self._pending[req_id] = self._new_slot()
        if limit_s is not None:
            self._deadlines[req_id] = time.monotonic() + limit_s
        try:
            await self._send(msg)
            reply = await self._wait(slot)
        finally:
            self._pending.pop(req_id, None)
            if limit_s is not None:
                self._deadlines.pop(req_id, None)
        if reply is None:
            raise ConnectionLost(f"connection lost before the reply to {msg.get('cmd')}")
        if reply is _TIMED_OUT:
            assert limit_s is not None
            raise CommandTimeout(f"no reply to {msg.get('cmd')} within {limit_s:g} s")
        return reply

    def expire(self, now: float) -> bool:
        """Fail the commands whose deadline has passed (CommandTimeout) and, if there
        were any, the channel (a broker that does not answer one command is not
        trusted with the next). True when it did."""
        late = [req_id for req_id, deadline in self._deadlines.items() if deadline <= now]
        if not late:
            return False
        for req_id in late:
            slot = self._pending.pop(req_id, None)
            if slot is not None:
                self._fill(slot, _TIMED_OUT)
        self._break()
        return True

    # ------------------------------------------------------------------ per backend

    @abc.abstractmethod
    def _new_slot(self) -> Any:
        """What one command waits on for its reply."""

    @abc.abstractmethod
    def _fill(self, slot: Any, reply: dict[str, Any] | None) -> None:
        """Hand ``reply`` to the command waiting on ``slot`` (None: the channel broke)."""

    @abc.abstractmethod
    async def _wait(self, slot: Any) -> dict[str, Any] | None:
        """The reply ``slot`` was filled with."""

    @abc.abstractmethod
    async def wait_broken(self) -> None:
        """Return once the channel is broken."""

    @abc.abstractmethod
    def _on_broken(self) -> None:
        """Let go of the backend's side (socket, waiters) once the channel broke."""

    @abc.abstractmethod
    async def _send(self, msg: dict[str, Any]) -> None:
        """Put one command's frame on the way to the broker."""

    async def aclose(self) -> None:
        self._break()

    async def aclose_confirmed(self, limit_s: float) -> None:
        """Close, and wait up to ``limit_s`` until the broker has closed its side.

        The broker hands back what a connection held (the jobs its pulls leased, a
        long-poll still parked) before it closes the socket, so once this returns a
        command on any other connection sees them back in their queue. A plain
        :meth:`aclose` resets the socket and returns at once: the broker may not have
        noticed yet. Here: our side is half-closed (no more commands), and replies
        that still come are read and dropped until the broker's end of stream.
        """
        await self.aclose()  # in process (embedded): the session closes on the spot


_TIMED_OUT: Any = {"ok": False, "error": "(no reply in time)"}  # compared by identity


class _TrioSlot:
    """Where one command waits: its task parked on trio's lowest level, rescheduled by
    the reply (an Event per command cost a few microseconds more per round trip)."""

    __slots__ = ("filled", "reply", "task")

    def __init__(self) -> None:
        self.filled = False
        self.reply: dict[str, Any] | None = None
        self.task: trio.lowlevel.Task | None = None


def _abort_wait(slot: _TrioSlot) -> Any:
    def abort(_raise_cancel: Any) -> trio.lowlevel.Abort:
        slot.task = None  # cancelled: a reply that comes later wakes nobody
        return trio.lowlevel.Abort.SUCCEEDED

    return abort


class _TrioChannel(Channel):
    """Waiting the trio way: the task parks until its reply reschedules it."""

    def __init__(self) -> None:
        super().__init__()
        self._broken_event = trio.Event()

    def _new_slot(self) -> _TrioSlot:
        return _TrioSlot()

    def _fill(self, slot: _TrioSlot, reply: dict[str, Any] | None) -> None:
        if slot.filled:
            return
        slot.filled = True
        slot.reply = reply
        task, slot.task = slot.task, None
        if task is not None:
            trio.lowlevel.reschedule(task)

    async def _wait(self, slot: _TrioSlot) -> dict[str, Any] | None:
        if slot.filled:  # answered while it was being sent (embedded)
            await trio.lowlevel.checkpoint()
        else:
            slot.task = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(_abort_wait(slot))
        return slot.reply

    def _on_broken(self) -> None:
        self._broken_event.set()

    async def wait_broken(self) -> None:
        await self._broken_event.wait()


def _reply_decoder(codec: Codec) -> Any:
    # Replies come from the broker the caller chose to trust: CBOR is decoded as is,
    # without the validating walk the broker runs over client input (a fifth of a
    # worker's time). msgpack keeps the codec, which also maps bunqueue's ext-0
    # ``undefined`` to absent.
    return cbor2.loads if codec is CBOR else codec.decode


class EmbeddedChannel(_TrioChannel):
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


class AsyncioTcpChannel(Channel, asyncio.Protocol):
    """A channel that is its own asyncio protocol: replies are settled as they are
    read, in the loop's callback, and the waiting command's future wakes it."""

    def __init__(self, codec: Codec, poll_s: float = 0.0) -> None:
        super().__init__()
        self.codec = codec
        self.poll_s = poll_s  # a lone command polls this long before it sleeps
        self._decode = _reply_decoder(codec)
        self._decoder = FrameDecoder(MAX_FRAME_BYTES)
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._broken_future = self._loop.create_future()
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            for payload in self._decoder.feed(data):
                self._settle(self._decode(payload))
        except Exception:  # a corrupt stream: nothing after it can be trusted
            self._break()

    def connection_lost(self, exc: Exception | None) -> None:
        self._break()

    def pause_writing(self) -> None:
        if self._writable is None:
            self._writable = self._loop.create_future()

    def resume_writing(self) -> None:
        writable, self._writable = self._writable, None
        if writable is not None and not writable.done():
            writable.set_result(None)

    # Channel
    def _new_slot(self) -> asyncio.Future[Any]:
        return self._loop.create_future()

    def _fill(self, slot: asyncio.Future[Any], reply: dict[str, Any] | None) -> None:
        if not slot.done():
            slot.set_result(reply)

    async def _wait(self, slot: asyncio.Future[Any]) -> dict[str, Any] | None:
        if self.poll_s > 0 and len(self._pending) == 1 and not slot.done():
            # Alone in flight: keep the loop polling its selector (a sleep(0) makes
            # its next select non-blocking) rather than sleep in it, as the trio
            # channel does (see trio_tcp's docstring for why).
            perf_counter = time.perf_counter
            until = perf_counter() + self.poll_s
            while not slot.done() and perf_counter() < until:
                await asyncio.sleep(0)
        result: dict[str, Any] | None = await slot
        return result

    def _on_broken(self) -> None:
        if not self._broken_future.done():
            self._broken_future.set_result(None)
        self.resume_writing()
        if self._transport is not None:
            self._transport.abort()

    async def wait_broken(self) -> None:
        await asyncio.shield(self._broken_future)

    async def aclose_confirmed(self, limit_s: float) -> None:
        transport = self._transport
        if not self.broken and transport is not None and transport.can_write_eof():
            transport.write_eof()  # the broker's close then ends in connection_lost
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(limit_s):
                    await self.wait_broken()
        await self.aclose()

    async def _send(self, msg: dict[str, Any]) -> None:
        frame = encode_frame(self.codec.encode(msg))
        while self._writable is not None and not self.broken:
            await asyncio.shield(self._writable)  # the transport's buffer is full
        transport = self._transport
        if self.broken or transport is None or transport.is_closing():
            self._break()
            raise ConnectionLost("connection lost")
        transport.write(frame)  # a whole frame per write: frames never interleave


async def open_tcp(host: str, port: int, codec: Codec, events: bool = False,
                   poll_s: float = 0.0) -> tuple[Channel, Any]:
    """One connection attempt: the channel and, on trio for a channel with ``events``,
    the read loop to run (a command channel is read by its waiting commands). A lone
    command polls ``poll_s`` for its reply before it sleeps (an event channel never:
    its reader waits for frames nobody asked for)."""
    if events:
        poll_s = 0.0
    if current_backend() == "trio":
        from .trio_tcp import TrioTcpChannel

        stream = await trio.open_tcp_stream(host, port)
        channel = TrioTcpChannel(stream, codec, events, poll_s)
        return channel, channel.read_loop if events else None
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(lambda: AsyncioTcpChannel(codec, poll_s),
                                               host, port)
    return protocol, None
