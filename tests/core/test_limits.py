"""The queue-wide limits in the sans-IO core: the token bucket's arithmetic, the gates a
pull passes, the wake-up a parked pull gets, and the limits across a restart."""

from __future__ import annotations

from trioqueue.core.queue.limits import RateLimit

from .test_queue import NOW, Harness, waiter


def test_bucket_starts_full_and_refills_at_its_rate() -> None:
    bucket = RateLimit.new(10, 1000, None, NOW)
    assert bucket.available(NOW) == 10
    bucket.spend(10)
    assert bucket.available(NOW) == 0
    assert bucket.wait_ms(NOW) == 100  # a token every 100 ms
    assert bucket.available(NOW + 99) == 0
    assert bucket.available(NOW + 100) == 1
    assert bucket.wait_ms(NOW + 100, 5) == 400
    assert bucket.available(NOW + 60_000) == 10  # never more than its capacity
    assert bucket.wait_ms(NOW + 60_000, 11) is None  # more than it ever holds


def test_fractional_rates_and_zero() -> None:
    slow = RateLimit.new(0.5, 1000, None, NOW)  # one token every two seconds
    assert slow.available(NOW) == 0
    assert slow.wait_ms(NOW) == 1000  # half a token is there; the rest takes 1 s
    assert slow.available(NOW + 1000) == 1
    closed = RateLimit.new(0, 1000, 5000, NOW)
    assert closed.wait_ms(NOW) is None
    assert closed.next_token_at(NOW) == NOW + 5000  # only its ttl lifts it


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


def test_rate_limited_pull_wakes_the_queue_at_the_next_token_only_when_jobs_wait() -> None:
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
    assert [a.waiter.handle for a in h.tick(NOW)] == ["v"]  # the second token
    assert h.q.next_deadline() == NOW + 500
    assert h.tick(NOW + 499) == []
    assert [a.waiter.handle for a in h.tick(NOW + 500)] == ["u"]
    assert h.q.rate_wake is None  # no job waits for a token any more


def test_a_paused_queue_is_not_woken_for_tokens() -> None:
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


def test_limits_are_restored_with_a_full_bucket_and_expired_ones_dropped() -> None:
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
