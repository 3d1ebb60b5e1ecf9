"""The broker's clock: wall time derived from trio's clock, so MockClock moves both;
and the watch that notices when the broker's own loop was paused."""

from __future__ import annotations

import logging
import math
import time

import trio

from ..core.clock import Clock

log = logging.getLogger("trioqueue.clock")


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


# How often the watch looks at trio's clock, and how long the loop may go unseen before
# that counts as a pause of the whole broker rather than a busy moment. Half the
# minimum: a running loop's looks are never a minimum apart, even with a late wake-up;
# each of the watch's own looks costs ~150,000 instructions (at 0.25 s they were half
# of an idle broker's work).
PAUSE_TICK_S = 0.5
PAUSE_MIN_S = 1.0


class PauseWatch:
    """Notices that the broker's own loop stood still: its clock jumped, nothing ran.

    Each queue actor looks (:meth:`check`) at the start of every step, and :meth:`run`
    looks whenever nobody else has for ``PAUSE_TICK_S``. When more than ``PAUSE_MIN_S``
    passed since the last look, the loop did not run meanwhile (the watch would have
    looked): the process was stopped (SIGSTOP, a frozen VM) or one step held the loop.
    The first look after it, whoever makes it, records the pause: ``pauses`` counts
    them and ``resumed_ms`` is when the last one ended. An actor that sees ``pauses``
    change tells its queue before its step judges any lock (``QueueState.hold_expiry(
    resumed_ms, grace_ms)``), so the heartbeats that waited in the sockets during the
    pause are applied before a lock can expire.

    A look costs one read of trio's clock per step. The watch's own looks cost a wake-up
    of its task each (about 150,000 instructions, trio's deadline and cancellation
    machinery), so a busy broker's looks put the watch's next one off instead: a look
    made more than half a tick after the last put-off moves the watch's deadline to a
    tick after it (a deadline move is a few thousand instructions, at most twice a
    tick). Between two looks of a running loop there is still at most one tick.
    """

    def __init__(self, clock: Clock, grace_s: float) -> None:
        self._clock = clock
        self.grace_ms = math.ceil(grace_s * 1000)
        self.pauses = 0
        self.resumed_ms = 0
        self._last: int | None = None  # wall ms of the last look; None: not running
        self._sleep: trio.CancelScope | None = None  # the watch's wait, while it waits
        self._put_off_at = math.inf  # wall ms from which a look puts the watch's off
        self.own_looks = 0  # looks the watch's task made (the others were put off)

    def check(self, now_ms: int | None = None) -> int:
        """Look at the clock (``now_ms``: a reading of it the caller just took, as an
        actor's step has: a read of trio's clock is a chain of three calls); the number
        of pauses seen so far."""
        last = self._last
        if last is not None:
            now = self._clock.now_ms() if now_ms is None else now_ms
            if now - last > PAUSE_MIN_S * 1000:
                self.pauses += 1
                self.resumed_ms = now
                log.warning("the broker's loop did not run for %.1f s (stopped or held): "
                            "no lease expires in the next %.1f s, so holders can renew",
                            (now - last) / 1000, self.grace_ms / 1000)
            self._last = now
            if now >= self._put_off_at:
                self._put_off(now)
        return self.pauses

    def _put_off(self, now: int) -> None:
        """Someone looked at ``now``: the watch's own look can wait a tick from it."""
        self._put_off_at = now + PAUSE_TICK_S * 500
        sleep = self._sleep
        if sleep is not None:
            sleep.deadline = self._clock.deadline_for(now + PAUSE_TICK_S * 1000)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        now = self._last = self._clock.now_ms()
        task_status.started()
        try:
            while True:
                with trio.CancelScope() as sleep:
                    self._sleep = sleep
                    self._put_off(now)
                    await trio.sleep_forever()
                self._sleep = None
                self.own_looks += 1
                now = self._clock.now_ms()
                self.check(now)
        finally:
            # nobody looks any more: a gap would mean nothing
            self._last = None
            self._sleep = None
            self._put_off_at = math.inf
