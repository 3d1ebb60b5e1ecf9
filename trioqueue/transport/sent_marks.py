"""How far a connection's sender task got, so shutdown can wait for its notice.

``server:shutdown`` is queued for every WebSocket and SSE subscriber at once, behind
whatever each had queued already; their sender tasks send it when they come to it. The
server then waits until each of those connections has sent everything it had queued
when the notice was told (or closed), within ``shutdown_notice_s``, and only then
closes them: the notice leaves however far behind a reader was, rather than after a
fixed number of scheduler passes that a backlog outlasts.
"""

from __future__ import annotations

import trio


class SentCount:
    """Frames a connection queued for its sender, and how many of them are done with
    (sent, or dropped when the connection was cut)."""

    __slots__ = ("queued", "done", "closed", "_moved")

    def __init__(self) -> None:
        self.queued = 0
        self.done = 0
        self.closed = False
        self._moved: trio.Event | None = None  # made only while someone waits

    def settle(self, frames: int) -> None:
        self.done += frames
        self._wake()

    def close(self) -> None:
        self.closed = True
        self._wake()

    def _wake(self) -> None:
        moved, self._moved = self._moved, None
        if moved is not None:
            moved.set()

    async def reach(self, mark: int) -> None:
        """Return once the first ``mark`` frames are done with, or the connection closed."""
        while self.done < mark and not self.closed:
            if self._moved is None:
                self._moved = trio.Event()
            await self._moved.wait()


class Senders:
    """The connections whose frames a sender task sends (WebSocket sessions, SSE
    streams): each adds its count while it serves and discards it as it ends."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: set[SentCount] = set()

    def add(self, count: SentCount) -> None:
        self._counts.add(count)

    def discard(self, count: SentCount) -> None:
        self._counts.discard(count)

    async def sent(self) -> None:
        """Wait until every connection sent what it had queued at the call."""
        marks = [(count, count.queued) for count in self._counts]
        for count, mark in marks:
            await count.reach(mark)
