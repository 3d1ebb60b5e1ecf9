"""Long work in bounded slices: Drain, Obliterate and PromoteJobs of a whole queue, and
the admission of a large PUSHB.

A command whose cost grows with the queue (a million jobs drained is seconds of work)
is written as a generator that does at most ``slice_jobs(q)`` jobs' worth of work
between two ``yield``s (``SLICE_JOBS``, or fewer where the queue actor measured slices
of that many running past its time budget, or fewer still when the actor's clock says
the slice under way has used its time: :class:`SliceFill`). Its handler returns a
:class:`Sliced`; the queue actor runs one slice per step, commits what the slice wrote,
and lets the other queues run before the next (trio's checkpoint between steps). While
the work lasts, the queue takes nothing else
(its commands, notices and timers wait in their inboxes), so no command of the queue
sees the work half done; only a crash can cut it short, leaving it partly done and
unacknowledged, like any command whose reply was never sent.

Run to the end at once (``run``), a Sliced is the plain synchronous command, which is
how :class:`~trioqueue.core.queue.state.QueueState`'s methods and the tests use it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import STORAGE_FULL, Refused
from ..job import COMPLETED, FAILED
from .finished import GET, NeedData

if TYPE_CHECKING:
    from ..job import JobRecord
    from .order import CreationOrder
    from .state import QueueState

# Jobs one slice handles: a few ms of work with its commit (measured at 1M jobs: slices
# of 2,000 jobs held other queues for 35-64 ms, of 400 for 13-15 ms; slices of 200 ACK
# completions 10-20 ms, of 100 mostly under 10), so that a queue
# draining a million jobs delays every other queue by at most one slice at a time.
SLICE_JOBS = 100
# Stale heap entries one slice frees (a tuple each: far cheaper than a job).
TRIM_ENTRIES = 20_000


# The fewest jobs a slice takes however slow its jobs are (see slice_jobs).
MIN_SLICE_JOBS = 4


def slice_jobs(q: QueueState) -> int:
    """How many jobs the next slice of ``q``'s long work takes: ``SLICE_JOBS``, or fewer
    where the driver measured that slices of that many hold the loop past its budget
    (``q.slice_cap``, set by the queue actor from each slice's duration; 0 until then).

    The core keeps no clock: the count is all it is told, so a test that sets none gets
    ``SLICE_JOBS`` slices. Read at the start of each slice, so one long command follows
    a cap that changes while it runs (leases at a million active jobs, or jobs of a
    megabyte, take far longer per job than a drain's removals)."""
    return capped(q.slice_cap, SLICE_JOBS)


def capped(cap: int, most: int) -> int:
    """A count the driver set (``cap``; 0: not set) within its most: the one rule of
    ``slice_cap`` and ``promote_cap``."""
    return cap if 0 < cap < most else most


# Jobs a slice does between two looks at the driver's clock, when it keeps one
# (``QueueState.slice_over``): a lease at a million active jobs costs 30-50 us, so a
# slice that runs slow (a busy host, a cold cache) overruns its time by about half a
# millisecond at most, instead of by the rest of its count.
LOOK_EVERY_JOBS = 10


class SliceFill:
    """How far the current slice of a long command has gone: the jobs it did against
    ``slice_jobs(q)``, and the driver's word that its time is up.

    The count alone is set from what earlier slices cost (``slice_cap``), so a slice
    that runs several times slower than the last ones (seen at a million jobs) holds
    every other queue for its whole count. So a
    slice is done in pieces of at most ``LOOK_EVERY_JOBS`` jobs, and after each piece
    it asks ``q.slice_over`` (the driver's clock; None: no clock, and a piece is the
    whole rest of the slice, as in the tests and the synchronous forms).
    """

    __slots__ = ("_q", "_size", "_taken")

    def __init__(self, q: QueueState) -> None:
        self._q = q
        self._next_slice()

    def _next_slice(self) -> None:
        self._taken = 0
        self._size = slice_jobs(self._q)  # read again: the driver may have resized it

    def room(self) -> int:
        """The most jobs the next piece takes."""
        left = self._size - self._taken
        return left if self._q.slice_over is None else min(left, LOOK_EVERY_JOBS)

    def took(self, jobs: int) -> bool:
        """A piece of ``jobs`` jobs was done; True when the slice is over (the work then
        yields, and the next slice begins with the count read again)."""
        self._taken += jobs
        over = self._q.slice_over
        if self._taken < self._size and (over is None or not over()):
            return False
        self._next_slice()
        return True

    def close(self) -> bool:
        """End the slice under way before work of another kind (a heap's trim, a page
        of finished jobs); True when it did any jobs (the work then yields)."""
        if not self._taken:
            return False
        self._next_slice()
        return True


def _ranges(q: QueueState, count: int) -> Iterator[tuple[int, int, bool]]:
    """``[start, stop)`` ranges covering ``count`` items, a piece of a slice each
    (:class:`SliceFill`), with whether the range begins a slice (the work yields
    before it, except before the first where it says so)."""
    fill = SliceFill(q)
    start = 0
    begins = True
    while start < count:
        stop = min(count, start + fill.room())
        yield start, stop, begins
        begins = fill.took(stop - start)
        start = stop


def is_long(jobs: int) -> bool:
    """Whether work on ``jobs`` known jobs runs in slices: the rule PUSHB, ACKB and a
    closed connection's release ask (a PULLB leases a first slice at once, and goes on
    in slices when it filled it: how many jobs it gets is known only then)."""
    return jobs > SLICE_JOBS


# A step yields None (a slice is done) or the reads the next slice needs first.
Steps = Generator["NeedData | None", None, Any]


class Sliced:
    """One command's long work; :meth:`step` runs a slice, True once it is done."""

    __slots__ = ("_steps", "_reply", "result", "done", "need", "refused")

    def __init__(self, steps: Steps, reply: Callable[[Any], dict[str, Any]]) -> None:
        self._steps = steps
        self._reply = reply
        self.result: Any = None
        self.done = False
        # The reads the next slice needs (the actor supplies them before the next step).
        self.need: NeedData | None = None
        self.refused: str | None = None  # the error text, when the work refused

    def step(self) -> bool:
        try:
            self.need = next(self._steps)
        except StopIteration as stop:
            self.result = stop.value
            self.done = True
            self.need = None
        except Refused as exc:
            # The work refused the command (a slice validates before it changes
            # anything, as handlers do): it is over, answered with the error.
            self.refused = exc.message
            self.done = True
            self.need = None
        return self.done

    def run(self) -> Any:
        """Every remaining slice at once (the synchronous form, for a driver whose
        view fetches misses itself); returns the result."""
        while not self.step():
            if self.need is not None:
                raise self.need
        if self.refused is not None:
            raise Refused(self.refused)
        return self.result

    def reply(self) -> dict[str, Any]:
        assert self.done, "the work is not finished"
        return self._reply(self.result)

    def answer(self, request: Answerable) -> dict[str, Any]:
        """The finished work's frame for ``request``: its reply, or its error."""
        if self.refused is not None:
            return request.error_reply(self.refused)
        return request.reply(self.reply())


class Answerable(Protocol):
    """A request as long work answers it (``actors.request.Request``)."""

    def reply(self, payload: dict[str, Any]) -> dict[str, Any]: ...
    def error_reply(self, message: str) -> dict[str, Any]: ...


def want_records(q: QueueState, job_ids: Iterable[str]) -> Generator[NeedData, None, None]:
    """Ask for the finished records of ``job_ids`` (once for all of them) until the
    actor supplied them; then ``q.finished.get`` answers each without I/O."""
    reads = [(GET, job_id) for job_id in job_ids]
    while True:
        try:
            q.finished.want(reads)
            return
        except NeedData as need:
            yield need


def _ids_page(q: QueueState, state: str, after: Any) -> Generator[
        NeedData | None, None, tuple[list[str], Any]]:
    """A page of finished ids; until the actor supplied it, the slice asks for it (with
    one size: the read asked for is the read supplied)."""
    limit = slice_jobs(q)
    while True:
        try:
            return q.finished.ids_page(state, after=after, limit=limit)
        except NeedData as need:
            yield need


# Copy the job dicts after removing at least this many jobs, once few are left: a dict
# keeps its size after deletes (30 MB at a million jobs, per dict).
COMPACT_AFTER_JOBS = 65_536


def _compact(q: QueueState, removed: int) -> None:
    if removed >= COMPACT_AFTER_JOBS and len(q.jobs) * 8 < removed:
        q.jobs.compact()
        q.index.compact()


def _batches(order: CreationOrder, fill: SliceFill) -> Iterator[list[str]]:
    """The ids of ``order`` in pieces of at most ``fill.room()``, for work that removes
    every job of the place as it goes (and tells ``fill`` what each piece took).

    One walk serves all the slices: starting over for each slice would skip again
    every millisecond already emptied, and sort again the group it stopped in (a
    PUSHB's thousand jobs share one millisecond). Ids are taken unsorted, since the
    order in which they go does not matter; a group is copied once (in C) so that its
    dict may shrink under the walk. A job that came into the place during the walk
    (a removal may move another job) is found by walking again.
    """
    while len(order):
        batch: list[str] = []
        size = fill.room()
        for group in order.groups():
            for job_id in list(group):
                batch.append(job_id)
                if len(batch) >= size:
                    yield batch
                    batch = []
                    size = fill.room()
        if batch:
            yield batch


def _drop(q: QueueState, ids: list[str], now: int) -> int:
    """Remove these jobs (those still live: a removal may have taken another with it);
    how many went."""
    from . import dependencies  # (here: the queue's rule modules import this one)

    jobs = q.jobs
    n = 0
    for job_id in ids:
        job = jobs.get(job_id)
        if job is not None:
            dependencies.drop_queued(q, job, now)
            n += 1
    return n


def _drop_places(q: QueueState, orders: tuple[Any, ...], now: int
                 ) -> Generator[None, None, int]:
    """Drop every job in these listing orders, a slice at a time; how many went."""
    removed = 0
    fill = SliceFill(q)
    for order in orders:
        for ids in _batches(order, fill):
            removed += _drop(q, ids, now)
            if fill.took(len(ids)):
                yield None
    if fill.close():
        yield None
    return removed


class Trimmable(Protocol):
    """A heap, or the owner of one, that drops its stale entries a few at a time."""

    def trim(self, entries: int) -> bool: ...


def _trim(heap: Trimmable) -> Steps:
    """Empty a heap whose entries are all stale, a slice at a time."""
    while heap.trim(TRIM_ENTRIES):
        yield None


def drain(q: QueueState, now: int) -> Steps:
    """Remove every queued job (waiting, prioritized, delayed); active jobs and jobs
    waiting for children stay. No per-job event, as in bunqueue. Returns the count."""
    places = q.places
    removed = yield from _drop_places(
        q, (places.waiting, places.prioritized, places.delayed), now)
    # Nothing is queued now, so every heap entry left is stale.
    yield from _trim(q.order)
    _compact(q, removed)
    q.announce("queue:drained", now, count=removed)
    return removed


def obliterate(q: QueueState, now: int) -> Steps:
    """Remove everything of the queue: live jobs in every state (an active job's
    worker then finds it gone), finished jobs with their results, logs, retained
    results, the stored settings. Parked pulls keep waiting."""
    places = q.places
    removed = yield from _drop_places(
        q, (places.waiting, places.prioritized, places.delayed, places.active,
            places.waiting_children), now)
    _compact(q, removed)
    for heap in (q.order, q.leases, q.timeouts):
        yield from _trim(heap)
    for state in (COMPLETED, FAILED):
        after: Any = None
        while True:
            ids, after = yield from _ids_page(q, state, after)
            for job_id in ids:
                q.writes.delete_job(job_id)
            yield None
            if after is None or not ids:
                break
    q.stall_watch.clear()
    q.dlq.clear()  # its records went with the failed ones above
    q.logs.clear()
    q.index.forget_retained(q.name)
    q.reset_settings()
    q.announce("queue:obliterated", now)
    q.announce("queue:removed", now)  # (as bunqueue: the queue's name is gone too)


def promote_jobs(q: QueueState, now: int, count: int | None) -> Steps:
    """Delayed jobs become ready now, earliest runAt first (``count`` of them, or all).
    Returns how many were promoted."""
    from . import lifecycle, moves  # (here: the queue's rule modules import this one)

    lifecycle.promote_due(q, now)  # what is due already is not "delayed"
    order = q.order
    promoted = 0
    # A promotion costs a job about twice a removal (its record is rewritten: a heap push,
    # a listing move and a put), so a slice takes half as many (in process at 200k jobs, a
    # 200-job slice with its commit took p50 1.9 ms, a Drain slice 1.0 ms): each counts
    # two in the slice's fill.
    fill = SliceFill(q)
    while order.delayed_left() and (count is None or promoted < count):
        piece = max(1, fill.room() // 2)
        for _ in range(piece):
            if not order.delayed_left() or (count is not None and promoted >= count):
                break
            job = lifecycle.pop_delayed(q)
            if job is not None:
                moves.reschedule(q, job, now, run_at=now)
                promoted += 1
        if fill.took(2 * piece):
            yield None
    return promoted


class JobsParse(Protocol):
    """Validates a PUSHB's jobs ``[start, stop)`` into specs (``Refused`` at the first
    bad one); ``linked`` once any had a custom id or a dependency."""

    linked: bool

    def __call__(self, start: int, stop: int) -> list[dict[str, Any]]: ...


def pushb_sliced(q: QueueState, count: int, parse: JobsParse, now: int,
                 storage_full: bool) -> Sliced:
    """A large PUSHB, a slice of jobs (``slice_jobs``) a step: validated first
    (``parse`` refuses the whole batch at its first bad job, before any is admitted),
    then admitted (admitted in one step, a PUSHB of 1,000 held every other queue for
    all of them).

    The batch stays whole for its own queue (nothing else of the queue runs before
    its last slice). A crash midway leaves an ordered prefix committed without a
    reply, which is bunqueue's rule for PUSHB admission as well. A batch with custom ids
    or dependencies is admitted in one step after its validation (those may need stored
    reads, fetched before the step runs again).
    """
    def steps() -> Steps:
        specs: list[dict[str, Any]] = []
        for start, stop, begins in _ranges(q, count):
            if begins:
                yield None
            specs.extend(parse(start, stop))
        if parse.linked:
            yield None  # the admission is a step of its own
            while True:
                try:
                    return admit_batch(q, specs, True, now, storage_full)
                except NeedData as need:
                    yield need  # fetched before this step runs again
        if storage_full:  # the whole batch: PUSHB admits all of its jobs or none
            raise Refused(STORAGE_FULL)
        ids: list[str] = []
        for start, stop, begins in _ranges(q, len(specs)):
            if begins:
                yield None
            ids.extend(q.push(specs[start:stop], now))
        return ids

    def reply(ids: list[str]) -> dict[str, Any]:
        return batch_pushed(q, count, pushed_before, ids, now)

    pushed_before = q.c.pushed
    return Sliced(steps(), reply)


def pullb_sliced(q: QueueState, count: int, now: int, *, owner: str | None,
                 lock_ttl: float, conn: Any, detach: bool) -> Sliced:
    """A large PULLB: a slice (``slice_jobs``, or less when the slice's time is up) a
    step, until ``count`` or the queue runs out. The handler runs the first step in
    the command's own step; a PULLB done by then is answered as any pull.

    One job leased is real work at a million active (its lock, its record rewritten,
    its wire form): a PULLB of 1,000 in one step held every other client for all of it.
    Every slice leases with the command's ``now``, so all of its jobs share one lock
    deadline, as in one step. Nothing else of the queue runs before the last slice, so
    no other pull can take a job between two of them.
    """
    jobs: list[dict[str, Any]] = []
    tokens: list[str] = []

    def steps() -> Steps:
        fill = SliceFill(q)
        while True:
            want = min(fill.room(), count - len(jobs))
            more, more_tokens = q.pull(now, count=want, owner=owner, lock_ttl=lock_ttl,
                                       conn=conn, detach=detach)
            jobs.extend(more)
            tokens.extend(more_tokens)
            if len(more) < want or len(jobs) == count:  # full, or the queue ran out
                return jobs, tokens
            if fill.took(want):
                yield None

    def reply(result: tuple[list[dict[str, Any]], list[str]]) -> dict[str, Any]:
        return q.pull_reply(*result, batch=True, owner=owner, now=now)

    return Sliced(steps(), reply)


def lease(q: QueueState, count: int, now: int, *, owner: str | None, lock_ttl: float,
          conn: Any, detach: bool) -> tuple[list[dict[str, Any]], list[str]] | Sliced:
    """A pull's jobs and tokens, leased at once; or, for a PULLB of more than
    ``LOOK_EVERY_JOBS``, its long work with the first slice done (the jobs, once that
    slice was all of it). The one rule of a PULLB sent and a parked one served."""
    if count <= LOOK_EVERY_JOBS:
        return q.pull(now, count=count, owner=owner, lock_ttl=lock_ttl, conn=conn,
                      detach=detach)
    work = pullb_sliced(q, count, now, owner=owner, lock_ttl=lock_ttl, conn=conn,
                        detach=detach)
    if not work.step():
        return work
    leased: tuple[list[dict[str, Any]], list[str]] = work.result
    return leased


def ackb_sliced(q: QueueState, checked: list[tuple[int, JobRecord]], now: int, *,
                results: list[Any] | None, removes: list[Any] | None,
                reply: Callable[[], dict[str, Any]]) -> Sliced:
    """The jobs of a large ACKB (``checked``: every token already checked, nothing
    changed yet) completed a slice (``slice_jobs``) a step, each its own commit.

    One job completed is real work at a million finished (its record rewritten, its
    finished-index entry, its result): an ACKB of 1,000 in one step held every other
    queue for all of it. Every slice completes with the command's ``now``, and nothing
    else of the queue runs before the last one, so the tokens checked first still hold.
    A crash midway leaves the first slices completed without a reply: an ACKB sent
    again ignores those jobs (not active), as it does any job already acknowledged.
    """
    def steps() -> Steps:
        for start, stop, begins in _ranges(q, len(checked)):
            if begins and start:
                yield None
            q.ackb_apply(checked[start:stop], now, results=results,
                         removes=removes)

    return Sliced(steps(), lambda _: reply())


def admit_batch(q: QueueState, specs: list[dict[str, Any]], linked: bool, now: int,
                storage_full: bool) -> list[str]:
    """Admit a PUSHB's validated jobs at once; their ids. ``linked``: some have custom
    ids or dependencies, checked first."""
    if linked:
        q.check_push_dependencies(specs, now, batch=True)
    if storage_full:  # the whole batch: PUSHB admits all of its jobs or none
        raise Refused(STORAGE_FULL)
    return q.push(specs, now)


def batch_pushed(q: QueueState, total: int, pushed_before: int, ids: list[str], now: int
                 ) -> dict[str, Any]:
    """A PUSHB's reply; a batch of several that admitted jobs is told to the dashboard
    (``batch:pushed``: the jobs new to the queue, and those it already had)."""
    inserted = q.c.pushed - pushed_before
    if total > 1 and inserted > 0:
        q.announce("batch:pushed", now, total=total, inserted=inserted,
                    duplicates=total - inserted)
    return {"ids": ids}
