"""Long work in bounded slices (trioqueue.core.queue.slices)."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import PullWaiter, slices
from trioqueue.testing.queue import QueueHarness

NOW = 1_764_000_000_000


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slices, "SLICE_JOBS", 4)


def push(h: QueueHarness, n: int, **fields: Any) -> list[str]:
    specs = [parse_job_input({"data": None, **fields}, custom_id_key="jobId")
             for _ in range(n)]
    ids: list[str] = h.call("push", specs, NOW)
    return ids


def live(h: QueueHarness) -> int:
    return len(h.q.jobs)


def test_drain_removes_at_most_a_slice_per_step() -> None:
    h = QueueHarness()
    push(h, 10)
    push(h, 5, delay=60_000)
    push(h, 3, priority=5)
    work = h.q.drain_work(NOW)
    seen = [live(h)]
    while not work.step():
        seen.append(live(h))
    assert seen[0] == 18 and seen[-1] == 0
    assert all(a - b <= slices.SLICE_JOBS for a, b in zip(seen, seen[1:], strict=False))
    assert work.reply() == {"count": 18}
    assert h.q.counts(NOW)["waiting"] == h.q.counts(NOW)["delayed"] == 0
    assert h.q.order.sizes() == (0, 0)  # stale heap entries trimmed too


def test_promote_jobs_in_slices_keeps_runat_order_and_count() -> None:
    h = QueueHarness()
    ids = [push(h, 1, delay=1_000 * (10 - i))[0] for i in range(10)]
    work = h.q.promote_jobs_work(NOW, 6)
    steps = 1
    while not work.step():
        steps += 1
    assert work.reply() == {"count": 6} and steps >= 2
    promoted = [i for i in ids if h.q.state_of(i, NOW) == "waiting"]
    assert promoted == ids[4:]  # the six with the earliest runAt


def test_obliterate_removes_live_and_finished_jobs_slice_by_slice() -> None:
    h = QueueHarness()
    done = push(h, 9)
    jobs, _ = h.call("pull", NOW, count=9, owner=None, lock_ttl=30_000, conn=None)
    for job in jobs:
        h.call("ack", job["id"], NOW)
    push(h, 6)
    work = h.q.obliterate_work(NOW)
    steps = 1
    while not work.step():
        h.commit()
        steps += 1
    h.commit()
    assert steps >= (9 + 6) // slices.SLICE_JOBS
    assert live(h) == 0
    assert all(h.storage.get_finished(i) is None for i in done)


def test_jobs_that_fall_due_together_are_promoted_a_slice_per_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A million jobs delayed to one instant would be promoted in one step; past
    PROMOTE_MAX_JOBS a promotion stops, the queue wakes at once, and each tick promotes
    the next slice. The counters and listings stay exact throughout."""
    from trioqueue.core.queue import lifecycle

    monkeypatch.setattr(lifecycle, "PROMOTE_MAX_JOBS", 3)
    h = QueueHarness()
    ids = push(h, 10, delay=1_000)
    t = NOW + 2_000
    seen = []
    while True:
        counts = h.q.counts(t)
        listed = h.q.list_jobs(["waiting"], t, asc=True, offset=0, limit=100)
        assert len(listed) == counts["waiting"]
        assert counts["waiting"] + counts["delayed"] == 10
        seen.append(counts["waiting"])
        if not counts["delayed"]:
            break
        deadline = h.q.next_deadline()
        assert deadline is not None and deadline <= t  # the next slice comes at once
        h.call("tick", t)
    assert seen == [3, 6, 9, 10]
    # Promoted in runAt order, then admission order: FIFO as if promoted at once.
    pulled = [pull_one(h, t) for _ in ids]
    assert pulled == ids


def test_a_promotion_backlog_keeps_every_counter_right(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs that leave the queue while some due jobs are not promoted yet (cancelled,
    pulled, drained) leave the counter they are in; a pull takes what is promoted and
    a pull of many does not promote a slice per job."""
    from trioqueue.core.queue import lifecycle

    monkeypatch.setattr(lifecycle, "PROMOTE_MAX_JOBS", 3)
    h = QueueHarness()
    ids = push(h, 10, delay=1_000)
    t = NOW + 2_000
    assert h.q.counts(t)["delayed"] == 7  # ids[0:3] promoted, ids[3:] not yet
    h.call("cancel", ids[9], t)  # due, not promoted
    h.call("cancel", ids[0], t)  # promoted
    assert h.q.counts(t) | {"waiting": 2, "delayed": 6} == h.q.counts(t)
    jobs, _ = h.call("pull", t, count=5, owner=None, lock_ttl=30_000, conn=None)
    assert [j["id"] for j in jobs] == ids[1:3]
    assert h.q.counts(t)["active"] == 2 and h.q.counts(t)["delayed"] == 6
    while h.q.counts(t)["delayed"]:
        h.call("tick", t)
    assert h.q.counts(t)["waiting"] == 6
    drained = h.q.drain_work(t)
    while not drained.step():
        pass
    counts = h.q.counts(t)
    assert counts["waiting"] == counts["delayed"] == 0 and counts["active"] == 2
    h.call("tick", t)
    deadline = h.q.next_deadline()
    assert deadline is not None and deadline > t  # no promotion wake-up is left


def pull_one(h: QueueHarness, now: int) -> str:
    jobs, _ = h.call("pull", now, count=1, owner=None, lock_ttl=30_000, conn=None)
    return str(jobs[0]["id"])


# ------------------------------------------------------- the driver's clock in a slice


class Looks:
    """The driver's clock as the core sees it (``QueueState.slice_over``): the slice's
    time is up at every ``every``-th look (0: never), and each look is counted."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.looks = 0

    def __call__(self) -> bool:
        self.looks += 1
        return bool(self.every) and self.looks % self.every == 0


@pytest.fixture
def pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Slices of 12 jobs, looked at every 3 (promotions too: lifecycle reads it here)."""
    monkeypatch.setattr(slices, "SLICE_JOBS", 12)
    monkeypatch.setattr(slices, "LOOK_EVERY_JOBS", 3)


def _removed_per_step(h: QueueHarness, work: slices.Sliced) -> list[int]:
    seen = [live(h)]
    while not work.step():
        seen.append(live(h))
    seen.append(live(h))
    return [a - b for a, b in zip(seen, seen[1:], strict=False)]


@pytest.mark.usefixtures("pieces")
@pytest.mark.parametrize(("every", "steps", "asked"), [
    # the clock never says stop: slices end by their count, and the piece that fills
    # a slice's count does not ask (10 pieces, 2 of them last in a full slice)
    (0, [12, 12, 6], 8),
    (1, [3] * 10, 10),  # time is up at every look: a slice is one piece
    (2, [6] * 5, 10),
])
def test_a_slice_ends_when_the_drivers_clock_says_its_time_is_up(
        every: int, steps: list[int], asked: int) -> None:
    h = QueueHarness()
    push(h, 30)
    looks = Looks(every)
    h.q.slice_over = looks
    work = h.q.drain_work(NOW)
    assert [n for n in _removed_per_step(h, work) if n] == steps
    assert work.reply() == {"count": 30}
    assert looks.looks == asked  # at most one look per piece of 3 jobs


@pytest.mark.usefixtures("pieces")
def test_without_a_clock_a_slice_is_one_piece_and_nothing_asks() -> None:
    h = QueueHarness()
    push(h, 30)
    assert h.q.slice_over is None
    work = h.q.drain_work(NOW)
    assert [n for n in _removed_per_step(h, work) if n] == [12, 12, 6]


@pytest.mark.usefixtures("pieces")
@pytest.mark.parametrize("every", [0, 1, 2])
def test_a_pullb_cut_short_by_the_clock_leases_the_same_jobs(every: int) -> None:
    h = QueueHarness()
    ids = push(h, 20)
    h.q.slice_over = Looks(every)
    work = slices.pullb_sliced(h.q, 17, NOW, owner="w", lock_ttl=30_000, conn=None,
                               detach=False)
    active = [0]
    while not work.step():
        active.append(h.q.counts(NOW)["active"])
    active.append(h.q.counts(NOW)["active"])
    grown = [b - a for a, b in zip(active, active[1:], strict=False)]
    assert max(grown) <= (12 if every == 0 else 3 * every)
    jobs, tokens = work.result
    assert [job["id"] for job in jobs] == ids[:17]
    assert len(set(tokens)) == 17
    assert h.q.counts(NOW)["waiting"] == 3


@pytest.mark.usefixtures("pieces")
def test_a_closed_connections_release_stops_where_the_clock_says() -> None:
    h = QueueHarness()
    push(h, 10)
    conn = object()
    h.call("pull", NOW, count=10, owner=None, lock_ttl=30_000, conn=conn)
    h.q.slice_over = Looks(1)
    work = h.q.release_connection_work(conn, NOW)
    waiting = [0]
    while not work.step():
        waiting.append(h.q.counts(NOW)["waiting"])
    assert waiting == [0, 3, 6, 9]
    assert work.result == 10 and h.q.counts(NOW)["active"] == 0


@pytest.mark.usefixtures("pieces")
def test_a_tick_stops_promoting_where_the_clock_says(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from trioqueue.core.queue import lifecycle

    monkeypatch.setattr(lifecycle, "PROMOTE_MAX_JOBS", 12)
    h = QueueHarness()
    ids = push(h, 20, delay=1_000)
    t = NOW + 2_000
    h.q.slice_over = Looks(2)  # time is up after 6 promotions
    seen = []
    while True:  # the first count promotes (a first slice), then each tick
        counts = h.q.counts(t)
        seen.append(counts["waiting"])
        if not counts["delayed"]:
            break
        h.call("tick", t)
    assert seen == [6, 12, 18, 20]
    assert [pull_one(h, t) for _ in range(20)] == ids


def _parked(handle: str, count: int) -> PullWaiter:
    return PullWaiter(handle=handle, count=count, batch=count > 1, owner="w",
                      lock_ttl=30_000, conn=None, detach=False, deadline_ms=NOW + 60_000)


@pytest.mark.usefixtures("pieces")
def test_a_parked_pullb_of_many_is_leased_as_long_work_ahead_of_the_pulls_behind() -> None:
    h = QueueHarness()
    h.q.park(_parked("big", 30))
    h.q.park(_parked("small", 1))
    ids = push(h, 31)
    out = h.call("tick", NOW)
    assert [(a.waiter.handle, a.work is not None) for a in out] == [("big", True)]
    assert h.q.counts(NOW)["active"] == 12  # its first slice, in the tick
    work = out[0].work
    assert work is not None
    while not work.step():
        h.commit()
    h.commit()
    reply = work.reply()
    assert [job["id"] for job in reply["jobs"]] == ids[:30]
    assert len(set(reply["tokens"])) == 30
    out = h.call("tick", NOW)  # the pull parked behind it, served after it
    assert [(a.waiter.handle, a.reply["job"]["id"]) for a in out] == [("small", ids[30])]


@pytest.mark.usefixtures("pieces")
def test_a_parked_pullb_that_one_slice_fills_is_answered_at_once() -> None:
    h = QueueHarness()
    h.q.park(_parked("big", 30))
    ids = push(h, 5)
    out = h.call("tick", NOW)
    assert [(a.waiter.handle, a.work) for a in out] == [("big", None)]
    assert [job["id"] for job in out[0].reply["jobs"]] == ids
