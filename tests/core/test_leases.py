"""Lease timing in the core: a lease is never judged over early through the millisecond
clock, and a pause of the broker itself lets holders renew before locks expire.

Times are plain integers, as the actor passes them: each is a reading of a clock that
truncates real time to whole milliseconds, so a reading ``r`` stands for a real instant
somewhere in ``[r, r + 1)``.
"""

from __future__ import annotations

import math

import pytest

from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import STALL_CHECK_MS
from trioqueue.testing.queue import QueueHarness

NOW = 1_764_000_000_000


def push(h: QueueHarness, now: int, **fields: object) -> str:
    spec = parse_job_input({"data": None, **fields}, custom_id_key="jobId")
    ids: list[str] = h.call("push", [spec], now)
    return ids[0]


def take(h: QueueHarness, now: int, lock_ttl: float) -> tuple[str, str]:
    jobs, tokens = h.call("pull", now, count=1, owner="w", lock_ttl=lock_ttl, conn=None)
    return str(jobs[0]["id"]), tokens[0]


def state(h: QueueHarness, job_id: str, now: int) -> str:
    return h.q.state_of(job_id, now)


# ----------------------------------------------------------------------------- ms rounding


def surely_over(granted: int, ttl: float, reading: int) -> bool:
    """Whether a lease of ``ttl`` ms granted at reading ``granted`` has run out for every
    pair of real instants those two readings may stand for."""
    latest_grant = granted + 1  # exclusive: the grant was before granted + 1
    earliest_now = reading
    return earliest_now >= latest_grant + ttl


def might_be_running(granted: int, ttl: float, reading: int) -> bool:
    return not surely_over(granted, ttl, reading)


@pytest.mark.parametrize("ttl", [1, 2, 100, 1000, 30_000, 999.5, 1000.25])
@pytest.mark.parametrize("renew", [False, True])
def test_a_lease_never_expires_before_its_ttl_at_ms_boundaries(ttl: float,
                                                               renew: bool) -> None:
    h = QueueHarness()
    push(h, NOW)
    granted = NOW
    job_id, token = take(h, NOW, ttl)
    if renew:  # a renewal starts the lease again from its own reading
        granted = NOW + 1
        assert h.call("extend_lock", job_id, granted, token=token, duration=ttl)
    end = granted + math.ceil(ttl)
    for reading in range(end - 2, end + 3):
        h.call("tick", reading)
        if might_be_running(granted, ttl, reading):
            assert state(h, job_id, reading) == "active", (
                f"a {ttl} ms lease from reading {granted} ended at reading {reading}")
        else:
            assert state(h, job_id, reading) == "waiting"
            break
    else:
        raise AssertionError("the lease never ended")
    # The first reading that ends it is the first one past every possible end.
    assert reading == granted + math.ceil(ttl) + 1


def test_a_renewal_at_the_last_ms_of_a_lease_is_accepted() -> None:
    h = QueueHarness()
    job_id = push(h, NOW)
    _, token = take(h, NOW, 1000)
    # Reading NOW + 1000 may be real NOW + 1000.0 for a lease that began at NOW + 0.9.
    assert h.call("heartbeat", job_id, NOW + 1000, token=token, duration=None)
    h.call("tick", NOW + 2000)
    assert state(h, job_id, NOW + 2000) == "active"
    assert not h.call("extend_lock", job_id, NOW + 2001, token=token, duration=1000)
    h.call("tick", NOW + 2001)
    assert state(h, job_id, NOW + 2001) == "waiting"


def test_the_actor_wakes_for_a_lock_when_it_is_surely_over() -> None:
    h = QueueHarness()
    push(h, NOW)
    take(h, NOW, 500)
    assert h.q.next_deadline() == NOW + 501


@pytest.mark.parametrize("ttl", [0, -5])
def test_a_lease_of_zero_or_less_still_ends_at_once(ttl: int) -> None:
    h = QueueHarness()
    job_id = push(h, NOW)
    take(h, NOW, ttl)
    h.call("tick", NOW)
    assert state(h, job_id, NOW) == "waiting"


# ----------------------------------------------------------------------------- a broker pause

PAUSE_MS = 40_000
GRACE_MS = 5_000


def paused_with_two_holders() -> tuple[QueueHarness, list[tuple[str, str]], int]:
    """Two jobs under 30 s leases, renewed every second until the broker stopped for
    40 s; the actor saw the pause at ``resumed`` (both leases ran out during it)."""
    h = QueueHarness()
    push(h, NOW)
    push(h, NOW)
    held = [take(h, NOW, 30_000), take(h, NOW, 30_000)]
    for t in range(NOW + 1000, NOW + 5001, 1000):
        for job_id, token in held:
            assert h.call("heartbeat", job_id, t, token=token, duration=None)
    resumed = NOW + 5000 + PAUSE_MS
    h.call("hold_expiry", resumed, GRACE_MS)
    return h, held, resumed


def test_after_a_pause_a_holder_that_renews_within_the_grace_keeps_its_job() -> None:
    h, [(kept, token), (silent, _)], resumed = paused_with_two_holders()
    h.call("tick", resumed)  # the timer that fired late first: nothing expires
    assert state(h, kept, resumed) == state(h, silent, resumed) == "active"
    # The heartbeats that waited in the socket, then the ACK.
    assert h.call("heartbeat", kept, resumed + 1, token=token, duration=None)
    h.call("ack", kept, resumed + 2, token=token, has_result=True, result="once")
    assert h.storage.get_finished(kept)["state"] == "completed"
    # The one that never renews keeps its lock for the grace, then loses it as usual.
    h.call("tick", resumed + GRACE_MS - 1)
    assert state(h, silent, resumed + GRACE_MS - 1) == "active"
    h.call("tick", resumed + GRACE_MS)
    assert state(h, silent, resumed + GRACE_MS) == "waiting"
    j = h.q.jobs[silent]
    assert (j.attempts, j.stall_count) == (1, 1)


def test_a_renewal_within_the_grace_starts_a_normal_lease() -> None:
    h, [(kept, token), _], resumed = paused_with_two_holders()
    assert h.call("extend_lock", kept, resumed + 100, token=token, duration=10_000)
    end = resumed + 100 + 10_000 + 1
    h.call("tick", end - 1)
    assert state(h, kept, end - 1) == "active"
    h.call("tick", end)
    assert state(h, kept, end) == "waiting"


def test_without_a_pause_the_same_heartbeats_come_too_late() -> None:
    """The rule the grace relaxes: a renewal after a lease ran out is refused."""
    h = QueueHarness()
    job_id = push(h, NOW)
    _, token = take(h, NOW, 30_000)
    late = NOW + 5000 + PAUSE_MS
    assert not h.call("heartbeat", job_id, late, token=token, duration=None)
    h.call("tick", late)
    assert state(h, job_id, late) == "waiting"


def test_the_actor_sleeps_through_the_grace_rather_than_spinning() -> None:
    h, _, resumed = paused_with_two_holders()
    assert h.q.next_deadline() == resumed + GRACE_MS  # the locks were due long ago


def test_a_hold_never_shortens_a_lease() -> None:
    h = QueueHarness()
    job_id = push(h, NOW)
    take(h, NOW, 30_000)
    h.call("hold_expiry", NOW + 1000, GRACE_MS)  # a short pause, early in the lease
    h.call("tick", NOW + 30_000)
    assert state(h, job_id, NOW + 30_000) == "active"
    h.call("tick", NOW + 30_001)
    assert state(h, job_id, NOW + 30_001) == "waiting"


def test_the_stall_sweep_waits_for_the_grace_too() -> None:
    """A job suspected just before the pause is not declared stalled at once: its
    heartbeat may be waiting in a socket."""
    h = QueueHarness()
    h.call("set_stall_config", {"stallInterval": 10_000, "gracePeriod": 0})
    job_id = push(h, NOW, backoff=0)
    h.call("pull", NOW, count=1, owner=None, lock_ttl=30_000, conn=None)
    suspected = NOW + 3 * STALL_CHECK_MS  # 15 s without a heartbeat: a suspect
    h.call("tick", suspected)
    resumed = suspected + PAUSE_MS
    h.call("hold_expiry", resumed, GRACE_MS)
    h.call("tick", resumed)
    assert state(h, job_id, resumed) == "active"
    assert h.call("heartbeat", job_id, resumed + 1, token=None, duration=None)
    h.call("tick", resumed + GRACE_MS)
    assert state(h, job_id, resumed + GRACE_MS) == "active"
    assert h.q.jobs[job_id].stall_count == 0
