"""TCP sessions: length-prefixed frames of CBOR or msgpack, detected per connection.

The reader takes whatever the socket has (up to 256 KiB), parses every complete frame in
it and hands them to the session as one batch; the session's sender writes all pending
replies with one ``send_all``. Abuse limits come from :class:`~trioqueue.config.Config`
(through :class:`~trioqueue.transport.limits.Shell`):

- a declared frame length over ``max_frame_bytes`` gets an error frame and the
  connection is closed before the body is read; before authentication (tokens set) the
  cap is ``max_preauth_frame_bytes``;
- a frame of at least ``large_frame_bytes`` is decoded and validated in slices, with the
  other connections served between two (``large/frames.py``); the connection reads on
  only after it, so its later frames never overtake it; the frames of one read are
  decoded in steps of ``max_read_step_ms``, and a read with bad frames pauses the
  connection (``read_pacing.py``);
- a partial frame that does not complete within ``partial_frame_timeout_s`` (slowloris)
  closes the connection; the partial frames of all connections together are bounded
  by ``max_partial_frame_total_bytes`` (the largest holders are cut past it);
- a reply with a long list of jobs (PULLB of 1,000) is encoded by the sender task a
  slice per scheduler pass, not by the step that released it (``reply_slices.py``);
- unsent replies are bounded per connection (``max_write_queue_bytes``) and all
  together (``max_write_queue_total_bytes``);
- with tokens set, a connection not authenticated within ``auth_timeout_s`` is closed;
  one that sends nothing for ``idle_timeout_s`` and holds nothing is closed;
- a connection past ``max_connections``, or past ``max_connections_per_address`` for its
  address, gets an error frame and is closed; with tokens set, one not authenticated
  may be closed to make room for a newer one (``max_unauthenticated_connections``,
  ``doors.py``).

Every deadline of a connection is kept in the shell's one :class:`Timers` heap, so a
read costs no cancel scope and a connection no timer task.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import struct
from time import perf_counter
from typing import Any

import trio

from ...turns import give_way
from ..doors import EVICTED
from ..large.frames import decode_large, unmap_soon
from ..limits import Shell
from ..read_pacing import FRAMES_PER_LOOK, ReadPacer
from ..session import KEPT, SENT, Message, Session, SessionHost, overflow_notice
from ..wire.codec import MSGPACK, Codec, DecodeError, detect_codec, encode_frames
from ..wire.framing import MAX_WIRE_LENGTH, FrameDecoder, FrameTooLarge, Payload
from ..wire.req_ids import salvage_req_id
from .send_queue import (
    LongFrame,
    SendQueue,
    frame_parts,
    long_frame,
    rest_of_parts,
    unsent_parts,
)
from .sockio import DirectReader, discard_unread, write_now, writev_now

log = logging.getLogger("trioqueue.tcp")

RECEIVE_BYTES = 256 * 1024
# The size slot of a message _decode left undecoded (a large payload), until
# _decode_large puts the payload's real size there.
_LARGE = -1
# What a deliberately closed connection may still have sent us, read and dropped before
# the close, so that the close is a FIN (its last frame arrives) rather than a reset.
DISCARD_ON_CLOSE_BYTES = 1 << 20


def frame_too_large(size: int, limit: int) -> dict[str, Any]:
    return {"ok": False, "error": f"Frame too large: {size} bytes exceeds maximum {limit}"}


def preauth_frame_too_large(size: int, limit: int) -> dict[str, Any]:
    return {"ok": False, "error": f"Frame too large before authentication: {size} bytes "
                                  f"exceeds maximum {limit} (send Auth first)"}


class TcpConnection:
    def __init__(self, broker: SessionHost, stream: trio.SocketStream, shell: Shell) -> None:
        self.stream = stream
        self._fd = stream.socket.fileno()
        self._shell = shell
        self._limits = limits = shell.limits
        self._pending = SendQueue()  # what the socket has not taken yet
        self._sending = 0  # bytes handed to send_all and not yet all sent
        self._flushing = False
        self._reader = DirectReader(self._fd, RECEIVE_BYTES)
        self._closing = False  # a last frame is going out (or none): then the close
        self._abort = False  # close with a reset (cut while the client was not reading)
        self._cut = False  # a broker-wide budget cut it
        self._scope = trio.CancelScope()
        self.session = Session(broker, send_now=self._send_now)
        self.codec: Codec | None = None
        self._authenticated = self.session.authenticated
        self.decoder = FrameDecoder(
            limits.max_frame_bytes,
            None if self._authenticated else limits.preauth_frame_bytes())
        self._partial_held = 0  # bytes of a partial frame charged to the shell's budget
        # _decode left a large payload undecoded (see _decode_large); the size from which
        # a payload is large (never, when large_frame_bytes is 0)
        self._large = False
        self._large_bytes = limits.large_frame_bytes or MAX_WIRE_LENGTH + 1
        self._pacer = ReadPacer(limits)
        self._rest = 0  # where the read's next step of decoding starts (0: none left)
        # The clocks (trio time); the shell's timers call _expire when one may be due.
        self._timer = shell.timers.handle(self._expire)
        now = trio.current_time()
        self._rx_at = now  # the last read (idle clock)
        self._partial_at = math.inf
        self._auth_at = (now + limits.auth_timeout_s
                         if not self._authenticated and limits.auth_timeout_s else math.inf)
        if not self._authenticated:
            shell.doors.arrived(self)  # (may close the oldest not authenticated)

    def _codec(self) -> Codec:
        # Until a valid first map arrives we answer in msgpack, bunqueue's own codec.
        return self.codec or MSGPACK

    # ------------------------------------------------------------------ replies

    def _send_now(self, replies: list[dict[str, Any]]) -> str:
        """Write replies straight to the non-blocking socket; queue what does not fit.

        trio's ``send_all`` costs extra scheduler passes per call; a plain write of a
        few hundred bytes almost always completes at once, so the reply leaves in the
        same pass as the commit that released it. Bytes never overtake each other: while
        anything is queued, new replies queue behind it for the sender task. Queued
        bytes are bounded by ``max_write_queue_bytes``: a client that does not read its
        replies is cut off rather than allowed to grow the broker's memory.
        """
        if self._pending.chunks or self._flushing or self._closing:
            # behind what waits (counted against the write-queue bound: so a client
            # that reads nothing gets nothing encoded lazily); nothing after a last frame
            return self._queue_each(replies)
        codec = self._codec()
        for i, reply in enumerate(replies):
            long = long_frame(codec, reply)
            if long is not None:
                # encoded by the sender task, in slices (reply_slices.py, value_slices.py)
                return self._queue_long(replies, i, long)
        if not replies:
            return SENT
        parts = frame_parts(codec, replies)
        if len(parts) == 1:  # (commonly)
            data = parts[0]
            written = write_now(self._fd, data)
            if written == len(data):
                return SENT
        else:
            written = writev_now(self._fd, parts)
            if written == sum(map(len, parts)):
                return SENT
        self._pending.head = rest_of_parts(parts, written)
        return self._queue(*unsent_parts(parts, written))

    def _queue_long(self, replies: list[dict[str, Any]], i: int, long: LongFrame) -> str:
        """Queue ``replies`` (nothing waits before them) with the long one at ``i``
        (as ``long``) left to the sender to encode."""
        if i:
            self._send_now(replies[:i])
        if self._pending.chunks or self._closing:  # the ones before it did not all go
            return self._send_now(replies[i:])
        self._pending.push(long)
        self._charge_replies()
        if i + 1 < len(replies):
            self._send_now(replies[i + 1:])  # queued behind it: the order is kept
        return KEPT

    def _queue_each(self, replies: list[dict[str, Any]]) -> str:
        """Queue ``replies`` behind what waits, counted as they are queued, one at a
        time: a short reply encoded now, a long one left for the sender to encode when
        it comes to it (:class:`SlicedFrame`, counted whole from the start), so that a
        client that reads nothing is cut once what it holds passes a bound, not after
        a whole batch of large replies (50 listings of 5 MB each) was encoded for it,
        and a listing it will never read is never encoded."""
        codec = self._codec()
        for reply in replies:
            if self._closing:
                break  # cut or overflowed: the rest would be dropped anyway
            long = long_frame(codec, reply)
            if long is not None:
                self._queue(long)
            else:
                self._queue(*frame_parts(codec, (reply,)))
        return KEPT

    def _queue(self, *chunks: bytes | memoryview | LongFrame) -> str:
        if self._closing:
            return KEPT  # closing: nothing more is queued behind the last frame
        for data in chunks:
            self._pending.push(data)
        self._bound_pending()
        return KEPT

    def _bound_pending(self) -> None:
        """The unsent bytes changed: past ``max_write_queue_bytes`` the connection
        overflows; else they are charged to the broker-wide budget (which may cut it)."""
        limit = self._limits.max_write_queue_bytes
        if limit and self._pending.bytes > limit:
            self._overflow()
        else:
            self._charge_replies()

    def _charge_replies(self) -> None:
        self._shell.replies.set(self, self._pending.bytes + self._sending)

    def _overflow(self) -> None:
        """Drop what the client did not read, tell it why, and close.

        The notice replaces the unsent frames, so a client that is slow but reading
        finds it right after what it already had; the connection closes once it is
        sent, or after ``overflow_notice_s`` for a client that reads nothing at all.
        """
        log.info("closing a connection that does not read its replies")
        self._close_after(overflow_notice(self._limits.max_write_queue_bytes),
                          drop_unsent=True)

    def _close_after(self, reply: dict[str, Any], *, drop_unsent: bool = False) -> None:
        """Send ``reply`` as the last frame, then close (``overflow_notice_s`` at most)."""
        if self._closing:
            return
        self._closing = True
        if drop_unsent:
            self._pending.drop_unsent()
        data: bytes | memoryview = encode_frames(self._codec(), [reply])
        if not self._pending.chunks and not self._flushing:
            data = memoryview(data)[write_now(self._fd, data):]
        if data:
            self._pending.push(data)
        self._charge_replies()
        if not self._pending.chunks and not self._flushing:
            self._end()
            return
        deadline = trio.current_time() + self._limits.overflow_notice_s
        self._scope.deadline = min(self._scope.deadline, deadline)
        self.session.flush_soon()

    def evict(self) -> bool:
        """Not authenticated yet, and the oldest such when room was needed (doors.py)."""
        if self._closing or self._scope.cancel_called:
            return False
        self._close_after({"ok": False, "error": EVICTED})
        return True

    def cut(self, budget: str) -> None:
        """A broker-wide budget sheds this connection: drop what it holds, close now.

        A client with replies still unsent is not reading: its connection is reset, so
        the kernel drops what it buffered too (a FIN would wait behind that data). One
        that is reading, or only sending, gets a notice and a normal close.
        """
        if self._cut:
            return
        self._cut = True
        self._abort = bool(self._pending.chunks) or self._flushing
        if not self._abort:  # the wire is between frames
            notice = {"ok": False, "error": f"Connection cut: the broker's {budget} "
                                            "was reached and this connection held the most"}
            write_now(self._fd, encode_frames(self._codec(), [notice]))
        self._closing = True
        # Freed now, not when the connection's objects are collected: the budget has
        # already stopped counting them.
        self._pending.clear()
        unmap_soon(self.decoder.discard())
        self._end()

    def _end(self) -> None:
        """End the connection: its scope is cancelled by trio's run loop, at once, not
        here. A budget cuts a connection, and an overflow closes it, from inside the
        step that handed it (or another connection) replies; trio raises the Cancelled
        of a task parked elsewhere in the stack of whoever cancels it, and that
        exception's traceback then held every frame of this stack, the step's replies
        among them, until a pass of the cyclic GC: ten clients' listings piled up."""
        self._scope.deadline = -math.inf

    async def _send(self, replies: list[tuple[Any, dict[str, Any]]]) -> None:
        # TCP replies never wait in the session's outbox: _send_now took them all.
        self._flushing = True
        try:
            while self._pending.chunks:
                if ahead := self._pending.slice_ahead_bytes():
                    # a slice of a long reply is made next: its jobs' encodings and the
                    # joined slice are both held meanwhile, so the budget sees both (and
                    # may cut this connection, which then has nothing left to send)
                    self._shell.replies.set(self, self._pending.bytes + self._sending + ahead)
                    if not self._pending.chunks:
                        break
                data = self._pending.next_chunk()
                # A long reply's slices replace its estimate in the broker-wide budget
                # as they are encoded, before the send (which waits for as long as the
                # client does not read). Not against max_write_queue_bytes: one reply
                # larger than that, to a client that reads it, is not an overflow.
                if data is None:  # a slice of a long reply encoded: others run now
                    self._charge_replies()
                    await give_way()
                    continue
                self._sending = len(data)
                self._charge_replies()
                await self.stream.send_all(data)
                self._sending = 0
                self._charge_replies()
        finally:
            self._flushing = False
        if self._closing:
            self._scope.cancel()  # the last frame is out: close

    # ------------------------------------------------------------------ clocks

    def _next_deadline(self) -> float:
        idle = self._limits.idle_timeout_s
        return min(self._partial_at, self._auth_at,
                   self._rx_at + idle if idle else math.inf)

    def _expire(self, now: float) -> None:
        """Called by the shell's timers: close the connection if one of its clocks ran out."""
        if self._closing or self._scope.cancel_called:
            return
        if now >= self._partial_at:
            log.info("closing a connection stuck in a partial frame")
            self._scope.cancel()
            return
        if now >= self._auth_at:
            log.info("closing a connection that did not authenticate within %g s",
                     self._limits.auth_timeout_s)
            self._close_after({"ok": False, "error": "Authentication timeout: no valid "
                               f"Auth within {self._limits.auth_timeout_s:g} s"})
            return
        idle = self._limits.idle_timeout_s
        if idle and now >= self._rx_at + idle:
            if self.session.holds_anything():
                self._rx_at = now  # it waits for us, not we for it: start again
            else:
                log.info("closing a connection idle for %g s", idle)
                self._close_after({"ok": False, "error": "Idle timeout: nothing received "
                                   f"for {idle:g} s"})
                return
        self._timer.arm(self._next_deadline())

    # ------------------------------------------------------------------ reading

    async def serve(self) -> None:
        session = self.session
        self._timer.arm(self._next_deadline())
        try:
            # _scope is cancelled when the connection is to close: a client that does
            # not read its replies, a clock that ran out, a budget that cut it.
            with self._scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(session.run_sender, self._send)
                    try:
                        await self._read_loop()
                    finally:
                        nursery.cancel_scope.cancel()
        except* (trio.BrokenResourceError, trio.ClosedResourceError):
            # The peer went away (reset, or closed while we wrote). The nursery wraps
            # this in an ExceptionGroup: it must end this connection, never the broker.
            pass
        finally:
            # in turns when many end at once (limits.Teardowns; taken at the EOF already)
            teardowns = self._shell.teardowns
            await teardowns.turn(self)
            try:
                self._hand_back()
                # (A socket stream's close never waits, so no deadline: an exited scope's
                # deadline stays in trio's heap until it passes, one per closed connection.)
                with trio.CancelScope(shield=True):
                    await self.stream.aclose()
            finally:
                teardowns.done(self)

    def _hand_back(self) -> None:
        """The connection is ending: its budgets, timers and session's holdings go."""
        session = self.session
        self._timer.cancel()
        self._shell.doors.settled(self)
        self._shell.partial_frames.release(self)
        self._shell.replies.release(self)
        self._pending.clear()
        unmap_soon(self.decoder.discard())
        session.close()
        if self._abort:
            with contextlib.suppress(OSError):
                self.stream.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
        elif self._closing:
            discard_unread(self._fd, DISCARD_ON_CLOSE_BYTES)

    async def _read_loop(self) -> None:
        reader = self._reader
        decoder = self.decoder
        handle = self.session.handle
        limits = self._limits
        timed = bool(limits.idle_timeout_s or limits.partial_frame_timeout_s)
        # the run's clock asked directly: trio.current_time() is three calls deep
        clock_now = trio.lowlevel.current_clock().current_time
        session = self.session
        spin = self._shell.spin
        while True:
            data = await reader.receive()
            if not data:
                # The end begins here, in turn: the sender's cancellation and the
                # nursery's exit are steps of the ending too (limits.Teardowns).
                await self._shell.teardowns.turn(self)
                return
            read_started = perf_counter()
            spin.poke(read_started)
            now = clock_now() if timed else 0.0
            self._rx_at = now
            try:
                payloads = decoder.feed(data)
            except FrameTooLarge as exc:
                # answered outside the except block: a connection closed while an
                # exception is being handled chains it to the Cancelled, whose
                # traceback holds this frame: a cycle only a full GC would free
                too_large = frame_too_large(exc.size, exc.limit)
            else:
                if self._partial_held or decoder.has_partial or not self._authenticated:
                    await self._take(payloads, now)  # partial frames, or before Auth
                elif payloads:  # the common read: whole frames, nothing left over
                    messages = self._decode(payloads)
                    if self._large:
                        await self._decode_large(messages)
                    await handle(messages)
                    if self._rest:
                        await self._serve_rest(payloads)
                if session.refused_frames:
                    session.refused_frames = 0
                    await trio.sleep(self._shell.bad_frames.pause_after(read_started))
                continue
            await self._last_frame(too_large)

    async def _take(self, payloads: list[Payload], now: float) -> None:
        """Serve the frames of one read; keep the partial frame's clock and charge."""
        decoder = self.decoder
        self._charge_partial()
        if self._cut:
            return  # cut by the budget: nothing more of this connection is served
        self._clock_partial(bool(payloads), now)
        if payloads:
            messages = self._decode(payloads)
            if self._large:  # inline, as in _read_loop: no coroutine more per read
                await self._decode_large(messages)
            await self.session.handle(messages)
            if self._rest:
                await self._serve_rest(payloads)
        if not self._authenticated and self.session.authenticated:
            # Authenticated: the full frame cap, and no more authentication deadline.
            self._authenticated = True
            self._auth_at = math.inf
            self._shell.doors.settled(self)
            released = decoder.raise_limit(self._limits.max_frame_bytes)
            self._charge_partial()
            if released:
                self._clock_partial(True, now)
                messages = self._decode(released)
                if self._large:
                    await self._decode_large(messages)
                await self.session.handle(messages)
                if self._rest:
                    await self._serve_rest(released)
        if decoder.held is not None:
            log.info("closing a connection that sent a %d-byte frame before Auth",
                     decoder.held)
            await self._last_frame(preauth_frame_too_large(decoder.held,
                                                           decoder.limit_bytes))

    def _clock_partial(self, completed: bool, now: float) -> None:
        # The clock of a partial frame starts with its first bytes and stops only when a
        # frame completes: more bytes of the same frame do not restart it (slowloris).
        has_partial = self.decoder.has_partial
        if completed or not has_partial:
            self._partial_at = math.inf
        timeout = self._limits.partial_frame_timeout_s
        if timeout and has_partial and self._partial_at == math.inf:
            self._partial_at = now + timeout
            self._timer.arm(self._partial_at)

    def _charge_partial(self) -> None:
        held = self.decoder.buffered_bytes
        if held != self._partial_held:
            self._partial_held = held
            self._shell.partial_frames.set(self, held)

    async def _last_frame(self, reply: dict[str, Any]) -> None:
        """Answer ``reply`` and stop reading; the connection closes once it is out."""
        self._close_after(reply)
        await trio.sleep_forever()  # _scope is cancelled when the frame is sent

    async def _serve_rest(self, payloads: list[Payload]) -> None:
        """The rest of a read that one step of decoding did not finish, a step at a time,
        other tasks run between two (see read_pacing.py)."""
        while self._rest:
            await trio.lowlevel.checkpoint()
            messages = self._decode(payloads, self._rest)
            if self._large:
                await self._decode_large(messages)
            await self.session.handle(messages)

    def _decode(self, payloads: list[Payload], start: int = 0) -> list[Message]:
        """Decode the payloads of a read from ``start``, but a large one: that is left in
        place, as ``(payload, _LARGE, None)``, for :meth:`_decode_large` (``_large`` says
        so). Past ``max_read_step_ms`` it stops; ``_rest`` says where to go on."""
        messages: list[Message] = []
        append = messages.append
        large = self._large_bytes
        self._rest = 0
        codec = self.codec
        look = len(payloads) - start > FRAMES_PER_LOOK
        if look:
            self._pacer.start()
        i = start
        for payload in payloads[start:] if start else payloads:
            if look and i > start and not (i - start) % FRAMES_PER_LOOK and (
                    self._pacer.step_is_over()):
                self._rest = i
                break
            i += 1
            if codec is None and payload:
                # the connection's first byte decides; until then, bunqueue's msgpack
                codec = self.codec = detect_codec(payload[0])
            size = len(payload)
            if size >= large:
                append((payload, _LARGE, None))
                self._large = True
                continue
            try:
                append(((codec or MSGPACK).decode(payload), size, None))
            except DecodeError as exc:
                # A fresh error, never raised: the raised one's traceback (and that of
                # its cause) reaches this frame, and so `messages`: a reference cycle
                # that only a full pass of the cyclic GC would free.
                fresh = DecodeError(str(exc))
                fresh.req_id = salvage_req_id((codec or MSGPACK).name, payload)
                append((fresh, size, None))
        return messages

    async def _decode_large(self, messages: list[Message]) -> None:
        """Decode the large payloads :meth:`_decode` left, in slices, in place (the read's
        messages are then handled in their order, as one batch)."""
        self._large = False
        codec = self._codec()
        turns = self._shell.decoding  # (frames decoded at once, broker-wide)
        for i, (payload, mark, _) in enumerate(messages):
            if mark != _LARGE:
                continue
            size = len(payload)
            try:
                await turns.take(size)
            except BaseException:
                unmap_soon(payload)
                raise
            try:
                value, bound = await decode_large(
                    codec, payload, bound_up_to=self._limits.max_data_bytes,
                    graveyard=self._shell.graveyard)
            except DecodeError as exc:
                messages[i] = (exc.fresh(), size, None)  # (see _decode)
            else:
                messages[i] = (value, size, bound)
            finally:
                turns.give_back(size)
                unmap_soon(payload)  # decoded (or refused): its bytes are not needed
