"""Clean in the queue core (trioqueue.core.queue.cleaning): which jobs go, by which
timestamp, in which order, a slice at a time, and how finished jobs are read.

The work is driven as the queue actor drives it (:func:`drive`): a step at a time,
each step's writes committed, and the reads a step asks for (``NeedData``) fetched
from storage and supplied before the next, with the promise checked that a step asks
before it writes anything.
"""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import FinishedView, Sliced, slices
from trioqueue.core.queue.finished import IDS
from trioqueue.storage.reads import fetch
from trioqueue.testing.queue import QueueHarness

T = 1_764_000_000_000


@pytest.fixture(autouse=True)
def small_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slices, "SLICE_JOBS", 4)


def push(h: QueueHarness, now: int, *, created: int | None = None, **fields: Any) -> str:
    if created is not None:
        fields["timestamp"] = created
    spec = parse_job_input({"data": None, **fields}, custom_id_key="jobId")
    ids: list[str] = h.call("push", [spec], now)
    return ids[0]


def pull(h: QueueHarness, now: int) -> tuple[str, str]:
    jobs, tokens = h.call("pull", now, count=1, owner="w", lock_ttl=30_000, conn=None)
    return jobs[0]["id"], tokens[0]


def complete(h: QueueHarness, now: int) -> str:
    job_id, token = pull(h, now)
    h.call("ack", job_id, now, token=token)
    return job_id


def bury(h: QueueHarness, now: int) -> str:
    job_id, token = pull(h, now)
    h.call("fail", job_id, now, token=token, error="boom")
    return job_id


class Driver:
    """The queue actor's part around long work, with a view that knows only what it
    was given (no fallback), and a count of each kind of read fetched."""

    def __init__(self, h: QueueHarness) -> None:
        self.h = h
        self.view = FinishedView(h.name)
        self.reads: dict[str, int] = {}
        self.steps = 0

    def run(self, work: Sliced, each_step: Any = None) -> Any:
        own, self.h.q.finished = self.h.q.finished, self.view
        try:
            return self._steps(work, each_step)
        finally:
            self.h.q.finished = own  # the harness's view again, for the checks after

    def _steps(self, work: Sliced, each_step: Any) -> Any:
        while True:
            self.view.forget()
            if work.need is not None:
                self.h.commit()  # the actor commits before it fetches
                for read in work.need.reads:
                    self.reads[str(read[0])] = self.reads.get(str(read[0]), 0) + 1
                    self.view.supply(read, fetch(self.h.storage, self.h.name, read))
            done = work.step()
            self.steps += 1
            if work.need is not None:
                assert not self.h.q.writes, "asked for reads after writing"
            self.h.commit()
            if each_step is not None:
                each_step()
            if done:
                return work.reply()


def clean(h: QueueHarness, now: int, grace: float, state: str | None = None,
          limit: int = 1000) -> list[str]:
    reply = Driver(h).run(h.q.clean_work(state, grace, limit, now))
    assert reply["count"] == len(reply["ids"])
    ids: list[str] = reply["ids"]
    return ids


# ------------------------------------------------------------------ queued jobs


def test_queued_jobs_go_by_creation_time_at_or_before_the_cutoff() -> None:
    h = QueueHarness()
    at_cutoff = push(h, T, created=T - 50)
    older_delayed = push(h, T, created=T - 90, delay=60_000)
    oldest_prioritized = push(h, T, created=T - 100, priority=4)
    younger = push(h, T, created=T - 49)
    assert clean(h, T, grace=50) == [oldest_prioritized, older_delayed, at_cutoff]
    assert list(h.q.jobs) == [younger]
    assert h.storage.load().live_jobs[0]["id"] == younger  # the removals are stored
    assert h.q.counts(T)["delayed"] == h.q.counts(T)["prioritized"] == 0


@pytest.mark.parametrize("state", [None, "wait", "waiting", "delayed", "prioritized",
                                   "paused"])
def test_each_waiting_like_state_names_every_queued_job(state: str | None) -> None:
    h = QueueHarness()
    ids = [push(h, T, created=T - 10 + i, **extra)
           for i, extra in enumerate([{}, {"priority": 1}, {"delay": 5_000}])]
    assert clean(h, T, grace=0, state=state) == ids


def test_active_and_unknown_states_remove_nothing() -> None:
    h = QueueHarness()
    push(h, T, created=T - 10)
    push(h, T, created=T - 9)
    active, _ = pull(h, T)
    for state in ("active", "bogus", "waiting-children", "completed", "failed"):
        assert clean(h, T, grace=0, state=state) == []
    assert len(h.q.jobs) == 2 and h.q.state_of(active, T) == "active"


def test_a_large_clean_removes_a_slice_per_step_up_to_its_limit() -> None:
    h = QueueHarness()
    ids = [push(h, T, created=T - 100 + i) for i in range(11)]
    sizes = [len(h.q.jobs)]
    driver = Driver(h)
    reply = driver.run(h.q.clean_work(None, 0, 10, T),
                       each_step=lambda: sizes.append(len(h.q.jobs)))
    assert reply["ids"] == ids[:10]  # the limit, oldest first
    assert all(a - b <= slices.SLICE_JOBS for a, b in zip(sizes, sizes[1:], strict=False))
    assert driver.steps >= 10 // slices.SLICE_JOBS and list(h.q.jobs) == [ids[10]]


def test_removed_jobs_release_their_custom_id_and_unique_key() -> None:
    h = QueueHarness()
    push(h, T, created=T - 10, jobId="c-1", uniqueKey="u")
    assert clean(h, T, grace=0) == ["c-1"]
    assert h.q.dedup_owner("u", T) is None
    assert push(h, T, jobId="c-1") == "c-1"


# ------------------------------------------------------------------ finished jobs


def test_completed_jobs_go_by_completion_time() -> None:
    h = QueueHarness()
    push(h, T, created=T - 10_000)
    done = complete(h, T)  # created long ago, completed at T
    assert clean(h, T + 100, grace=101, state="completed") == []
    assert clean(h, T + 100, grace=100, state="completed") == [done]
    assert h.storage.get_finished(done) is None
    assert h.storage.get_result(done) == (False, None)
    assert h.storage.count_finished(h.name, "completed") == 0


def test_failed_jobs_go_by_the_time_they_entered_the_dlq() -> None:
    h = QueueHarness()
    push(h, T, created=T - 10_000, maxAttempts=1)
    dead = bury(h, T + 5)
    assert h.storage.get_finished(dead)["dlq"]["enteredAt"] == T + 5  # type: ignore[index]
    assert clean(h, T + 100, grace=96, state="failed") == []
    assert clean(h, T + 100, grace=95, state="failed") == [dead]
    assert h.storage.count_finished(h.name, "failed") == 0


def test_finished_jobs_are_read_a_page_per_step_and_the_limit_holds() -> None:
    h = QueueHarness()
    for i in range(10):
        push(h, T, created=T - 100 + i)
    done = [complete(h, T) for _ in range(10)]
    driver = Driver(h)
    reply = driver.run(h.q.clean_work("completed", 0, 7, T))
    assert reply["ids"] == done[:7]
    # pages of SLICE_JOBS ids, each asked for, then its records, then deleted
    assert driver.reads["ids"] == 2 and driver.reads["get"] == 8
    assert h.storage.count_finished(h.name, "completed") == 3


def test_the_scan_ends_at_the_first_job_created_after_the_cutoff() -> None:
    h = QueueHarness()
    old = [push(h, T, created=T - 100 + i) for i in range(3)]
    for i in range(9):
        push(h, T, created=T + 50 + i)  # created after the cutoff (T)
    for _ in range(12):
        complete(h, T + 100)
    driver = Driver(h)
    # A cutoff at T: the three old ones were created before it but completed after it
    # (kept); the fourth, created after it, ends the scan within the first page.
    assert driver.run(h.q.clean_work("completed", 100, 1000, T + 100)) == {
        "count": 0, "ids": []}
    assert driver.reads.get("ids") == 1
    assert clean(h, T + 100, grace=0, state="completed")[:3] == old


def test_a_removed_dead_letter_frees_the_parent_waiting_for_it() -> None:
    h = QueueHarness()
    child = push(h, T, created=T - 10, maxAttempts=1)
    parent = push(h, T, dependsOn=[child])
    assert h.q.state_of(parent, T) == "waiting-children"
    assert bury(h, T) == child
    h.deliver_notices(T)
    assert h.q.state_of(parent, T) == "waiting-children"  # a DLQ retry may still come
    assert clean(h, T, grace=0, state="failed") == [child]
    h.deliver_notices(T)
    assert h.q.state_of(parent, T) == "waiting"


def test_logs_of_a_cleaned_job_go_with_it() -> None:
    h = QueueHarness()
    push(h, T, created=T - 10)
    job_id, token = pull(h, T)
    h.call("add_log", job_id, T, "working", "info")
    h.call("ack", job_id, T, token=token)
    assert job_id in h.q.logs
    assert clean(h, T, grace=0, state="completed") == [job_id]
    assert job_id not in h.q.logs


def test_a_clean_survives_a_restart_of_the_queue() -> None:
    h = QueueHarness()
    kept = push(h, T)
    push(h, T, created=T - 10)
    clean(h, T, grace=5)
    h.restart(T)
    assert list(h.q.jobs) == [kept]


def test_ids_reads_name_the_page_size() -> None:
    # The page asked for is the page supplied: the read carries its limit.
    h = QueueHarness()
    push(h, T, created=T - 10)
    complete(h, T)
    h.q.finished = FinishedView(h.name)
    work = h.q.clean_work("completed", 0, 1000, T)
    work.step()
    assert work.need is not None and work.need.reads[0][0] == IDS
    assert work.need.reads[0][-1] == slices.SLICE_JOBS


def test_the_walk_merges_the_places_oldest_first_across_slices() -> None:
    # Jobs spread over many milliseconds and spans, in three places: one walk of the
    # creation orders serves every slice, in (createdAt, id) order.
    h = QueueHarness()
    ids = []
    for i in range(30):
        extra: dict[str, Any] = [{}, {"priority": 2}, {"delay": 60_000}][i % 3]
        ids.append(push(h, T, created=T - 100_000 + i * 20_000 // 3, **extra))
    cutoff_index = 17
    created = sorted((h.q.jobs[i].created_at, i) for i in ids)
    grace = T - created[cutoff_index][0]
    assert clean(h, T, grace=grace) == [i for _, i in created[:cutoff_index + 1]]
    assert len(h.q.jobs) == 30 - cutoff_index - 1
