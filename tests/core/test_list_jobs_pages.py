"""GetJobs without a state (every state listed): the same jobs in the same (createdAt,
id) order as before, paged without walking the queue: live jobs only, one finished
state only, and every mix of live, completed and failed jobs (found by rank)."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.actors.store_reads import MAX_REFETCHES
from trioqueue.core import states as st
from trioqueue.core.queue import listing, views
from trioqueue.core.queue.finished import NeedData
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.reads import fetch

from .test_queue import NOW, Harness

EVERY_STATE = list(st.VISIBLE_STATES)  # what GetJobs lists without a state


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [row["id"] for row in rows]


def _expected(h: Harness, ids: list[str], now: int) -> list[str]:
    """Every job, sorted by (createdAt, id), as the listing promises."""
    keyed = []
    for job_id in ids:
        wire = h.q.job_wire(job_id, now)
        assert wire is not None
        keyed.append((wire["createdAt"], job_id))
    return [job_id for _, job_id in sorted(keyed)]


def _finish(h: Harness, job_id: str, now: int, failed: bool) -> None:
    assert h.pull(now, 1)[0] == [job_id]
    if failed:
        h.fail(job_id, now, unrecoverable=True)
    else:
        h.ack(job_id, now)


@pytest.mark.parametrize("mix", ["live", "completed", "failed", "completed+failed",
                                 "live+completed", "all"])
def test_every_state_listing_is_the_sorted_union_at_every_offset(mix: str) -> None:
    h = Harness()
    ids: list[str] = []
    finish = {"live": (), "completed": (False,), "failed": (True,),
              "completed+failed": (False, True), "live+completed": (False,),
              "all": (False, True)}[mix]
    for i in range(9):  # finished ones first (pulled in push order), several per ms
        ids.append(h.push(NOW + i // 3, jobId=f"j{(i * 7) % 9}"))
    for i, job_id in enumerate(ids[:6] if finish else ()):
        _finish(h, job_id, NOW + 10, failed=finish[i % len(finish)])
    if mix in ("completed", "failed", "completed+failed"):
        for job_id in ids[6:]:
            _finish(h, job_id, NOW + 10, failed=finish[0])
    else:
        h.push(NOW + 5, jobId="later", delay=60_000)
        ids.append("later")
        h.push(NOW + 1, jobId="prio", priority=4)
        ids.append("prio")
    now = NOW + 20
    want = _expected(h, ids, now)
    for asc in (True, False):
        order = want if asc else want[::-1]
        for offset in range(len(ids) + 2):
            for limit in (1, 3, 100):
                got = _ids(h.q.list_jobs(EVERY_STATE, now, asc=asc, offset=offset,
                                         limit=limit))
                assert got == order[offset:offset + limit], (asc, offset, limit)


def test_every_state_listing_of_live_jobs_reads_only_its_page(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The live orders are asked for the page at its offset, not for everything before
    it, and the store for no finished page at all (it holds none)."""
    h = Harness()
    for i in range(500):
        h.push(NOW + i)
    asked: list[tuple[int, int]] = []
    real_page = views.page

    def page(orders: Any, *, asc: bool, offset: int, limit: int) -> Any:
        asked.append((offset, limit))
        return real_page(orders, asc=asc, offset=offset, limit=limit)

    monkeypatch.setattr(views, "page", page)
    listed: list[tuple[int, int]] = []
    real_list = MemoryStorage.list_finished

    def list_finished(self: MemoryStorage, queue: str, state: str, *, asc: bool,
                      offset: int, limit: int) -> Any:
        listed.append((offset, limit))
        return real_list(self, queue, state, asc=asc, offset=offset, limit=limit)

    monkeypatch.setattr(MemoryStorage, "list_finished", list_finished)
    rows = h.q.list_jobs(EVERY_STATE, NOW + 600, asc=True, offset=450, limit=10)
    assert len(rows) == 10
    assert asked == [(450, 10)]
    assert listed == []


def test_every_state_listing_of_completed_jobs_only_reads_only_its_page(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    for i in range(60):
        job_id = h.push(NOW + i)
        _finish(h, job_id, NOW + 100, failed=False)
    listed: list[tuple[str, int, int]] = []
    real_list = MemoryStorage.list_finished

    def list_finished(self: MemoryStorage, queue: str, state: str, *, asc: bool,
                      offset: int, limit: int) -> Any:
        listed.append((state, offset, limit))
        return real_list(self, queue, state, asc=asc, offset=offset, limit=limit)

    monkeypatch.setattr(MemoryStorage, "list_finished", list_finished)
    rows = h.q.list_jobs(EVERY_STATE, NOW + 200, asc=False, offset=50, limit=5)
    assert len(rows) == 5
    assert listed == [("completed", 50, 5)]


# --- mixes of live and finished jobs, found by rank -----------------------------------


def _listed_in_rounds(h: Harness, states: list[str], now: int, *, asc: bool,
                      offset: int, limit: int) -> tuple[list[str], int]:
    """GetJobs as the queue actor runs it: each NeedData answered from the store, the
    command run again; the ids and the rounds of reads it took."""
    view = h.q.finished
    view.fallback, fallback = None, view.fallback
    rounds = 0
    try:
        while True:
            try:
                rows = h.q.list_jobs(states, now, asc=asc, offset=offset, limit=limit)
            except NeedData as need:
                rounds += 1
                for read in need.reads:
                    view.supply(read, fetch(h.storage, h.name, read))
                continue
            return _ids(rows), rounds
    finally:
        view.forget()
        view.fallback = fallback


def _mixed_queue(h: Harness, n: int, *, created_every: int, now: int) -> list[str]:
    """``n`` jobs, createdAt in runs of equal values (ids order those), then about a
    third completed and a third failed, spread over the whole range; the rest waiting,
    delayed or prioritized. Returns every id."""
    ids = h.pushb(now, *({"customId": f"m{(i * 37) % n:04d}"} for i in range(n)))
    # bring createdAt apart in runs: push more in later milliseconds
    more = [h.push(now + 1 + i // created_every, jobId=f"x{(i * 11) % n:04d}",
                   **({"delay": 600_000} if i % 7 == 0 else
                      {"priority": 3} if i % 7 == 1 else {}))
            for i in range(n)]
    ids += more
    for k in range(0, 2 * n, 3):  # pulled in listing order: take two of three
        pulled, _ = h.pull(now + 2000, 2)
        for j, job_id in enumerate(pulled):
            _finish_pulled(h, job_id, now + 2001, failed=(k + j) % 2 == 1)
        if k > 2 * n // 3 * 2:
            break
    # prioritized jobs are pulled first: these come after, beside waiting ones
    ids += [h.push(now + 150, jobId=f"p{i}", **({"priority": 2} if i % 2 else {}))
            for i in range(6)]
    return ids


def _finish_pulled(h: Harness, job_id: str, now: int, failed: bool) -> None:
    if failed:
        h.fail(job_id, now, unrecoverable=True)
    else:
        h.ack(job_id, now)


@pytest.mark.parametrize("probes", [2, 5, 64])
def test_mixed_listing_is_the_sorted_union_at_every_offset(
        probes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Live, completed and failed jobs interleaved in (createdAt, id), with equal
    createdAt runs: every page equals the sorted union's slice, both orders, also when
    the search takes many rounds (few probes a round)."""
    monkeypatch.setattr(listing, "PROBES", probes)
    h = Harness()
    now = NOW
    ids = _mixed_queue(h, 60, created_every=4, now=now)
    counts = h.q.counts(now + 200)
    assert counts["completed"] > 10 and counts["failed"] > 10 and counts["waiting"] > 10
    assert counts["delayed"] and counts["prioritized"]
    want = _expected(h, ids, now + 200)
    assert len(want) == len(ids) == 126
    for states in (EVERY_STATE, ["completed", "failed"], ["waiting", "failed"],
                   ["completed", "delayed", "prioritized"]):
        subset = [i for i in want if h.q.state_of(i, now + 200) in states]
        for asc in (True, False):
            order = subset if asc else subset[::-1]
            for offset in range(len(subset) + 2):
                for limit in (1, 7, 200):
                    got, _ = _listed_in_rounds(h, states, now + 200, asc=asc, offset=offset,
                                               limit=limit)
                    assert got == order[offset:offset + limit], (states, asc, offset, limit)


def test_mixed_listing_at_a_large_offset_reads_only_about_a_page(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting, completed and failed jobs, a page near the end: the store is asked for
    one page of each finished state and a few rounds of probes (not everything before
    the offset), the live orders for one page, and the command needs fewer rounds of
    reads than the actor allows."""
    h = Harness()
    n = 3000
    h.pushb(NOW, *({"customId": f"a{i:05d}"} for i in range(n)))
    for _ in range(0, n, 500):
        pulled, _ = h.pull(NOW + 1, 500)
        for j, job_id in enumerate(pulled[:400]):
            _finish_pulled(h, job_id, NOW + 2, failed=j % 3 == 0)
    h.pushb(NOW + 3, *({"customId": f"b{i:05d}"} for i in range(n)))
    counts = h.q.counts(NOW + 4)
    assert counts["completed"] + counts["failed"] == 2400 and counts["waiting"] == 3000
    assert counts["active"] == 600
    listed: list[int] = []
    ranked: list[int] = []
    real_list = MemoryStorage.list_finished
    real_ranks = MemoryStorage.finished_ranks

    def list_finished(self: MemoryStorage, queue: str, state: str, *, asc: bool,
                      offset: int, limit: int) -> Any:
        listed.append(limit)
        return real_list(self, queue, state, asc=asc, offset=offset, limit=limit)

    def finished_ranks(self: MemoryStorage, queue: str, state: str, positions: Any,
                       others: Any) -> Any:
        ranked.append(len(positions))
        return real_ranks(self, queue, state, positions, others)

    asked: list[int] = []
    real_page = listing.page

    def page(orders: Any, *, asc: bool, offset: int, limit: int) -> Any:
        asked.append(limit)
        return real_page(orders, asc=asc, offset=offset, limit=limit)

    monkeypatch.setattr(MemoryStorage, "list_finished", list_finished)
    monkeypatch.setattr(MemoryStorage, "finished_ranks", finished_ranks)
    monkeypatch.setattr(listing, "page", page)
    want = _expected(h, [*(f"a{i:05d}" for i in range(n)), *(f"b{i:05d}" for i in range(n))],
                     NOW + 4)
    for asc, offset in ((True, 5000), (False, 800), (True, 2990), (False, 5990)):
        listed.clear(), ranked.clear(), asked.clear()
        got, rounds = _listed_in_rounds(h, EVERY_STATE, NOW + 4, asc=asc, offset=offset,
                                        limit=10)
        order = want if asc else want[::-1]
        assert got == order[offset:offset + 10]
        assert rounds <= MAX_REFETCHES - 1  # (one spare: a command may read before)
        assert sum(listed) <= 2 * 10, listed
        assert all(limit <= 10 for limit in asked), asked
        assert sum(ranked) <= 3 * 2 * listing.PROBES, ranked
