"""Long work in bounded slices (trioqueue.core.queue.slices)."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import slices
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
    assert h.q._ready == [] and h.q._delayed == []  # stale heap entries trimmed too


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
