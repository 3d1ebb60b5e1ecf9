"""Request bodies on the HTTP port: read once, within a deadline and a broker-wide budget.

A client that sends a body slowly, or sends most of a large one and stops, holds its
connection and the bytes already received. Three rules bound that:

- **A deadline** (``http_body_timeout_s``): a request's whole body must arrive within
  this long of its head, however it trickles in; past it the answer is 408 and the
  connection closes.
- **A budget** (``http_max_body_total_bytes``): the bytes of bodies still arriving, all
  requests together, counted as they are kept (a :class:`~.limits.ByteBudget`, as TCP
  counts its partial frames). Past it the requests holding the most are cut: 503 and
  the close. A body counts until it is whole; it is then the command's. hypercorn keeps
  at most a few receives of a body ahead of us (its app queue: ``max_app_queue_size``
  messages of up to 64 KiB), not counted.
- **Refused before read**: a 401, and a body refused by one of these bounds (408, 413,
  503), close the connection rather than reading the rest first. Any other answer
  takes what is left of the body first (within the deadline), so that a kept-alive
  connection serves its next request: hypercorn closes a connection whose request was
  not received whole, without a ``Connection: close`` the client could see.

An answer that closes is sent while what hypercorn queued of the body is dropped:
hypercorn waits for room in the app's queue to tell it the stream closed, and would
wait forever on a queue full of body nobody reads.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from ..large.long_strings import joined_bytes_steps
from ..limits import ByteBudget
from ..slicing import Slicer, run_sliced
from .rest.api import Response, error_body

Receive = Any

# Answers that close the connection without reading what is left of the body (besides
# the body's own refusals: 408, 413 and 503, see body_refused).
CLOSE_UNREAD = frozenset({401})
# How long an answer that closes waits for hypercorn to tell it the stream closed.
CLOSE_WAIT_S = 1.0
#: A body of this many bytes or more is joined a piece at a time, other tasks served
#: between two (one join of a 64 MiB body held the event loop about 35 ms).
JOIN_IN_PIECES_BYTES: Final = 1 << 20


class BodyTooLarge(Exception):
    """The request's body passed ``http_max_body_bytes`` (answered 413)."""


class ClientGone(Exception):
    """The client disconnected before its request was whole (nothing to answer)."""


class BodyTimeout(Exception):
    """The body was not whole within ``http_body_timeout_s`` of the head (408)."""


class BodyCut(Exception):
    """The broker-wide budget of bodies still arriving cut this one (503)."""


class RequestBody:
    """A request's body, read once, and drained before any answer that did not read it
    (see the module for the deadline and the budget)."""

    def __init__(self, receive: Receive, limit: int, headers: list[tuple[bytes, bytes]],
                 *, timeout_s: float = 0.0, budget: ByteBudget | None = None) -> None:
        self._receive = receive
        self._limit = limit
        self._declared: int | None = None
        chunked = False
        for name, value in headers:
            if name == b"content-length" and value.isdigit():
                self._declared = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        self.whole = not chunked and not self._declared  # nothing (left) to read
        self._size = 0
        self.timeout_s = timeout_s
        self._deadline = trio.current_time() + timeout_s if timeout_s else math.inf
        self._budget = budget
        self._scope: trio.CancelScope | None = None
        self._cut: str | None = None  # the budget that cut it
        self.refused = False  # by one of its bounds: the answer closes the connection

    async def read(self) -> bytes:
        """The whole body; :class:`BodyTooLarge` past the limit (declared or read),
        :class:`BodyTimeout` past the deadline, :class:`BodyCut` when the budget cut it."""
        if self._declared is not None and self._declared > self._limit:
            raise BodyTooLarge
        chunks: list[bytes] = []
        try:
            await self._take(chunks)
        finally:
            if self._budget is not None:
                self._budget.release(self)
        if self._size < JOIN_IN_PIECES_BYTES:
            return b"".join(chunks)
        slicer = Slicer()
        return await run_sliced(joined_bytes_steps(chunks, slicer), slicer)

    async def drain(self) -> bool:
        """Read and drop what is left; False when the body is past the limit or not
        whole by the deadline (the answer must close the connection)."""
        if self._size > self._limit or (self._declared is not None
                                         and self._declared > self._limit):
            return False
        if self.whole:
            return True
        try:
            await self._take(None)
        except (BodyTooLarge, ClientGone, BodyTimeout, BodyCut):
            return False
        return True

    def cut(self, budget: str) -> None:
        """The budget sheds this body: its read ends (from trio's run loop, not from
        the stack of whoever reported the bytes that passed the bound)."""
        self._cut = budget
        if self._scope is not None:
            self._scope.deadline = -math.inf

    async def _take(self, keep: list[bytes] | None) -> None:
        """Receive the rest of the body, into ``keep`` (counted in the budget) or
        dropped."""
        with trio.CancelScope(deadline=self._deadline) as scope:
            self._scope = scope
            while not self.whole:
                message = await self._receive()
                if message["type"] != "http.request":
                    raise ClientGone
                chunk = message.get("body", b"")
                self._size += len(chunk)
                if not message.get("more_body", False):
                    self.whole = True
                if self._size > self._limit:
                    raise BodyTooLarge
                if keep is not None:
                    keep.append(chunk)
                    if self._budget is not None and not self.whole:
                        self._budget.set(self, self._size)  # (may cut this very body)
                    if self._cut is not None:
                        break
        self._scope = None
        if self._cut is not None:
            raise BodyCut(self._cut)
        if scope.cancelled_caught:
            raise BodyTimeout


def body_refused(exc: Exception, body: RequestBody) -> Response:
    """The answer to a body refused by one of its bounds (the connection then closes)."""
    body.refused = True
    if isinstance(exc, BodyTimeout):
        return Response(408, error_body(
            f"Request body not received within {body.timeout_s:g} s"))
    if isinstance(exc, BodyCut):
        return Response(503, error_body(f"Request body cut: the broker's {exc} was "
                                        "reached and this request held the most"))
    return Response(413, error_body("Request body too large"))


async def answer_and_close(receive: Receive, answer: Callable[[], Awaitable[None]]) -> None:
    """Send an answer that closes the connection, dropping meanwhile what hypercorn
    queued of the body (see the module), until it says the stream closed."""
    closed = trio.Event()

    async def drop_until_closed() -> None:
        while (await receive())["type"] == "http.request":
            pass
        closed.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(drop_until_closed)
        await answer()
        with trio.move_on_after(CLOSE_WAIT_S):
            await closed.wait()
        nursery.cancel_scope.cancel()
