"""How a live job enters, leaves and moves between the places of a queue: the
per-state counters, the ready and delayed heaps, and forgetting a job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .. import states as st
from ..job import ACTIVE, QUEUED, WAITING_CHILDREN, JobRecord
from . import slices
from .tallies import MinuteHistory

# Delayed jobs promoted per call at most (see promote_slice); the queue actor lowers it
# for a queue where that many take longer than Config.slice_budget_ms. A promotion
# costs about 7 us in process at 100k delayed jobs (two heap operations, two listing
# moves) and 30 us at a million: the first slice of a million jobs falling due, before
# the actor measured any, took 12.6 ms of CPU with 400.
PROMOTE_MAX_JOBS = 200

if TYPE_CHECKING:
    from .state import QueueState


@dataclass
class Counters:
    waiting: int = 0
    prioritized: int = 0
    delayed: int = 0
    active: int = 0
    waiting_children: int = 0
    by_priority: dict[float, int] = field(default_factory=dict)
    # Lifetime tallies since the broker started (tallies.py): jobs admitted, delivered,
    # completed, failed for good; the ms completed jobs ran since their pull; the minute
    # history of the completed and failed.
    pushed: int = 0
    pulled: int = 0
    completed: int = 0
    failed: int = 0
    ran_ms: int = 0
    minute_end_ms: int = 0  # when the open minute of ``minutes`` ends (a roll is due)
    minutes: MinuteHistory = field(default_factory=MinuteHistory)


def count(q: QueueState, job: JobRecord, delta: int, now: int) -> None:
    """Keep the per-state counters and listing orders right; called when a job enters
    (``delta`` +1) or leaves (-1) a place. The choke point every live move passes."""
    c = q.c
    places = q.places
    state = job.state
    if state == QUEUED:
        if delta < 0:
            # A due job may still sit in the delayed heap (and count): promote first,
            # so the counter it leaves is the one it was added to.
            promote_due(q, now)
        if job.run_at > now or (q.order.due_left
                                and places.delayed.holds(job.created_at, job.id)):
            c.delayed += delta
            place = places.delayed
        elif job.priority > 0:
            c.prioritized += delta
            place = places.prioritized
        else:
            c.waiting += delta
            place = places.waiting
        n = c.by_priority.get(job.priority, 0) + delta
        if n:
            c.by_priority[job.priority] = n
        else:
            c.by_priority.pop(job.priority, None)
        if job.group_id is not None:
            q.groups.counted(job, delta, False)
    elif state == ACTIVE:
        c.active += delta
        place = places.active
        if job.group_id is not None:
            q.groups.counted(job, delta, True)
        if delta > 0:
            q.stall_watch.enter(job)
        else:
            q.stall_watch.leave(job)
    elif state == WAITING_CHILDREN:
        c.waiting_children += delta
        place = places.waiting_children
    else:
        return
    if delta > 0:
        place.add(job.created_at, job.id)
    else:
        place.discard(job.created_at, job.id)


def move(q: QueueState, job: JobRecord, event: str) -> None:
    """The one write of ``job.state`` for a move: the table is asked with the job's
    CURRENT state, so a move the rules do not allow raises where it is attempted
    (h11's ``_state.py`` discipline). Counters are the caller's (see :func:`transition`).

    Jobs get their first state where they are made (``Job.admit``, ``Job.from_record``,
    a flow's jobs); every later change of state goes through here.
    """
    job.state = st.next_state(job.state, event)


def transition(q: QueueState, job: JobRecord, event: str, now: int) -> None:
    """A move between two live places: leave one counter, move, enter the other.

    The table is asked before anything changes, so a refused move leaves the counters
    as they were."""
    # the table asked inline (next_state only to refuse): this runs per pull and ack
    state = st.TRANSITIONS.get((job.state, event)) or st.next_state(job.state, event)
    count(q, job, -1, now)
    job.state = state
    count(q, job, +1, now)


def enqueue(q: QueueState, job: JobRecord, now: int, *, keep_seq: bool = False) -> None:
    """Put a QUEUED job in the right heap. Stale heap entries are skipped by seq.

    ``keep_seq`` (restart only) keeps the stored admission number, so the order
    survives any number of restarts; new numbers then continue above it.
    """
    order = q.order
    if keep_seq and job.seq > 0:
        order.keep_seq(job.seq)
    else:
        job.seq = order.next_seq()
    if job.run_at > now:
        order.push_delayed(job)
    else:
        _push_ready(q, job)
    count(q, job, +1, now)


def _push_ready(q: QueueState, job: JobRecord) -> None:
    if job.group_id is not None:
        q.groups.push(job)  # its group's heap: served round robin (groups.py)
    else:
        q.order.push_ready(job)


def promote_due(q: QueueState, now: int) -> None:
    """Move delayed jobs whose runAt has come into the ready heap (and the counters),
    at most ``PROMOTE_MAX_JOBS`` a call (see :func:`promote_slice`).

    Callers run per pull and per job that leaves the queue; while a backlog is left
    (``q.order.due_left``) they promote nothing, or a PULLB of 200 jobs would promote 200
    slices in one step: the queue's tick promotes one slice a step instead."""
    if q.order.promotion_due(now):
        promote_slice(q, now)


def promote_slice(q: QueueState, now: int) -> None:
    """Promote up to ``PROMOTE_MAX_JOBS`` due jobs, earliest runAt first.

    A million jobs delayed to one instant fall due together; promoting them in one call
    would hold the loop for seconds. So a call stops at the bound and sets
    ``q.order.due_left``: the queue's next wake-up is then at once (``next_deadline``) and
    each tick promotes the next slice, with other queues served between. Until then a
    job that fell due but is not promoted yet still sits in the delayed place and
    counter (``count`` asks the place), and pulls take from what is promoted.
    """
    order = q.order
    next_due = order.next_due
    places = q.places
    budget = slices.capped(q.promote_cap, PROMOTE_MAX_JOBS)
    over = q.slice_over  # the driver's clock (slices.SliceFill), asked every few jobs
    look = every = slices.LOOK_EVERY_JOBS
    while (at := next_due()) is not None and at <= now:
        if not budget:
            order.promote_stopped()
            return
        budget -= 1
        look -= 1
        if not look:
            look = every
            if over is not None and over():
                budget = 0  # the tick's time is up: the next due job waits for the next
        job = pop_delayed(q)
        if job is None:
            continue
        job_id = job.id
        q.c.delayed -= 1
        places.delayed.discard(job.created_at, job_id)
        if job.priority > 0:
            q.c.prioritized += 1
            places.prioritized.add(job.created_at, job_id)
        else:
            q.c.waiting += 1
            places.waiting.add(job.created_at, job_id)
        _push_ready(q, job)
    order.promote_done()


def pop_delayed(q: QueueState) -> JobRecord | None:
    """Pop the earliest entry of the delayed heap: its job, or None for a stale entry
    (or an empty heap)."""
    entry = q.order.pop_delayed()
    if entry is None:
        return None
    _, seq, job_id = entry
    job = q.jobs.get(job_id)
    if job is None or job.state != QUEUED or job.seq != seq:
        return None
    return job


def remove_live(q: QueueState, job: JobRecord, now: int) -> None:
    """Forget a live job entirely (memory side; the caller records the storage side)."""
    count(q, job, -1, now)
    q.leases.release(job.id)
    q.dedup.release(job)
    del q.jobs[job.id]
    q.index.remove(job.id)
    if job.pending:
        # It waits no longer: its children must not notify it.
        for child_id in job.pending:
            q.index.drop_dependent(child_id, job.id)

