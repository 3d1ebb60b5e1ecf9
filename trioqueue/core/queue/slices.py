"""Long work in bounded slices: Drain, Obliterate and PromoteJobs of a whole queue.

A command whose cost grows with the queue (a million jobs drained is seconds of work)
is written as a generator that does at most ``SLICE_JOBS`` jobs' worth of work between
two ``yield``s. Its handler returns a :class:`Sliced`; the queue actor runs one slice
per step, commits what the slice wrote, and lets the other queues run before the next
(trio's checkpoint between steps). While the work lasts, the queue takes nothing else
(its commands, notices and timers wait in their inboxes), so no command of the queue
sees the work half done; only a crash can cut it short, leaving it partly done and
unacknowledged, like any command whose reply was never sent.

Run to the end at once (``run``), a Sliced is the plain synchronous command, which is
how :class:`~trioqueue.core.queue.state.QueueState`'s methods and the tests use it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from itertools import islice
from typing import TYPE_CHECKING, Any

from ..job import COMPLETED, FAILED

if TYPE_CHECKING:
    from .order import CreationOrder
    from .state import QueueState

# Jobs one slice handles: about 5 ms of work, so that a queue draining a million jobs
# delays every other queue by at most one slice at a time.
SLICE_JOBS = 2_000

Steps = Generator[None, None, Any]


class Sliced:
    """One command's long work; :meth:`step` runs a slice, True once it is done."""

    __slots__ = ("_steps", "_reply", "result", "done")

    def __init__(self, steps: Steps, reply: Callable[[Any], dict[str, Any]]) -> None:
        self._steps = steps
        self._reply = reply
        self.result: Any = None
        self.done = False

    def step(self) -> bool:
        try:
            next(self._steps)
        except StopIteration as stop:
            self.result = stop.value
            self.done = True
        return self.done

    def run(self) -> Any:
        """Every remaining slice at once (the synchronous form); returns the result."""
        while not self.step():
            pass
        return self.result

    def reply(self) -> dict[str, Any]:
        assert self.done, "the work is not finished"
        return self._reply(self.result)


def _take(order: CreationOrder) -> list[str]:
    return list(islice(order.ids(), SLICE_JOBS))


def _trim(heap: list[Any]) -> Steps:
    """Empty a heap whose entries are all stale, a slice at a time (dropping entries
    from the end keeps the rest a heap)."""
    while heap:
        del heap[-SLICE_JOBS:]
        if heap:
            yield


def drain(q: QueueState, now: int) -> Steps:
    """Remove every queued job (waiting, prioritized, delayed); active jobs and jobs
    waiting for children stay. No per-job event, as in bunqueue. Returns the count."""
    removed = 0
    places = q.places
    for order in (places.waiting, places.prioritized, places.delayed):
        while ids := _take(order):
            for job_id in ids:
                q._drop_queued(q.jobs[job_id], now)
            removed += len(ids)
            yield
    # Nothing is queued now, so every heap entry left is stale.
    yield from _trim(q._ready)
    yield from _trim(q._delayed)
    return removed


def obliterate(q: QueueState, now: int) -> Steps:
    """Remove everything of the queue: live jobs in every state (an active job's
    worker then finds it gone), finished jobs with their results, logs, retained
    results, the stored settings. Parked pulls keep waiting."""
    places = q.places
    for order in (places.waiting, places.prioritized, places.delayed, places.active,
                  places.waiting_children):
        while ids := _take(order):
            for job_id in ids:
                q._drop_queued(q.jobs[job_id], now)
            yield
    for heap in (q._ready, q._delayed, q._lock_heap, q._timeouts):
        yield from _trim(heap)
    for state in (COMPLETED, FAILED):
        ids, after = q.finished.ids_page(state, after=None, limit=SLICE_JOBS)
        while ids:
            for job_id in ids:
                q.writes.delete_job(job_id)
            yield
            if after is None:
                break
            ids, after = q.finished.ids_page(state, after=after, limit=SLICE_JOBS)
    q.stall_watch.clear()
    q.logs.clear()
    q.index.forget_retained(q.name)
    q.reset_settings()


def promote_jobs(q: QueueState, now: int, count: int | None) -> Steps:
    """Delayed jobs become ready now, earliest runAt first (``count`` of them, or all).
    Returns how many were promoted."""
    q._promote_due(now)  # what is due already is not "delayed"
    heap = q._delayed
    promoted = 0
    while heap and (count is None or promoted < count):
        for _ in range(SLICE_JOBS):
            if not heap or (count is not None and promoted >= count):
                break
            job = q._pop_delayed()
            if job is not None:
                q._reschedule(job, now, run_at=now)
                promoted += 1
        yield
    return promoted
