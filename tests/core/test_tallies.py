"""A queue's lifetime tallies and its minute history (core/queue/tallies.py), driven
through the queue core with explicit ``now``: what the queue ``Metrics`` answers."""

from __future__ import annotations

from typing import Any

from tests.core.test_queue import Harness
from trioqueue.core.queue.tallies import MINUTE_MS, MINUTES_KEPT, minute_series

T0 = 1_700_000_000_000 - 1_700_000_000_000 % MINUTE_MS  # a minute's start


def series(h: Harness, kind: str, now: int, start: int = 0, end: int = -1) -> Any:
    return minute_series(h.q.c, kind, now, start, end)


def complete(h: Harness, now: int, n: int = 1) -> None:
    for _ in range(n):
        h.push(now)
        job_id, token = h.take(now, owner="w")
        h.ack(job_id, now, token=token)


def fail_for_good(h: Harness, now: int) -> None:
    h.push(now, maxAttempts=1)
    job_id, token = h.take(now, owner="w")
    h.fail(job_id, now, token=token, error="boom")


def test_lifetime_tallies_and_times() -> None:
    h = Harness()
    h.push(T0)
    h.push(T0 + 100, delay=1_000)
    h.pushb(T0, {}, {})
    job_id, token = h.take(T0 + 50, owner="w")  # waited 50 ms since its runAt
    h.ack(job_id, T0 + 250, token=token)  # ran 200 ms
    c = h.q.c
    assert (c.pushed, c.pulled, c.completed, c.failed) == (4, 1, 1, 0)
    assert c.ran_ms == 200
    ids, tokens = h.pull(T0 + 2_000, 10, owner="w")
    assert len(ids) == 3 and c.pulled == 4
    h.call("ackb", ids, T0 + 2_500, tokens=tokens, results=None, removes=None)
    assert c.completed == 4 and c.ran_ms == 200 + 3 * 500
    h.push(T0, jobId="same")
    h.push(T0, jobId="same")  # a duplicate: not admitted, not counted
    assert c.pushed == 5


def test_retries_are_not_failures_until_the_last() -> None:
    h = Harness()
    h.push(T0, maxAttempts=2)
    job_id, token = h.take(T0, owner="w")
    h.fail(job_id, T0, token=token, error="once")
    assert h.q.c.failed == 0
    job_id, token = h.take(T0 + 60_000, owner="w")
    h.fail(job_id, T0 + 60_000, token=token, error="twice")
    assert h.q.c.failed == 1


def test_minutes_newest_first_zero_filled() -> None:
    h = Harness()
    complete(h, T0, 2)
    fail_for_good(h, T0 + MINUTE_MS)
    complete(h, T0 + 2 * MINUTE_MS + 5, 3)
    now = T0 + 3 * MINUTE_MS + 1
    done = series(h, "completed", now)
    assert done["data"] == [0, 3, 0, 2]
    assert done["count"] == 4
    assert done["meta"] == {"count": 5, "prevTS": float(T0 + 3 * MINUTE_MS),
                            "prevCount": 0}
    assert series(h, "failed", now)["data"] == [0, 0, 1]
    assert series(h, "completed", now, 1, 2)["data"] == [3, 0]
    assert series(h, "completed", now, 3, 10)["data"] == [2]
    assert series(h, "completed", now, 5)["data"] == []


def test_current_minute_counts_before_any_roll() -> None:
    h = Harness()
    complete(h, T0 + 10, 2)
    out = series(h, "completed", T0 + 20)
    assert out["data"] == [2] and out["meta"]["prevCount"] == 2


def test_nothing_counted_is_an_empty_series() -> None:
    h = Harness()
    h.push(T0)
    assert series(h, "completed", T0)["data"] == []
    assert series(h, "failed", T0)["count"] == 0


def test_history_is_bounded_to_two_weeks() -> None:
    h = Harness()
    complete(h, T0)
    complete(h, T0 + 10 * MINUTE_MS)
    later = T0 + (MINUTES_KEPT + 5) * MINUTE_MS
    complete(h, later)
    out = series(h, "completed", later)
    # the first minute fell out; the one ten minutes later is the oldest left
    assert len(h.q.c.minutes.closed) == 1
    assert out["count"] == MINUTES_KEPT - 4
    assert out["data"][0] == 1 and out["data"][-1] == 1 and sum(out["data"]) == 2
    assert out["meta"]["count"] == 3
