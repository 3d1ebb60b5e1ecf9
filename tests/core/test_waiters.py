"""Parked pulls and WaitJob holds (trioqueue.core.queue.waiters.Parked)."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.queue import waiters
from trioqueue.core.queue.waiters import COMPACT_SLACK, JobWaiter, Parked, PullWaiter
from trioqueue.core.split_heap import CHUNK_ENTRIES

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
    assert list(parked.by_job) == ["j0"] and list(parked.by_job["j0"]) == [kept]
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


def test_stale_entries_are_shed_a_chunk_at_a_time_not_rebuilt_whole(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,000 connections with 40 holds each, 975 of them closing one after another (as
    # when a fleet of clients goes at once): no drop may look at the whole heap (a
    # 40,000-entry rebuild held every queue for 9-18 ms), yet memory is reclaimed.
    looked_at = [0]
    live_entry = waiters._live

    def counted(entry: Any) -> bool:
        looked_at[0] += 1
        return live_entry(entry)

    monkeypatch.setattr(waiters, "_live", counted)
    parked = Parked()
    conns = [object() for _ in range(1000)]
    for n, conn in enumerate(conns):
        for i in range(40):
            parked.park_hold(hold(f"j{n}-{i}", conn))
    most = 0
    for conn in conns[:975]:
        looked_at[0] = 0
        parked.drop(conn)
        most = max(most, looked_at[0])
    live = 25 * 40
    assert sum(parked.holds(c) for c in conns) == live
    assert 0 < most <= CHUNK_ENTRIES
    # what is left in the heap: the live holds plus at most the slack and one chunk
    assert len(parked._deadlines) <= live + COMPACT_SLACK + CHUNK_ENTRIES
    # the survivors expire, each once
    assert len(parked.expired(NOW + 60_000)) == live
    assert parked.next_deadline() is None


def test_dropping_a_connection_leaves_other_connections_pulls_untouched() -> None:
    parked = Parked()
    others = [pull(object()) for _ in range(1000)]
    for p in others:
        parked.park_pull(p)
    gone = object()
    mine = [pull(gone) for _ in range(3)]
    for p in mine:
        parked.park_pull(p)
    parked.drop(gone)
    assert all(p.done for p in mine) and not any(p.done for p in others)
    assert gone not in parked.pulls_by_conn
    parked.drop(gone)  # twice: nothing more happens
    assert sum(p.done for p in others) == 0
