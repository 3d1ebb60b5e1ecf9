"""The trio TCP channel: the waiting command reads the socket itself.

A reader task per socket would cost every round trip two scheduler passes: the reply
wakes the reader, which reschedules the caller, which runs one pass later. Here there
is no such task for a command channel. A command whose reply has not come becomes the
channel's *reader* when nobody else is reading: it waits for the socket itself, reads,
and settles every reply it finds (its own and those of the commands waiting beside
it, which it reschedules directly). When its own reply is in, it stops reading and
wakes one waiting command to read on, if any is left; that one reads from then on. A
lone command (``add`` one at a time) is thus woken by its own reply in one pass.

An event subscription's channel has frames nobody asked for, so it keeps a reader
task (:meth:`TrioTcpChannel.read_loop`) that is the reader for good.

A command alone in flight first *polls* for its reply, for ``poll_s`` (the connection's
``reply_poll_ms``): it yields to the scheduler and tries a non-blocking read, pass after
pass, before it sleeps in ``wait_readable``. Waking a process from ``epoll_wait`` is a
large part of a round trip (``scripts/ping_pong.py``); a reply that comes inside the
window is read without it, and ``add`` one at a time runs faster (docs/benchmarks.md).
Every pass is a checkpoint, so the
program's other tasks run as before; what it costs is CPU while the command waits, never
more than ``poll_s`` per command. With other commands in flight the program is busy
anyway, and the reader just waits.

Without a reader task nobody sees an idle socket close: before a command goes out on
a socket with nothing in flight, :meth:`TrioTcpChannel.stale` polls it (no wait), so
that a broker that went away while we were idle makes the pool open a new socket
rather than fail the command.
"""

from __future__ import annotations

import os
import select
from time import perf_counter
from typing import Any

import trio

from ..transport.tcp.sockio import write_now
from ..transport.wire.codec import Codec
from ..transport.wire.framing import FrameDecoder, encode_frame
from .channels import MAX_FRAME_BYTES, _abort_wait, _reply_decoder, _TrioChannel, _TrioSlot
from .errors import ConnectionLost

_READ_BYTES = 1 << 16


class TrioTcpChannel(_TrioChannel):
    def __init__(self, stream: trio.SocketStream, codec: Codec, events: bool = False,
                 poll_s: float = 0.0) -> None:
        super().__init__()
        self.stream = stream
        self.codec = codec
        self.poll_s = poll_s  # a lone command polls this long before it sleeps
        self._writing = False  # a frame is being written
        self._write_waiters = trio.lowlevel.ParkingLot()
        self._fd = stream.socket.fileno()  # for direct reads and writes (transport.sockio)
        self._decode = _reply_decoder(codec)
        self._decoder = FrameDecoder(MAX_FRAME_BYTES)
        # A task (a command, or read_loop) is reading the socket. With ``events`` it is
        # read_loop from the start, to be run by the caller.
        self._reading = events
        self._poll = select.poll()
        self._poll.register(self._fd, select.POLLIN)

    # ------------------------------------------------------------------ sending

    async def _send(self, msg: dict[str, Any]) -> None:
        frame = encode_frame(self.codec.encode(msg))
        try:
            # One frame at a time: a partly written one is finished before any other
            # starts. The flag is the lock (a trio.Lock costs a few microseconds a
            # command); those that find it taken park until it is free.
            while self._writing:
                await self._write_waiters.park()
            if self.broken:  # closed while this one waited
                raise trio.ClosedResourceError
            self._writing = True
            try:
                # Written at once, in this scheduler pass: most frames fit in the
                # socket buffer.
                written = write_now(self._fd, frame)
                if written < len(frame):
                    await self.stream.send_all(memoryview(frame)[written:])
            finally:
                self._writing = False
                if self._write_waiters:
                    self._write_waiters.unpark()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._break()
            raise ConnectionLost(f"connection lost: {exc}") from exc

    # ------------------------------------------------------------------ reading

    async def _wait(self, slot: _TrioSlot) -> dict[str, Any] | None:
        if slot.filled:  # read by another command while this one was being sent
            await trio.lowlevel.checkpoint()
        while not slot.filled:
            if self._reading:
                # Woken by its reply, or to read on for the others (then it loops).
                slot.task = trio.lowlevel.current_task()
                await trio.lowlevel.wait_task_rescheduled(_abort_wait(slot))
            else:
                await self._lead(slot)
        return slot.reply

    async def _lead(self, slot: _TrioSlot) -> None:
        """Read for every command here until ``slot`` has its reply, then pass the
        reading on to a command still waiting (also when cancelled)."""
        self._reading = True
        try:
            if self.poll_s > 0 and len(self._pending) == 1:
                await self._poll_for(slot)
            while not slot.filled and not self.broken:
                try:
                    await trio.lowlevel.wait_readable(self._fd)
                except trio.ClosedResourceError:  # closed by _break (e.g. a timeout)
                    break
                self._read_once()
        finally:
            self._reading = False
            self._pass_on()

    async def _poll_for(self, slot: _TrioSlot) -> None:
        """Yield and read without waiting, until ``slot`` is filled or ``poll_s`` has
        passed (the module docstring says why)."""
        until = perf_counter() + self.poll_s
        checkpoint = trio.lowlevel.checkpoint
        while True:
            await checkpoint()  # one pass of the loop: the other tasks run meanwhile
            self._read_once()
            if slot.filled or self.broken or perf_counter() >= until:
                return

    def _read_once(self) -> bool:
        """Read what the socket has and settle it; False when it is empty. A read
        error or the end of the stream breaks the channel."""
        if self.broken:
            return False
        try:
            data = os.read(self._fd, _READ_BYTES)
        except BlockingIOError:
            return False
        except OSError:
            data = b""
        try:
            if not data:
                raise EOFError
            for payload in self._decoder.feed(data):
                self._settle(self._decode(payload))
        except Exception:  # the end, or a corrupt stream: nothing after it is trusted
            self._break()
            return False
        return len(data) == _READ_BYTES

    def _pass_on(self) -> None:
        if self.broken:
            return
        for waiting in self._pending.values():
            task = waiting.task
            if task is not None:
                waiting.task = None
                trio.lowlevel.reschedule(task)  # it finds no reply yet: it reads
                return

    def stale(self) -> bool:
        """True when this channel cannot take a command: broken, or (polled without
        waiting, when nothing is in flight) closed by the broker meanwhile."""
        if not self.broken and not self._reading and not self._pending and self._poll.poll(0):
            while self._read_once():
                pass
        return self.broken

    async def read_loop(self) -> None:
        """The reader for good (an event subscription's channel)."""
        assert self._reading, "read_loop is for a channel made with events=True"
        try:
            while not self.broken:
                await trio.lowlevel.wait_readable(self._fd)
                # After a full read, yield before reading on, so that a flood cannot
                # hog the loop.
                while self._read_once():
                    await trio.lowlevel.checkpoint()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass
        finally:
            self._break()

    def _on_broken(self) -> None:
        super()._on_broken()
        self.stream.socket.close()  # wakes a reader waiting on it (ClosedResourceError)

    async def aclose(self) -> None:
        self._break()
        await self.stream.aclose()

    async def aclose_confirmed(self, limit_s: float) -> None:
        # Only when no command is reading or writing (a worker's last cleanup, after
        # its tasks are gone): two tasks may not wait on one socket.
        if not (self.broken or self._reading or self._writing):
            with trio.move_on_after(limit_s):
                try:
                    await self.stream.send_eof()
                    while not self.broken:  # _read_once breaks it at the end of stream
                        await trio.lowlevel.wait_readable(self._fd)
                        while self._read_once():
                            pass
                except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                    pass
        await self.aclose()
