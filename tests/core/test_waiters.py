"""Parked pulls and WaitJob holds (trioqueue.core.queue.waiters.Parked)."""

from __future__ import annotations

from trioqueue.core.queue.waiters import COMPACT_SLACK, JobWaiter, Parked, PullWaiter

NOW = 1_700_000_000_000


def hold(job_id: str, conn: object, deadline: int = NOW + 60_000) -> JobWaiter:
    return JobWaiter(handle=None, job_id=job_id, conn=conn, deadline_ms=deadline)


def pull(conn: object, deadline: int = NOW + 60_000) -> PullWaiter:
    return PullWaiter(handle=None, count=1, batch=False, owner=None, lock_ttl=30_000,
                      conn=conn, detach=False, deadline_ms=deadline)


def test_holds_are_counted_per_connection() -> None:
    parked = Parked()
    a, b = object(), object()
    for i in range(5):
        parked.park_hold(hold(f"j{i}", a))
    parked.park_hold(hold("j0", b))
    assert parked.holds(a) == 5 and parked.holds(b) == 1
    parked.settle("j0", {"completed": True}, None)
    assert parked.holds(a) == 4 and parked.holds(b) == 0
    assert [d.waiter.conn for d in parked.take_settled()] == [a, b]


def test_a_closed_connections_holds_are_removed_not_only_marked() -> None:
    parked = Parked()
    closed, open_ = object(), object()
    for i in range(3 * COMPACT_SLACK):
        parked.park_hold(hold(f"j{i}", closed))
    kept = hold("j0", open_)
    parked.park_hold(kept)
    parked.drop(closed)
    assert parked.holds(closed) == 0
    assert list(parked.by_job) == ["j0"] and parked.by_job["j0"] == [kept]
    # The deadline heap was compacted: only the open connection's hold is left in it.
    assert parked.next_deadline() == kept.deadline_ms
    assert len(parked._deadlines) == 1
    # The survivor is still answered when its job settles.
    parked.settle("j0", {"completed": True}, None)
    assert [d.waiter for d in parked.take_settled()] == [kept]


def test_expiry_answers_each_request_once_and_forgets_it() -> None:
    parked = Parked()
    conn = object()
    early, late = hold("a", conn, NOW + 10), hold("b", conn, NOW + 20)
    p = pull(conn, NOW + 15)
    parked.park_hold(early)
    parked.park_hold(late)
    parked.park_pull(p)
    assert parked.expired(NOW + 15) == [early, p]
    assert parked.holds(conn) == 1 and "a" not in parked.by_job
    assert parked.expired(NOW + 15) == []
    assert parked.next_deadline() == NOW + 20


def test_dropping_a_connection_ends_its_parked_pulls() -> None:
    parked = Parked()
    gone, other = object(), object()
    mine, theirs = pull(gone), pull(other)
    parked.park_pull(mine)
    parked.park_pull(theirs)
    parked.drop(gone)
    assert mine.done and not theirs.done
