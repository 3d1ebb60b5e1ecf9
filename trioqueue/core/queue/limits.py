"""A queue's rate limit and concurrency cap: the gates every pull of the queue passes.

Both bind every consumer of the queue together, whatever connection or client it pulls
over, because they are asked where jobs are leased (:func:`allowance`, called once per
pull by :func:`~.consuming.pull`), not in the workers:

- the **concurrency cap** is the queue's active count against the limit. A slot is held
  from pull until the job leaves ``active`` by any path (ACK, FAIL, retry, dead letter,
  MoveToWait, lock expiry, release on disconnect, Obliterate...) without any
  bookkeeping of its own: the active counter (``lifecycle._count``) is already exact on
  every one of those paths, so no path can forget to give a slot back;
- the **rate limit** is a token bucket (bunqueue's): capacity ``max``, refilled at
  ``max`` tokens per ``duration`` ms, full when set, one token spent per job leased and
  never given back. An optional ``ttl`` ends the limit; it is dropped lazily, at the
  next pull or read of the limits (no timer of its own).

A pull the gates leave short parks as any empty pull does. A freed slot is seen by the
tick that follows the batch that freed it (``QueueState.tick`` serves parked pulls after
every batch), and only the first parked pull gets it. A pull that leaves the bucket
empty while jobs are ready names the moment the next token comes (:func:`spent`,
:meth:`RateLimit.next_token_at`), which ``next_deadline`` wakes the queue for while
pulls are parked: no polling loop, no herd.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .state import QueueState

DEFAULT_RATE_DURATION_MS = 1000
# Tokens are fractions; a refill that should reach a whole token may land a hair below
# it in floating point, which must not cost a millisecond's wait.
_EPSILON = 1e-9


@dataclass(slots=True)
class RateLimit:
    max: float  # tokens per window, and the bucket's capacity (at least one token)
    duration: int  # ms for ``max`` tokens to refill
    expires_at: int | None  # epoch ms at which the limit ends by itself (ttl); None: never
    tokens: float  # what the bucket holds at ``refilled_at``
    refilled_at: int

    @classmethod
    def new(cls, limit: float, duration: int, ttl: int | None, now: int) -> RateLimit:
        return cls(limit, duration, None if ttl is None else now + ttl, limit, now)

    @property
    def capacity(self) -> float:
        # A limit under 1 (0.5 a second: a job every 2 s) still needs a whole token to
        # lease one; 0 stays closed.
        return max(self.max, 1.0) if self.max > 0 else 0.0

    def expired(self, now: int) -> bool:
        return self.expires_at is not None and now >= self.expires_at

    def available(self, now: int) -> int:
        """Whole tokens in the bucket at ``now`` (refilling it first)."""
        if now > self.refilled_at:
            self.tokens = min(self.capacity, self.tokens
                              + (now - self.refilled_at) * self.max / self.duration)
            self.refilled_at = now
        return int(self.tokens + _EPSILON)

    def spend(self, n: int) -> None:
        self.tokens = max(0.0, self.tokens - n)

    def wait_ms(self, now: int, n: int = 1) -> int | None:
        """How long until ``n`` tokens are in the bucket; None: never (a limit of 0,
        or more tokens than the bucket holds)."""
        if self.available(now) >= n:
            return 0
        if self.max <= 0 or n > self.capacity + _EPSILON:
            return None
        return max(1, math.ceil((n - self.tokens) * self.duration / self.max - _EPSILON))

    def next_token_at(self, now: int) -> int | None:
        wait = self.wait_ms(now)
        if wait is None:
            return self.expires_at  # only the ttl can lift a limit of 0
        at = now + wait
        return at if self.expires_at is None else min(at, self.expires_at)

    def to_meta(self) -> dict[str, Any]:
        # The bucket's level is not stored: a restarted queue starts it full, as a limit
        # that was just set.
        return {"max": self.max, "duration": self.duration, "expiresAt": self.expires_at}

    @classmethod
    def from_meta(cls, meta: dict[str, Any]) -> RateLimit:
        limit = meta["max"]
        return cls(limit, int(meta["duration"]), meta.get("expiresAt"), float(limit), 0)


def allowance(q: QueueState, count: int, now: int) -> int:
    """How many of ``count`` jobs the queue's limits let one pull lease now.

    Asked only when a limit is set (``settings.gated``), once per pull: the jobs are then
    leased without a per-job check, and :func:`spent` takes their tokens after."""
    settings = q.settings
    q.rate_wake = None
    rate = settings.rate
    if rate is not None and rate.expired(now):
        clear_rate_limit(q, now)
        rate = None
    cap = settings.concurrency
    if cap is not None:
        count = min(count, max(0, cap - q.c.active))
    if rate is not None:
        count = min(count, rate.available(now))
    return count


def spent(q: QueueState, leased: int, now: int) -> None:
    """The pull leased ``leased`` jobs: their tokens go. If that emptied the bucket
    while jobs are ready, the queue wakes when the next token comes (for the pulls
    parked by then); a bucket with a token left needs no wake-up: jobs, not tokens,
    were missing."""
    rate = q.settings.rate
    if rate is None:
        return
    if leased:
        rate.spend(leased)
    if (q.c.waiting or q.c.prioritized) and rate.available(now) == 0:
        q.rate_wake = rate.next_token_at(now)


def set_rate_limit(q: QueueState, limit: float, duration: int, ttl: int | None,
                   now: int) -> None:
    q.settings.rate = RateLimit.new(limit, duration, ttl, now)
    q.settings.regate()
    q.store_settings()
    q._emit("ratelimit-set", "", now, max=limit, duration=duration, ttl=ttl)


def clear_rate_limit(q: QueueState, now: int) -> None:
    """RateLimitClear, or a limit past its ttl."""
    q.rate_wake = None
    if q.settings.rate is not None:
        q.settings.rate = None
        q.settings.regate()
        q.store_settings()
        q._emit("ratelimit-cleared", "", now)


def set_concurrency(q: QueueState, limit: int | None, now: int) -> None:
    if q.settings.concurrency != limit:
        q.settings.concurrency = limit
        q.settings.regate()
        q.store_settings()
        if limit is None:
            q._emit("concurrency-cleared", "", now)
        else:
            q._emit("concurrency-set", "", now, limit=limit)


def limits_reply(q: QueueState, now: int, max_jobs: int | None) -> dict[str, Any]:
    """``GetQueueLimits``: what is set and where it stands now.

    ``rateLimitTtl``: -2 with no rate limit; else what remains of the limit's ttl, or,
    without a ttl, how long until ``maxJobs`` (default 1) tokens are there (0: now; -1:
    never, a limit of 0 or more than the bucket holds). ``maxed``: every concurrency slot
    taken."""
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
