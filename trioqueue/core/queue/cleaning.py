"""Clean: remove a queue's jobs older than a grace period, oldest first, in slices.

bunqueue's ``Clean`` (reference 2.5) takes a state and judges age by a timestamp per
state: queued jobs (``waiting``, ``wait``, ``delayed``, ``prioritized``, ``paused`` or
no state: all of them, as bunqueue cleans its one queue of pending jobs) by
``createdAt``; ``completed`` by ``completedAt``; ``failed`` (the dead-letter queue) by
the time the job entered it (``dlq.enteredAt``). ``active`` and unknown states remove
nothing: an active job belongs to its worker. At most ``limit`` jobs go, and no
per-job event is emitted (bunqueue emits none).

No step walks the queue. Queued jobs come oldest first from the creation orders
(``q.places``), a slice at a time; a removal goes the way Drain's does
(``_drop_queued``: dedup keys, custom ids, parents and WaitJob holds released). Dead
letters come from the queue's DLQ index, which holds them in the order they entered
(``dlq.drop_entry`` deletes each, as any DLQ deletion). Completed jobs come from storage
in pages of ids in ``(createdAt, id)`` order (``IDS`` reads, with a cursor that deleted
jobs do not disturb), their records read per page (``GET``).
A job completed at or after its creation, so the first job
created after the cutoff ends the scan: everything after it is younger still. Before
that, a job created long ago but finished recently is read and kept, so a scan over
many such jobs costs pages, each its own step, never one long step.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

from ..job import COMPLETED, FAILED
from . import order, slices
from .dlq import drop_entry
from .finished import NeedData
from .slices import Sliced, SliceFill, Steps

if TYPE_CHECKING:
    from .state import QueueState

# The states that name the queued jobs (bunqueue's "waiting-like" states); None is the
# default (no state given).
QUEUED_STATES = frozenset({None, "wait", "waiting", "delayed", "prioritized", "paused"})


def clean_work(q: QueueState, state: str | None, grace: float, limit: int,
               now: int) -> Sliced:
    """The long work of ``Clean``: its result is the ids removed, oldest first."""
    cutoff = now - grace
    if state in QUEUED_STATES:
        steps = _clean_queued(q, cutoff, limit, now)
    elif state == COMPLETED:
        steps = _clean_finished(q, COMPLETED, cutoff, limit)
    elif state == FAILED:
        steps = _clean_dead_letters(q, cutoff, limit, now)
    else:  # active, or a state bunqueue does not know: nothing is removed
        steps = _nothing()
    return Sliced(_announced(q, steps, state, now), _reply)


def _announced(q: QueueState, steps: Steps, state: str | None, now: int) -> Steps:
    """The clean, then one ``cleaned`` event for it (bunqueue's ``queue:cleaned``; no
    event per job)."""
    removed: list[str] = yield from steps
    if removed:
        q.emit("cleaned", "", now, count=len(removed), state=state or "wait")
    return removed


def _reply(ids: list[str]) -> dict[str, Any]:
    return {"count": len(ids), "ids": ids}


def _nothing() -> Steps:
    return []
    yield  # a generator that yields nothing


def _clean_queued(q: QueueState, cutoff: float, limit: int, now: int) -> Steps:
    places = q.places
    removed: list[str] = []
    batch: list[str] = []
    fill = SliceFill(q)
    # One walk of the creation orders for the whole clean (order.walk), oldest first.
    for created_at, ids in order.walk((places.waiting, places.prioritized, places.delayed)):
        if created_at > cutoff:
            break
        for job_id in ids:
            if job_id not in q.jobs:
                continue  # taken along by an earlier removal
            batch.append(job_id)
            if len(removed) + len(batch) < limit and len(batch) < fill.room():
                continue
            slices._drop(q, batch, now)
            removed.extend(batch)
            if len(removed) >= limit:
                slices._compact(q, len(removed))  # as Drain: a large clean shrinks the maps
                return removed
            over = fill.took(len(batch))
            batch = []
            if over:
                yield None
    slices._drop(q, batch, now)
    removed.extend(batch)
    slices._compact(q, len(removed))
    return removed


def _clean_dead_letters(q: QueueState, cutoff: float, limit: int, now: int) -> Steps:
    """Dead letters by the time they entered the DLQ, oldest first: the queue's DLQ
    index holds them in that order (dead_letters.py), so no storage is scanned, and
    each goes the one way an entry is deleted (dlq.drop_entry)."""
    removed: list[str] = []
    fill = SliceFill(q)
    taken = 0
    while len(removed) < limit:
        mark = q.dlq.oldest()
        if mark is None or mark.entered_at > cutoff:
            break
        drop_entry(q, mark, now)
        removed.append(mark.job_id)
        taken += 1
        if taken >= fill.room():
            taken = 0
            if fill.took(fill.room()):
                yield None
    return removed


def _clean_finished(q: QueueState, state: str, cutoff: float, limit: int) -> Steps:
    removed: list[str] = []
    after: Any = None
    while len(removed) < limit:
        ids, after = yield from slices._ids_page(q, state, after)
        records = yield from _records(q, ids)
        young = False
        for job_id, record in zip(ids, records, strict=True):
            if record is None:
                continue  # gone meanwhile
            if record.get("createdAt", 0) > cutoff:
                young = True  # finished after it was created: every later one is younger
                break
            if _finished_at(record, state) <= cutoff:
                _drop_finished(q, job_id)
                removed.append(job_id)
                if len(removed) >= limit:
                    break
        yield None  # the page's deletions are this step's commit
        if young or after is None or not ids:
            break
    return removed


def _records(q: QueueState, ids: list[str]) -> Generator[
        NeedData | None, None, list[dict[str, Any] | None]]:
    """The finished records of ``ids``, asked for together (one read round a page)."""
    yield from slices.want_records(q, ids)
    return [q.finished.get(job_id) for job_id in ids]


def _finished_at(record: dict[str, Any], state: str) -> float:
    """When a completed job completed, as Clean judges it (its ``createdAt`` when an
    older record has no ``completedAt``)."""
    at = record.get("completedAt")
    return float(at if at is not None else record.get("createdAt", 0))


def _drop_finished(q: QueueState, job_id: str) -> None:
    """Remove a completed job with its result, logs and outcome rows (DeleteJob)."""
    q.logs.drop(job_id)
    q.writes.delete_job(job_id)
