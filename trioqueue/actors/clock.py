"""The broker's clock: wall time derived from trio's clock, so MockClock moves both."""

from __future__ import annotations

import time

import trio

from ..core.clock import Clock


class TrioClock(Clock):
    """Wall milliseconds = the wall time at start + trio time elapsed since then.

    Deriving wall time from ``trio.current_time()`` keeps every timer and every
    timestamp on one time line: under ``MockClock`` a 30 s lease expires and the job's
    timestamps move by 30 s together. A wall-clock step (NTP, a VM resumed, an admin)
    is not followed while the broker runs: leases, heartbeats, timeouts and delays are
    all judged on the monotonic clock, so a step can neither expire a lease early nor
    release a delayed job twice. The wall clock is read again at the next start, so
    delays (``runAt``, an absolute time) then follow it; ``wall_offset_ms`` lets a test
    start a broker as if the wall clock had stepped.
    """

    def __init__(self, wall_offset_ms: int = 0) -> None:
        self._wall0 = time.time() * 1000.0 + wall_offset_ms
        self._trio0 = trio.current_time()

    def now_ms(self) -> int:
        return int(self._wall0 + (trio.current_time() - self._trio0) * 1000.0)

    def deadline_for(self, wall_ms: float) -> float:
        return self._trio0 + (wall_ms - self._wall0) / 1000.0
