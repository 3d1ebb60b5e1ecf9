"""The queue-wide limits in the sans-IO core: the rate window's arithmetic, the gates a
pull passes, the wake-up a parked pull gets, and the limits across a restart."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core.queue.limits import RateLimit

from .test_queue import NOW, Harness, waiter


def test_window_takes_max_and_frees_each_lease_a_duration_after_it() -> None:
    window = RateLimit.new(10, 1000, None, NOW)
    assert window.available(NOW) == 10
    window.spend(6, NOW)
    window.spend(4, NOW + 300)
    assert window.available(NOW + 300) == 0
    assert window.wait_ms(NOW + 300) == 700  # the first six leave at NOW + 1000
    assert window.available(NOW + 999) == 0
    assert window.available(NOW + 1000) == 6
    assert window.wait_ms(NOW + 1000, 8) == 300  # the other four leave at NOW + 1300
    assert window.available(NOW + 60_000) == 10  # never more than max
    assert window.wait_ms(NOW + 60_000, 11) is None  # more than one window takes


def test_fractional_rates_and_zero() -> None:
    slow = RateLimit.new(0.5, 1000, None, NOW)  # one job every two seconds
    assert slow.available(NOW) == 1
    slow.spend(1, NOW)
    assert slow.wait_ms(NOW) == 2000
    assert slow.available(NOW + 2000) == 1
    above_one = RateLimit.new(2.5, 1000, None, NOW)  # never 3 in a second: 2 a second
    assert above_one.available(NOW) == 2
    closed = RateLimit.new(0, 1000, 5000, NOW)
    assert closed.available(NOW) == 0
    assert closed.wait_ms(NOW) is None
    assert closed.next_token_at(NOW) == NOW + 5000  # only its ttl lifts it


def _most_in_any_window(starts: list[int], duration: int) -> int:
    """The most starts any window ``[t, t + duration)`` holds (one begins at a start)."""
    starts = sorted(starts)
    return max((bisect_left(starts, t + duration) - i for i, t in enumerate(starts)),
               default=0)


def test_no_window_holds_more_than_max_from_the_first() -> None:
    """Ten a second, a pull every 10 ms for three seconds: ten starts in any second,
    the first one included (a full bucket that refills let nineteen through it)."""
    h = Harness()
    for _ in range(100):
        h.push(NOW)
    h.call("set_rate_limit", 10, 1000, None, NOW)
    starts: list[int] = []
    for t in range(NOW, NOW + 3000, 10):
        starts += [t] * len(h.pull(t, 5)[0])
    assert sum(1 for t in starts if t < NOW + 1000) == 10
    assert _most_in_any_window(starts, 1000) == 10
    assert len(starts) == 30


def test_setting_the_limit_again_opens_no_new_window() -> None:
    """Each worker with a ``limiter`` sets the queue's limit when it starts: a second
    worker starting must not hand out a second window's worth at once."""
    h = Harness()
    for _ in range(40):
        h.push(NOW)
    h.call("set_rate_limit", 10, 1000, None, NOW)
    assert len(h.pull(NOW, 10)[0]) == 10
    h.call("set_rate_limit", 10, 1000, None, NOW + 200)  # the second worker starts
    assert h.pull(NOW + 200, 10) == ([], [])
    assert h.call("limits_reply", NOW + 200, None)["rateLimitTtl"] == 800
    assert len(h.pull(NOW + 1000, 10)[0]) == 10


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 6), duration=st.sampled_from([10, 100, 1000]),
       pulls=st.lists(st.tuples(st.integers(0, 400), st.integers(1, 8)), max_size=60),
       reset_at=st.one_of(st.none(), st.integers(0, 59)))
def test_property_no_window_of_duration_holds_more_than_max_starts(
        limit: int, duration: int, pulls: list[tuple[int, int]],
        reset_at: int | None) -> None:
    h = Harness()
    for _ in range(500):
        h.push(NOW)
    h.call("set_rate_limit", limit, duration, None, NOW)
    now, starts = NOW, []
    for i, (dt, count) in enumerate(pulls):
        now += dt
        if i == reset_at:
            h.call("set_rate_limit", limit, duration, None, now)
        got = len(h.pull(now, count)[0])
        # what the window allows is taken: a short pull means the window was full
        in_window = sum(1 for t in starts if t > now - duration)
        assert got == min(count, limit - in_window)
        starts += [now] * got
    assert _most_in_any_window(starts, duration) <= limit


def test_concurrency_counts_active_jobs_of_every_consumer() -> None:
    h = Harness()
    for _ in range(5):
        h.push(NOW)
    h.call("set_concurrency", 2, NOW)
    a, tokens = h.pull(NOW, 1, owner="x")
    b, _ = h.pull(NOW, 3, owner="y")
    assert (len(a), len(b)) == (1, 1)
    assert h.pull(NOW, 1) == ([], [])
    h.ack(a[0], NOW, token=tokens[0])
    assert len(h.pull(NOW, 3)[0]) == 1


def test_rate_limited_pull_wakes_the_queue_when_the_window_frees_only_when_jobs_wait() -> None:
    h = Harness()
    h.call("set_rate_limit", 2, 1000, None, NOW)
    h.q.park(waiter("w", deadline=NOW + 60_000))
    assert h.q.next_deadline() == NOW + 60_000  # no job waits: no wake-up but the pull's
    h.push(NOW)
    h.push(NOW)
    h.push(NOW)
    out = h.tick(NOW)
    assert [a.waiter.handle for a in out] == ["w"]
    h.q.park(waiter("v", deadline=NOW + 60_000))
    h.q.park(waiter("u", deadline=NOW + 60_000))
    assert [a.waiter.handle for a in h.tick(NOW)] == ["v"]  # the window's second job
    assert h.q.next_deadline() == NOW + 1000  # when the first lease leaves the window
    assert h.tick(NOW + 999) == []
    assert [a.waiter.handle for a in h.tick(NOW + 1000)] == ["u"]
    assert h.q.rate_wake is None  # no job waits for a token any more


def test_a_paused_queue_is_not_woken_for_the_rate_window() -> None:
    h = Harness()
    h.call("set_rate_limit", 1, 1000, None, NOW)
    h.push(NOW)
    h.push(NOW)
    h.pull(NOW, 1)
    h.q.park(waiter("w", deadline=NOW + 60_000))
    h.tick(NOW)
    assert h.q.next_deadline() == NOW + 1000
    h.call("set_paused", True, NOW)
    assert h.q.next_deadline() == NOW + 5000  # the stall sweep's, not the token's


def test_limits_are_restored_with_an_empty_window_and_expired_ones_dropped() -> None:
    h = Harness()
    h.call("set_rate_limit", 3, 1000, None, NOW)
    h.call("set_concurrency", 7, NOW)
    h.pull(NOW, 1)
    h.restart(NOW + 10)
    assert h.q.settings.concurrency == 7
    rate = h.q.settings.rate
    assert rate is not None and rate.available(NOW + 10) == 3
    h.call("set_rate_limit", 3, 1000, 100, NOW + 10)
    h.restart(NOW + 20)
    assert h.q.settings.rate is not None
    assert h.call("limits_reply", NOW + 200, None)["rateLimit"] is None
    h.restart(NOW + 300)
    assert h.q.settings.rate is None  # dropped for good, also in storage
