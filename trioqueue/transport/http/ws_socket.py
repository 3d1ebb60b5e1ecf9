"""The broker's side of one WebSocket connection, on wsproto (the protocol without I/O).

trio-websocket's server sent a message as one frame made in one call (a text encoded to
UTF-8, then copied behind the frame's header: copies of megabytes in one step of the
event loop) and joined a received message in one call; it has no way to send a message
in fragments. Here, on wsproto directly:

- a message longer than :data:`PIECE_BYTES` goes out as a fragmented message (RFC 6455,
  section 5.4): a first frame of its kind without FIN, continuation frames, the last
  with FIN, every other task running between two pieces. Control frames (a pong, our
  ping, a close) may go between two pieces; the connection's other messages come from
  one sender, which sends them one after another, so none goes inside another. Every
  client (browsers, WebSocket libraries) reassembles them;
- a received message is taken as it arrives, :data:`RECEIVE_BYTES` a step, counted
  against the caller's limit as it comes (refused as soon as it passes it, before the
  rest arrives). A large one is written into an anonymous memory map as it comes (no
  join at the end), which grows by remapping, not copying, and is unmapped in a worker
  thread once decoded (``large_frames.unmap_soon``, as a large TCP frame's): freeing
  megabytes on the event loop costs milliseconds.

Reading happens only while the session awaits :meth:`WsSocket.receive` (or the close
handshake): a connection its session leaves unread (a pause for bad frames) is not
read, and the client's pings are answered and our pongs seen while it reads.
"""

from __future__ import annotations

import logging
import mmap
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

from ...turns import give_way
from ..large.frames import unmap_soon
from ..wire.framing import Payload

__all__ = ["PIECE_BYTES", "RECEIVE_BYTES", "MessageTooLarge", "Parts", "Upgrade", "WsClosed",
           "WsSocket"]

log = logging.getLogger("trioqueue.websocket")

#: Bytes read from the socket in one step (a large message arrives in such pieces).
RECEIVE_BYTES: Final = 64 * 1024
#: A message longer than this (bytes; characters of a text) is sent in fragments of
#: this size, one a step.
PIECE_BYTES: Final = 128 * 1024
#: A message to send, as parts to be sent one after another (all ``str`` for a text).
Parts = list[str] | list[bytes] | list[bytes | memoryview]

#: A received message of at most this many bytes is joined at once (a fraction of a
#: millisecond); a longer one is gathered in a memory map.
JOIN_AT_ONCE_BYTES: Final = 256 * 1024

_ABNORMAL = 1006  # no close frame: the socket ended (RFC 6455, section 7.1.5)


class WsClosed(Exception):
    """The connection is closed or closing (by the client, by us, or the socket ended):
    nothing more can be sent or received. ``code``: the close code, when known."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"WebSocket closed ({code}{': ' + reason if reason else ''})")
        self.code = code
        self.reason = reason


class MessageTooLarge(Exception):
    """A message being received passed the caller's limit (``size``: its bytes so far)."""

    def __init__(self, size: int) -> None:
        super().__init__(f"a WebSocket message of more than {size} bytes")
        self.size = size


@dataclass(frozen=True, slots=True)
class Upgrade:
    """The client's upgrade request: its target (path and query) and its headers (but
    ``Host``, the extensions and subprotocols, which wsproto keeps apart)."""

    target: str
    headers: list[tuple[bytes, bytes]]


class WsSocket:
    """One connection from its upgrade request to its close; see the module's text.

    :meth:`send` may run in one task while :meth:`receive` runs in another; every frame
    is made and written under one lock, so the bytes of two frames never mix.
    """

    def __init__(self, stream: trio.abc.Stream) -> None:
        self._stream = stream
        self._proto = WSConnection(ConnectionType.SERVER)
        self._send_lock = trio.Lock()
        self._pong_waiters: list[trio.Event] = []
        # A write cut short (cancelled, or the socket broke): the stream may hold part
        # of a frame, so nothing more is written to it, not even a close frame.
        self._broken = False
        self._closing = False  # aclose was called: a second call does nothing

    # ------------------------------------------------------------------ handshake

    async def upgrade(self) -> Upgrade | None:
        """Read the upgrade request. None when there is none to answer: the client
        closed first, or the request was refused here (400 or 426, as wsproto
        decides, for a request that is not a valid upgrade)."""
        try:
            while True:
                for event in self._proto.events():
                    if isinstance(event, Request):
                        return Upgrade(event.target, list(event.extra_headers))
                data = await self._read()
                if data is None:
                    return None
                self._proto.receive_data(data)
        except RemoteProtocolError as exc:
            hint = exc.event_hint
            if isinstance(hint, RejectConnection):
                await self._write_quietly(self._proto.send(hint))
            return None
        except UnicodeError:
            # wsproto decodes the upgrade's Host as IDNA; ``Host: xn--zz`` is not.
            log.info("closing a WebSocket upgrade whose Host is not valid IDNA")
            return None

    async def accept(self) -> None:
        await self._write(self._proto.send(AcceptConnection()))

    async def reject(self, status: int, body: bytes) -> None:
        """Refuse the upgrade with an HTTP status and a body; the caller then closes."""
        head = RejectConnection(status_code=status, has_body=True, headers=[
            (b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode()),
            (b"connection", b"close")])
        await self._write_quietly(self._proto.send(head) + self._proto.send(RejectData(body)))

    # ------------------------------------------------------------------ receiving

    async def receive(self, limit: int) -> tuple[bool, Payload]:
        """The next message: (True for text, its UTF-8 bytes) or (False, its bytes);
        a large one as a memory map (read from its start), to be handed to
        ``unmap_soon`` once used.

        Raises :class:`MessageTooLarge` once it passes ``limit`` bytes, and
        :class:`WsClosed` when the client closes (its close frame answered) or the
        socket ends."""
        message = _Gathered(limit)
        try:
            while True:
                for event in self._proto.events():
                    if isinstance(event, Message):
                        message.add(event.data.encode() if isinstance(event, TextMessage)
                                    else event.data)
                        if event.message_finished:
                            return isinstance(event, TextMessage), message.whole()
                    else:
                        await self._control(event)
                received = await self._read()
                if self._proto.state is ConnectionState.CLOSED:
                    raise WsClosed(_ABNORMAL)
                self._proto.receive_data(received)  # (None: the socket ended)
        except BaseException:
            message.discard()
            raise

    async def _control(self, event: Event) -> None:
        if isinstance(event, Ping):
            try:
                await self._send_event(event.response())
            except WsClosed:
                pass  # (the close comes next, or the socket ended)
        elif isinstance(event, Pong):
            waiters, self._pong_waiters = self._pong_waiters, []
            for waiter in waiters:
                waiter.set()
        elif isinstance(event, CloseConnection):
            state = self._proto.state
            if state is ConnectionState.REMOTE_CLOSING:
                # the client's close frame: answered with its code, as RFC 6455 asks
                await self._send_quietly(event.response())
            elif state is ConnectionState.OPEN:
                # a frame wsproto could not parse (1002, or 1007 for text that is not
                # UTF-8): closed with that code
                await self._send_quietly(CloseConnection(event.code, event.reason))
            raise WsClosed(event.code, event.reason or "")

    async def _read(self) -> bytes | None:
        """The next bytes from the socket; None once it ended (EOF, reset, closed)."""
        try:
            data = await self._stream.receive_some(RECEIVE_BYTES)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return None
        return bytes(data) if data else None

    # ------------------------------------------------------------------ sending

    async def send(self, message: str | bytes) -> None:
        """Send one message: text for a ``str``, binary for ``bytes`` (see
        :meth:`send_parts`)."""
        await self.send_parts([message] if isinstance(message, str) else [message])

    async def send_parts(self, parts: Parts) -> None:
        """Send one message given as its parts, never joined whole (text for parts
        that are ``str``): one frame, or fragments of about :data:`PIECE_BYTES` with
        every other task run between two. Raises :class:`WsClosed` when it cannot be
        sent."""
        text = bool(parts) and isinstance(parts[0], str)
        held: str | bytes | None = None
        for piece in _pieces(parts, text):
            if held is not None:
                await self._send_event(_message(held, finished=False))
                await give_way()
            held = piece
        await self._send_event(_message("" if text else b"", finished=True) if held is None
                               else _message(held, finished=True))

    async def ping(self) -> None:
        """Send a ping and wait for a pong (any pong: the client reads and answers)."""
        waiter = trio.Event()
        self._pong_waiters.append(waiter)
        await self._send_event(Ping(b"trioqueue"))
        await waiter.wait()

    async def _send_event(self, event: Event) -> None:
        async with self._send_lock:
            if self._broken:
                raise WsClosed(_ABNORMAL)
            try:
                data = self._proto.send(event)
            except LocalProtocolError:  # closing or closed: no more data frames
                raise WsClosed(_ABNORMAL) from None
            await self._write(data)

    async def _send_quietly(self, event: Event) -> None:
        try:
            await self._send_event(event)
        except WsClosed:
            pass

    async def _write(self, data: bytes) -> None:
        try:
            await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self._broken = True
            raise WsClosed(_ABNORMAL) from None
        except BaseException:  # cancelled inside the write: part of it may be out
            self._broken = True
            raise

    async def _write_quietly(self, data: bytes) -> None:
        try:
            await self._write(data)
        except WsClosed:
            pass

    # ------------------------------------------------------------------ closing

    async def aclose(self, code: int = 1000, reason: str | None = None) -> None:
        """The close handshake: our close frame (unless one was sent, or the client's
        already answered, or a write was cut short), then the client's, waited for
        while what else it sends is read and dropped. The caller bounds the wait; the
        caller closes the socket. A second call does nothing."""
        if self._closing or self._broken or self._proto.connection is None:
            return
        self._closing = True
        if self._proto.state is ConnectionState.OPEN:
            try:
                await self._send_event(CloseConnection(code, reason))
            except WsClosed:
                return
        while self._proto.state is ConnectionState.LOCAL_CLOSING:
            data = await self._read()
            self._proto.receive_data(data)
            if data is None or any(isinstance(event, CloseConnection)
                                   for event in self._proto.events()):
                return


def _message(piece: str | bytes, *, finished: bool) -> Message:
    if isinstance(piece, str):
        return TextMessage(data=piece, message_finished=finished)
    return BytesMessage(data=piece, message_finished=finished)


def _pieces(parts: Parts, text: bool) -> Iterator[str | bytes]:
    """The parts regrouped in pieces of about :data:`PIECE_BYTES` (characters of a
    text): short parts joined by the piece, a long one cut."""
    run: list[Any] = []
    size = 0
    for part in parts:
        if len(part) > PIECE_BYTES:
            if run:
                yield _join(run, text)
                run, size = [], 0
            for start in range(0, len(part), PIECE_BYTES):
                piece = part[start:start + PIECE_BYTES]
                yield piece if isinstance(piece, (str, bytes)) else bytes(piece)
            continue
        run.append(part)
        size += len(part)
        if size >= PIECE_BYTES:
            yield _join(run, text)
            run, size = [], 0
    if run:
        yield _join(run, text)


def _join(run: list[Any], text: bool) -> str | bytes:
    if len(run) == 1 and isinstance(run[0], (str, bytes)):
        return run[0]  # type: ignore[no-any-return]
    return "".join(run) if text else b"".join(run)


class _Gathered:
    """A message being received: its first pieces in a list, the whole of a large one
    in an anonymous memory map that doubles as needed (remapped, its pages not copied)."""

    __slots__ = ("_limit", "_chunks", "_size", "_body")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._chunks: list[bytes] = []
        self._size = 0
        self._body: mmap.mmap | None = None

    def add(self, data: bytes) -> None:
        self._size += len(data)
        if self._size > self._limit:
            raise MessageTooLarge(self._size)
        body = self._body
        if body is None:
            self._chunks.append(data)
            if self._size <= JOIN_AT_ONCE_BYTES:
                return
            body = self._body = _new_map(min(self._limit, 4 * JOIN_AT_ONCE_BYTES))
            for chunk in self._chunks:
                body.write(chunk)
            self._chunks = []
            return
        if self._size > len(body):
            body = self._body = _resized(body, min(self._limit, max(self._size, 2 * len(body))))
        body.write(data)

    def whole(self) -> Payload:
        body = self._body
        if body is None:
            return self._chunks[0] if len(self._chunks) == 1 else b"".join(self._chunks)
        self._body = None
        body = _resized(body, self._size)
        body.seek(0)  # (read as a file from its start: cbor2 does)
        return body

    def discard(self) -> None:
        """Not to be whole (refused, or the connection ended): unmapped off the loop."""
        unmap_soon(self._body)
        self._body = None


def _new_map(size: int) -> mmap.mmap:
    # private: a shared anonymous map cannot grow by remapping
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def _resized(body: mmap.mmap, size: int) -> mmap.mmap:
    """``body`` at ``size`` bytes, written position kept: remapped where the system can
    (Linux), else copied into a new map."""
    at = body.tell()
    try:
        body.resize(size)
    except (OSError, SystemError, ValueError):
        fresh = _new_map(size)
        with memoryview(body) as view:
            fresh.write(view[:min(at, size)])
        unmap_soon(body)
        return fresh
    body.seek(min(at, size))
    return body
