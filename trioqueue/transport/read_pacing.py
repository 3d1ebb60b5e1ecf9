"""How long one connection's read may hold the event loop, and what bad frames cost it.

A read (up to 256 KiB) may hold hundreds of frames. Decoded at once, a read of frames
that are cheap to send and dear to decode (msgpack nested 10,000 deep, refused only
after a walk of it; a read holds many of them) held the loop for tens of milliseconds per
read, and four connections sending them flat out kept every other client waiting
behind all four in each pass of the scheduler. So:

- a read is decoded in steps of at most ``max_read_step_ms``: past it the frames left
  wait for the next step, and every other task runs between the two (the frames keep
  their order; each step's messages are one batch for the session);
- a read in which the session answered frames as malformed, unknown or unauthenticated
  (no working client sends them) pauses the connection afterwards for
  ``bad_frame_pause_ratio`` times what the read cost, at most ``bad_frame_pause_max_ms``:
  a client that sends garbage flat out gets a bounded share of the broker, while one bad
  frame of a working client costs it microseconds.

The pauses are counted on one clock for the whole broker (:class:`BadFrameClock`, in the
shell): with a clock per connection, four connections sending garbage each got a fifth
of the loop, over half of the broker's CPU together; on one
clock they take turns, and together get ``1 / (1 + bad_frame_pause_ratio)`` of it.
"""

from __future__ import annotations

from time import perf_counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .limits import ConnectionLimits

# Frames decoded between two looks at the clock: a look costs about as much as decoding
# a small frame, and 16 of the cheapest frames take well under a step.
FRAMES_PER_LOOK = 16


class BadFrameClock:
    """When the reads with bad frames of all connections have paid for their work.

    Each such read moves the clock on by ``ratio`` times its cost, from now or from
    where the clock already is, whichever is later; its connection stays unread until
    then, at most ``max_s``. So the connections that send garbage wait for each other,
    and the clock never runs more than ``max_s`` ahead (a connection's wait is bounded,
    and the debt of a past flood is not charged to a client that errs once later).
    """

    __slots__ = ("ratio", "max_s", "until")

    def __init__(self, ratio: float, max_s: float) -> None:
        self.ratio = ratio
        self.max_s = max_s
        self.until = 0.0  # perf_counter seconds

    def pause_s(self, cost_s: float, now: float) -> float:
        """Charge one read's ``cost_s``: the seconds its connection stays unread."""
        start = self.until if self.until > now else now
        self.until = min(start + cost_s * self.ratio, now + self.max_s)
        return self.until - now

    def pause_after(self, started: float) -> float:
        """:meth:`pause_s` for a read (TCP) or message (WebSocket) with refused frames
        that began at ``started`` (``perf_counter``) and ends now."""
        now = perf_counter()
        return self.pause_s(now - started, now)


class ReadPacer:
    """The clock of one connection's current read."""

    __slots__ = ("step_s", "started")

    def __init__(self, limits: ConnectionLimits) -> None:
        self.step_s = limits.max_read_step_ms / 1000 or float("inf")
        self.started = 0.0

    def start(self) -> None:
        """A step of decoding begins."""
        self.started = perf_counter()

    def step_is_over(self) -> bool:
        return perf_counter() - self.started > self.step_s
