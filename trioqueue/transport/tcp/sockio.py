"""Reading and writing a trio socket's non-blocking file descriptor directly.

trio's ``receive_some`` yields to the scheduler after every successful read, and
``send_all`` checkpoints even when the socket takes every byte at once. For one
request per round trip those are whole scheduler passes, on the broker's side and on
the client's. Both sides therefore read with :class:`DirectReader` and try
:func:`write_now` first, falling back to trio's own waiting only when the socket is
empty or full.
"""

from __future__ import annotations

import os

import trio


class DirectReader:
    """Reads what the socket has, waiting for it only when there is nothing yet.

    Fairness is kept by yielding before the next read whenever the last one did not
    wait, so a peer that floods the socket cannot monopolise the event loop.
    """

    __slots__ = ("_fd", "_max_bytes", "_yield_first")

    def __init__(self, fd: int, max_bytes: int) -> None:
        self._fd = fd
        self._max_bytes = max_bytes
        self._yield_first = False

    async def receive(self) -> bytes:
        """The next bytes (``b""`` at end of stream); BrokenResourceError on an error."""
        if self._yield_first:
            await trio.lowlevel.checkpoint()
        waited = False
        while True:
            try:
                data = os.read(self._fd, self._max_bytes)
            except BlockingIOError:
                await trio.lowlevel.wait_readable(self._fd)
                waited = True
                continue
            except OSError as exc:
                raise trio.BrokenResourceError(str(exc)) from exc
            self._yield_first = not waited
            return data


def write_now(fd: int, data: bytes | bytearray | memoryview) -> int:
    """Write what the socket takes without waiting; the number of bytes written.

    0 when it takes nothing, also on a broken connection: the caller leaves the rest
    to trio's ``send_all``, which raises that error the normal way.
    """
    try:
        return os.write(fd, data)
    except OSError:  # BlockingIOError included
        return 0


#: The most buffers one writev is given (Linux takes 1,024; replies rarely need 2).
WRITEV_PARTS = 64


def writev_now(fd: int, parts: list[bytes | memoryview]) -> int:
    """:func:`write_now` of several buffers in one call, none of them copied."""
    try:
        return os.writev(fd, parts[:WRITEV_PARTS])
    except OSError:  # BlockingIOError included
        return 0


def discard_unread(fd: int, max_bytes: int) -> int:
    """Read and drop what the socket already holds (at most ``max_bytes``), not waiting.

    Closing a socket with unread bytes sends a reset, which can destroy the last frame
    we wrote before the peer reads it; a socket emptied first closes with a FIN.
    """
    dropped = 0
    while dropped < max_bytes:
        try:
            data = os.read(fd, min(1 << 16, max_bytes - dropped))
        except OSError:  # BlockingIOError included: nothing more to read now
            break
        if not data:
            break
        dropped += len(data)
    return dropped
