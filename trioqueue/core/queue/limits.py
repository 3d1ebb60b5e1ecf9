"""A queue's rate limit and concurrency cap: the gates every pull of the queue passes.

Both bind every consumer of the queue together, whatever connection or client it pulls
over, because they are asked where jobs are leased (:func:`allowance`, called once per
pull by :func:`~.consuming.pull`), not in the workers:

- the **concurrency cap** is the queue's active count against the limit. A slot is held
  from pull until the job leaves ``active`` by any path (ACK, FAIL, retry, dead letter,
  MoveToWait, lock expiry, release on disconnect, Obliterate...) without any
  bookkeeping of its own: the active counter (``lifecycle.count``) is already exact on
  every one of those paths, so no path can forget to give a slot back;
- the **rate limit** is a sliding window: at most ``max`` jobs leased in any
  ``duration`` ms, the first window included (a token bucket that starts full and
  refills as it goes lets nearly twice ``max`` through its first window). The queue
  keeps the times of its recent leases (:class:`RateLimit`); a lease is allowed while
  fewer than ``max`` fall in the last ``duration``. Setting the limit again (each
  worker with a ``limiter`` does when it starts) keeps those times, so it opens no new
  burst. An optional ``ttl`` ends the limit; it is dropped lazily, at the next pull or
  read of the limits (no timer of its own).

A pull the gates leave short parks as any empty pull does. A freed slot is seen by the
tick that follows the batch that freed it (``QueueState.tick`` serves parked pulls after
every batch), and only the first parked pull gets it. A pull that leaves the window
full while jobs are ready names the moment its oldest lease leaves it (:func:`spent`,
:meth:`RateLimit.next_token_at`), which ``next_deadline`` wakes the queue for while
pulls are parked: no polling loop, no herd.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import QueueState

DEFAULT_RATE_DURATION_MS = 1000


class RateLimit:
    """At most ``slots`` leases in any ``window`` ms (``max`` per ``duration`` ms).

    A whole ``max`` gives ``slots = max`` in ``window = duration``. No window may go
    over a fraction either: above 1 it counts as its whole part (2.5 a second is 2 a
    second); under 1 it is one job per ``duration / max`` (0.5 a second: one per 2 s);
    0 stays closed. The recent leases are kept as runs ``[ms,
    jobs]`` (the jobs of one pull, and of pulls in the same millisecond, share a run), so
    they take at most ``min(slots, window)`` entries, and a pull drops the runs that
    left the window: amortised O(1) per pull.
    """

    __slots__ = ("max", "duration", "expires_at", "slots", "window", "_runs", "_inside")

    def __init__(self, limit: float, duration: int, expires_at: int | None) -> None:
        self.max = limit  # jobs per ``duration``, as set (bunqueue's ``max``)
        self.duration = duration
        self.expires_at = expires_at  # epoch ms at which the limit ends (ttl); None: never
        if limit >= 1:
            self.slots = int(limit)
            self.window = duration
        else:
            self.slots = 1 if limit > 0 else 0
            self.window = round(duration / limit) if limit > 0 else duration
        self._runs: deque[list[int]] = deque()  # [epoch ms, jobs leased then], oldest first
        self._inside = 0  # jobs in _runs

    @classmethod
    def new(cls, limit: float, duration: int, ttl: int | None, now: int,
            before: RateLimit | None = None) -> RateLimit:
        """A limit set at ``now``; the leases of the limit it replaces (``before``) still
        count, so setting it again does not reopen the window."""
        rate = cls(limit, duration, None if ttl is None else now + ttl)
        if before is not None:
            rate._runs, rate._inside = before._runs, before._inside
        return rate

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def _forget(self, now: int) -> None:
        """Drop the runs that left the window ``(now - window, now]``."""
        runs = self._runs
        edge = now - self.window
        while runs and runs[0][0] <= edge:
            self._inside -= runs.popleft()[1]

    def available(self, now: int) -> int:
        """How many jobs may be leased at ``now``."""
        self._forget(now)
        return max(0, self.slots - self._inside)

    def spend(self, n: int, now: int) -> None:
        """``n`` jobs were leased at ``now``."""
        if n <= 0:
            return
        runs = self._runs
        if runs and runs[-1][0] >= now:  # the same ms (or a clock that stepped back)
            runs[-1][1] += n
        else:
            runs.append([now, n])
        self._inside += n

    def wait_ms(self, now: int, n: int = 1) -> int | None:
        """How long until ``n`` jobs may be leased; None: never (a limit of 0, or more
        jobs than one window takes). O(runs): for GetQueueLimits, not for pulls."""
        free = self.available(now)
        if free >= n:
            return 0
        if n > self.slots:
            return None
        missing = n - free
        for at, jobs in self._runs:
            missing -= jobs
            if missing <= 0:
                return max(1, at + self.window - now)
        return None  # (not reached: the runs hold the jobs that fill the window)

    def next_token_at(self, now: int) -> int | None:
        """When the next job may be leased (epoch ms), or the ttl if that comes first."""
        wait = self.wait_ms(now)
        if wait is None:
            return self.expires_at  # only the ttl can lift a limit of 0
        at = now + wait
        return at if self.expires_at is None else min(at, self.expires_at)

    def to_meta(self) -> dict[str, Any]:
        # The recent leases are not stored: a restarted queue starts with an empty
        # window, as a limit that was just set.
        return {"max": self.max, "duration": self.duration, "expiresAt": self.expires_at}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RateLimit:
        return cls(meta["max"], int(meta["duration"]), meta.get("expiresAt"))


def allowance(q: QueueState, count: int, now: int) -> int:
    """How many of ``count`` jobs the queue's limits let one pull lease now.

    Asked only when a limit is set (``settings.gated``), once per pull: the jobs are then
    leased without a per-job check, and :func:`spent` records them after."""
    settings = q.settings
    q.rate_wake = None
    rate = settings.rate
    if rate is not None and rate.expired(now):
        clear_rate_limit(q, now)
        rate = None
    ready = bool(q.c.waiting or q.c.prioritized)
    cap = settings.concurrency
    if cap is not None:
        count = min(count, max(0, cap - q.c.active))
        if not count and ready:  # work was there; the cap kept it
            q.announce("concurrency:rejected", now)
            return 0
    if rate is not None:
        count = min(count, rate.available(now))
        if not count and ready:
            q.announce("ratelimit:rejected", now)
    return count


def spent(q: QueueState, leased: int, now: int) -> None:
    """The pull leased ``leased`` jobs: the window records them. If that filled it
    while jobs are ready, the queue wakes when its oldest lease leaves it (for the pulls
    parked by then); a window with room left needs no wake-up: jobs, not room, were
    missing."""
    rate = q.settings.rate
    if rate is None:
        return
    rate.spend(leased, now)
    if (q.c.waiting or q.c.prioritized) and rate.available(now) == 0:
        q.rate_wake = rate.next_token_at(now)


def set_rate_limit(q: QueueState, limit: float, duration: int, ttl: int | None,
                   now: int) -> None:
    q.settings.rate = RateLimit.new(limit, duration, ttl, now, before=q.settings.rate)
    q.settings.regate()
    q.store_settings()
    q.emit("ratelimit-set", "", now, max=limit, duration=duration, ttl=ttl)


def clear_rate_limit(q: QueueState, now: int) -> None:
    """RateLimitClear, or a limit past its ttl."""
    q.rate_wake = None
    if q.settings.rate is not None:
        q.settings.rate = None
        q.settings.regate()
        q.store_settings()
        q.emit("ratelimit-cleared", "", now)


def set_concurrency(q: QueueState, limit: int | None, now: int) -> None:
    if q.settings.concurrency != limit:
        q.settings.concurrency = limit
        q.settings.regate()
        q.store_settings()
        if limit is None:
            q.emit("concurrency-cleared", "", now)
        else:
            q.emit("concurrency-set", "", now, limit=limit)


def limits_reply(q: QueueState, now: int, max_jobs: int | None) -> dict[str, Any]:
    """``GetQueueLimits``: what is set and where it stands now.

    ``rateLimitTtl``: -2 with no rate limit; else what remains of the limit's ttl, or,
    without a ttl, how long until ``maxJobs`` (default 1) jobs may be leased (0: now; -1:
    never, a limit of 0 or more than one window takes). ``maxed``: every concurrency
    slot taken."""
    rate = q.settings.rate
    if rate is not None and rate.expired(now):
        clear_rate_limit(q, now)
        rate = None
    if rate is None:
        ttl: float = -2
        rate_wire: dict[str, Any] | None = None
    else:
        rate_wire = {"max": rate.max, "duration": rate.duration}
        if rate.expires_at is not None:
            ttl = rate.expires_at - now
        else:
            wait = rate.wait_ms(now, max(1, max_jobs or 1))
            ttl = -1 if wait is None else wait
    cap = q.settings.concurrency
    return {"rateLimit": rate_wire, "rateLimitTtl": ttl, "concurrencyLimit": cap,
            "maxed": cap is not None and q.c.active >= cap}
