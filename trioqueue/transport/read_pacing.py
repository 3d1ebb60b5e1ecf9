"""How long one connection's read may hold the event loop, and what bad frames cost it.

A read (up to 256 KiB) may hold hundreds of frames. Decoded at once, a read of frames
that are cheap to send and dear to decode (msgpack nested 10,000 deep costs 0.1-0.3 ms
to refuse; about 180 bad frames fit a read) held the loop for tens of milliseconds per
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
"""

from __future__ import annotations

from time import perf_counter

from .limits import ConnectionLimits

# Frames decoded between two looks at the clock: a look costs about as much as decoding
# a small frame, and 16 of the cheapest frames take well under a step.
FRAMES_PER_LOOK = 16


class ReadPacer:
    """The clock of one connection's current read."""

    __slots__ = ("step_s", "pause_ratio", "pause_max_s", "started")

    def __init__(self, limits: ConnectionLimits) -> None:
        self.step_s = limits.max_read_step_ms / 1000 or float("inf")
        self.pause_ratio = limits.bad_frame_pause_ratio
        self.pause_max_s = limits.bad_frame_pause_max_ms / 1000
        self.started = 0.0

    def start(self) -> None:
        """A step of decoding begins."""
        self.started = perf_counter()

    def step_is_over(self) -> bool:
        return perf_counter() - self.started > self.step_s

    def pause_after_bad_frames(self, read_started: float) -> float:
        """Seconds to leave the connection unread after a read with bad frames that
        began at ``read_started`` (``perf_counter``)."""
        cost = perf_counter() - read_started
        return min(cost * self.pause_ratio, self.pause_max_s)
