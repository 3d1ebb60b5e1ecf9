"""Keep polling the sockets for a moment after each read (standalone broker only).

Waking a process that sleeps in ``epoll_wait`` costs time the process never sees: a
blocking ping-pong of two Python processes over loopback takes several times as long
a round trip as when one side polls instead (``scripts/ping_pong.py``).
A client that sends one request at a time (``await queue.add(...)`` in a loop) pays
that wake-up on every request it sends. So after each socket read the broker keeps its
event loop polling, one pass of the loop after another, for ``Config.idle_spin_ms``;
the client's next request, if it comes within that window, is read without a wake-up.

A pass of trio's loop with nothing but this task to run is a non-blocking ``epoll_wait``
and one checkpoint, so a read waits at most one such pass. The price is CPU while
traffic lasts: a broker serving one request at a time, back to back, keeps one core
busy; an idle broker spins ``idle_spin_ms`` after its last read and then sleeps as
before. The spinning task only ever checkpoints, so it holds no other task up.
"""

from __future__ import annotations

from time import perf_counter

import trio


class IdleSpin:
    """``poke`` after each read; ``run`` (a task) polls until the window has passed."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._until = 0.0  # perf_counter() time the polling stops at
        self._parked: trio.Event | None = None  # set while run() sleeps
        self._closed = False
        self.spins = 0  # passes polled, for tests and benchmarks

    def poke(self, now: float) -> None:
        """A read happened at ``now`` (perf_counter): poll until ``now + window_s``."""
        self._until = now + self.window_s
        parked = self._parked
        if parked is not None:
            self._parked = None
            parked.set()

    def close(self) -> None:
        """Make :meth:`run` return (the server is stopping: nothing left to poll for)."""
        self._closed = True
        self.poke(0.0)

    async def run(self) -> None:
        """Poll while inside the window, sleep outside it, until :meth:`close`."""
        checkpoint = trio.lowlevel.checkpoint
        while not self._closed:
            if perf_counter() >= self._until:
                parked = self._parked = trio.Event()
                await parked.wait()
                continue
            self.spins += 1
            await checkpoint()
