"""A queue's lifetime tallies and its per-minute history of completed and failed jobs
(the queue form of ``Metrics``).

The hot path pays integer adds once per batch (``pushed`` per PUSH/PUSHB, ``pulled``
per pull, ``completed`` and ``ran_ms`` per ACK/ACKB) and one add per acknowledged job
(its pull time, summed for the batch's run time). The
minute history is not a bucket bumped per job: :func:`roll_minute` runs when a job
completes or fails in a later minute than the last one seen, and files the difference
of the lifetime totals since that minute's start under it. Between two rolls every
count happened in the minute of the first (a later minute would have rolled), so no
count is filed under the wrong minute, and a minute nobody completed anything in holds
no entry at all: the history is sparse and zero-filled only when read.

Tallies live in memory and start at zero when the broker starts, as bunqueue's do.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .lifecycle import Counters
    from .state import QueueState

MINUTE_MS = 60_000
# Minutes of history kept per queue and kind (two weeks, bunqueue's bound).
MINUTES_KEPT = 20_160
COMPLETED_KIND = "completed"
FAILED_KIND = "failed"


class MinuteHistory:
    """The minutes with completions or failures, newest last: ``(minute, completed,
    failed)``, at most :data:`MINUTES_KEPT` (older ones are dropped as time moves on)."""

    __slots__ = ("minute", "completed_at_start", "failed_at_start", "closed")

    def __init__(self) -> None:
        self.minute = 0  # the minute (epoch ms // MINUTE_MS) of the open entry
        self.completed_at_start = 0  # the lifetime totals when that minute began
        self.failed_at_start = 0
        self.closed: deque[tuple[int, int, int]] = deque(maxlen=MINUTES_KEPT)


def roll_minute(c: Counters, now: int) -> None:
    """Close the open minute if ``now`` is past it: file what it counted, open the new
    one (``c.minute_end_ms`` says when the next roll is due)."""
    history = c.minutes
    minute = now // MINUTE_MS
    done = c.completed - history.completed_at_start
    failed = c.failed - history.failed_at_start
    if done or failed:
        history.closed.append((history.minute, done, failed))
    history.minute = minute
    history.completed_at_start = c.completed
    history.failed_at_start = c.failed
    c.minute_end_ms = (minute + 1) * MINUTE_MS
    closed = history.closed
    while closed and closed[0][0] <= minute - MINUTES_KEPT:
        closed.popleft()


def count_completed(c: Counters, jobs: int, now: int, ran_ms: int) -> None:
    """``jobs`` jobs completed (one ACK, or an ACKB's), having run ``ran_ms`` together."""
    if now >= c.minute_end_ms:
        roll_minute(c, now)
    c.completed += jobs
    c.ran_ms += ran_ms


def count_failed(q: QueueState, now: int) -> None:
    """A job failed for good (dead-lettered, or removed on failure)."""
    c = q.c
    if now >= c.minute_end_ms:
        roll_minute(c, now)
    c.failed += 1


def minute_series(c: Counters, kind: str, now: int, start: int, end: int
                  ) -> dict[str, Any]:
    """The queue ``Metrics`` reply body: one count per minute, newest first (the
    current minute first), zero-filled back to the oldest minute kept with a count
    (none: no minutes at all); ``start``/``end`` index that list as BullMQ's getMetrics
    does (``end`` -1: to its last)."""
    if now >= c.minute_end_ms:
        roll_minute(c, now)
    history = c.minutes
    completed = kind == COMPLETED_KIND
    total = c.completed if completed else c.failed
    current = total - (history.completed_at_start if completed else history.failed_at_start)
    closed = [(minute, done if completed else failed)
              for minute, done, failed in history.closed if (done if completed else failed)]
    if closed:
        span = history.minute - closed[0][0] + 1
    else:
        span = 1 if current else 0
    first = max(start, 0)
    last = span - 1 if end < 0 else min(end, span - 1)
    data = [0] * max(0, last - first + 1)
    if first == 0 and data:
        data[0] = current
    for minute, count in closed:
        age = history.minute - minute
        if first <= age <= last:
            data[age - first] = count
    return {"meta": {"count": total, "prevTS": float(history.minute * MINUTE_MS),
                     "prevCount": current},
            "data": data, "count": len(data)}
