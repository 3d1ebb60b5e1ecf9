"""GetJobs without a state (every state listed): the same jobs in the same (createdAt,
id) order as before, paged without walking the queue when only one kind of part holds
jobs (live jobs only, or one finished state only)."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core import states as st
from trioqueue.core.queue import views
from trioqueue.storage.memory import MemoryStorage

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
