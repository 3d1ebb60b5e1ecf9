"""Parked requests: long-poll pulls and WaitJob holds, with one deadline heap.

:class:`Parked` owns every parked request of a queue and the indexes over them, so each
operation costs O(1) or O(log n) in the number of parked requests: how many holds a
connection has is a length, a closed connection's holds are removed (not only marked),
and the deadline heap sheds its stale entries a chunk per answer once most of it is
stale (never rebuilt whole in one step).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..split_heap import SplitHeap
from .slices import Sliced, lease

if TYPE_CHECKING:
    from .dlq import TimerWaiter
    from .state import QueueState


@dataclass(slots=True, eq=False)  # identity: kept in an ordered set per connection
class PullWaiter:
    """A parked PULL/PULLB: served when a job becomes ready or answered empty at its deadline."""

    handle: Any  # the caller's way back to the client; opaque here
    count: int
    batch: bool
    owner: str | None
    lock_ttl: float
    conn: Any
    detach: bool
    deadline_ms: int
    done: bool = False


@dataclass(slots=True)
class AfterQueues:
    """A reply to send once ``queues`` have applied the notices this step sent them.

    For a command whose effect goes round other queues and back (the parent's queue
    asks each child's queue to remove the child, and each removal settles the parent
    here): answered at once, a client reading the parent next would still see the
    children. The shell holds the reply until each queue has answered an echo sent
    after those notices.
    """

    reply: dict[str, Any]
    queues: frozenset[str]


@dataclass(slots=True, eq=False)  # identity: a hold is kept in sets per connection
class JobWaiter:
    """A parked WaitJob: answered when its job settles, or ``completed: false`` at its
    deadline."""

    handle: Any
    job_id: str
    conn: Any
    deadline_ms: int
    done: bool = False


@dataclass
class WaiterAnswer:
    """A parked pull or wait that got its answer (an error text instead, for a wait on
    a job that disappeared), or, for a parked PULLB whose jobs came, the long work that
    leases the rest of them and answers it (``work``; ``reply`` is then empty)."""

    waiter: PullWaiter | JobWaiter | TimerWaiter  # (timer: long work the tick began)
    reply: dict[str, Any]
    error: str | None = None
    work: Sliced | None = None



# Shed stale entries from the deadline heap once it holds this many more stale entries
# than live ones: a heap entry is only dropped when it reaches the top, so answered
# requests would otherwise stay in memory until their (possibly distant) deadline.
COMPACT_SLACK = 1024

Deadline = tuple[int, int, "PullWaiter | JobWaiter"]


def _live(entry: Deadline) -> bool:
    return not entry[2].done


class Parked:
    """The parked pulls and WaitJob holds of one queue."""

    __slots__ = ("pulls", "by_job", "by_conn", "pulls_by_conn", "settled", "_deadlines",
                 "_seq", "_stale")

    def __init__(self) -> None:
        self.pulls: deque[PullWaiter] = deque()  # served in arrival order
        # live holds per job (an ordered set: a closed connection's hold on a job that
        # thousands wait for goes in O(1))
        self.by_job: dict[str, dict[JobWaiter, None]] = {}
        self.by_conn: dict[Any, set[JobWaiter]] = {}  # live holds per connection
        # live parked pulls per connection (an ordered set): a closed connection's are
        # found without walking every pull parked on the queue
        self.pulls_by_conn: dict[Any, dict[PullWaiter, None]] = {}
        # holds answered by a transition (and requests of a connection dropped with an
        # answer: drop_waiters), for tick()
        self.settled: list[WaiterAnswer] = []
        # One heap for every parked pull and hold, so the next deadline and the expired
        # ones cost O(log n) per batch, not a scan of every parked request. In chunks,
        # so that its stale entries can be shed a chunk at a time (see _answered).
        self._deadlines: SplitHeap[Deadline] = SplitHeap()
        self._seq = 0
        self._stale = 0  # heap entries whose request is already answered

    def _arm(self, waiter: PullWaiter | JobWaiter) -> None:
        self._seq += 1
        self._deadlines.push((waiter.deadline_ms, self._seq, waiter))

    def _answered(self, n: int = 1) -> None:
        """``n`` parked requests were answered before their deadline: their heap
        entries are stale. Once stale entries outnumber live ones (and the slack), each
        call sheds them from one chunk of the heap (at most ``CHUNK_ENTRIES``): a
        thousand connections closing with many holds each had a single step rebuild the
        whole heap while every other queue waited."""
        self._stale += n
        heap = self._deadlines
        if self._stale > COMPACT_SLACK and self._stale * 2 > len(heap):
            self._stale -= heap.sweep(_live)

    def park_pull(self, waiter: PullWaiter) -> None:
        self.pulls.append(waiter)
        mine = self.pulls_by_conn.get(waiter.conn)
        if mine is None:
            self.pulls_by_conn[waiter.conn] = {waiter: None}
        else:
            mine[waiter] = None
        self._arm(waiter)

    def pull_served(self, waiter: PullWaiter) -> None:
        """A parked pull got its jobs before its deadline (it is already off ``pulls``)."""
        waiter.done = True
        self._forget_pull(waiter)
        self._answered()

    def _forget_pull(self, waiter: PullWaiter) -> None:
        mine = self.pulls_by_conn.get(waiter.conn)
        if mine is not None:
            mine.pop(waiter, None)
            if not mine:
                del self.pulls_by_conn[waiter.conn]

    def park_hold(self, waiter: JobWaiter) -> None:
        self.by_job.setdefault(waiter.job_id, {})[waiter] = None
        self.by_conn.setdefault(waiter.conn, set()).add(waiter)
        self._arm(waiter)

    def holds(self, conn: Any) -> int:
        holds = self.by_conn.get(conn)
        return len(holds) if holds is not None else 0

    def _forget_hold(self, waiter: JobWaiter) -> None:
        holds = self.by_conn.get(waiter.conn)
        if holds is not None:
            holds.discard(waiter)
            if not holds:
                del self.by_conn[waiter.conn]

    def next_wakeup(self) -> int | None:
        """When a parked request's wait next runs out (None: none waits with a limit)."""
        return self.next_deadline() if self._deadlines else None

    def timed(self) -> bool:
        """Whether some parked request waits with a limit (stale entries included)."""
        return bool(self._deadlines)

    def next_deadline(self) -> int | None:
        heap = self._deadlines
        top = heap.first()
        while top is not None and top[2].done:
            heap.pop()
            self._stale -= 1
            top = heap.first()
        return top[0] if top is not None else None

    def expired(self, now: int) -> list[PullWaiter | JobWaiter]:
        """Requests whose deadline has come, marked answered (the caller answers them)."""
        out: list[PullWaiter | JobWaiter] = []
        heap = self._deadlines
        top = heap.first()
        while top is not None and top[0] <= now:
            heap.pop()
            waiter = top[2]
            top = heap.first()
            if waiter.done:
                self._stale -= 1
                continue
            waiter.done = True
            out.append(waiter)
            if isinstance(waiter, PullWaiter):
                self._forget_pull(waiter)
            else:
                waits = self.by_job.get(waiter.job_id)
                if waits is not None:
                    del waits[waiter]
                    if not waits:
                        del self.by_job[waiter.job_id]
                self._forget_hold(waiter)
        return out

    def settle(self, job_id: str, reply: dict[str, Any], error: str | None) -> None:
        """Answer every hold on a job that reached its final outcome."""
        waits = self.by_job.pop(job_id, None)
        if waits is None:
            return
        for w in waits:
            if not w.done:
                w.done = True
                self._forget_hold(w)
                self.settled.append(WaiterAnswer(w, reply, error))
        self._answered(len(waits))

    def drop(self, conn: Any) -> list[PullWaiter | JobWaiter]:
        """A closed connection's pulls claim nothing and its holds are removed; returned
        for a caller that still answers them."""
        dropped: list[PullWaiter | JobWaiter] = []
        for w in self.pulls_by_conn.pop(conn, ()):
            w.done = True
            dropped.append(w)
        for hold in self.by_conn.pop(conn, ()):
            hold.done = True
            dropped.append(hold)
            waits = self.by_job.get(hold.job_id)
            if waits is not None:
                del waits[hold]
                if not waits:
                    del self.by_job[hold.job_id]
        if dropped:
            self._answered(len(dropped))
        return dropped

    def take_settled(self) -> list[WaiterAnswer]:
        settled, self.settled = self.settled, []
        return settled


def park(q: QueueState, waiter: PullWaiter) -> None:
    q.parked.park_pull(waiter)


def expire_waits(q: QueueState, now: int) -> list[WaiterAnswer]:
    """Answer parked pulls (no job) and waits (``completed: false``) at their deadline."""
    return [_empty_answer(q, waiter) for waiter in q.parked.expired(now)]


def _empty_answer(q: QueueState, waiter: PullWaiter | JobWaiter) -> WaiterAnswer:
    """A parked pull's answer without a job, a wait's without an outcome."""
    if isinstance(waiter, PullWaiter):
        return WaiterAnswer(waiter, q.pull_reply([], [], batch=waiter.batch,
                                                 owner=waiter.owner))
    return WaiterAnswer(waiter, {"completed": False})


def serve_waiters(q: QueueState, now: int) -> list[WaiterAnswer]:
    """Hand ready jobs to parked pulls in arrival order (expiry is expire_waits').

    A parked PULLB of many jobs is leased as a PULLB sent now would be: its first slice
    here, the rest as the queue's long work (``WaiterAnswer.work``), so that a PUSHB
    of 1,000 jobs meeting a parked PULLB of 1,000 does not lease them all in one step
    (a long one at a million active). The pulls parked behind it are served at a later
    tick, once that work is done: they came later, and it takes the jobs first."""
    out: list[WaiterAnswer] = []
    pulls = q.parked.pulls
    while pulls:
        w = pulls[0]
        if w.done:
            pulls.popleft()
            continue
        if q.settings.paused:
            break
        leased = lease(q, w.count, now, owner=w.owner, lock_ttl=w.lock_ttl, conn=w.conn,
                       detach=w.detach)
        if isinstance(leased, Sliced):
            answer = WaiterAnswer(w, {}, work=leased)
        elif leased[0]:
            answer = WaiterAnswer(w, q.pull_reply(*leased, batch=w.batch, owner=w.owner,
                                                       now=now))
        else:
            break  # nothing ready
        pulls.popleft()
        q.parked.pull_served(w)
        out.append(answer)
        if answer.work is not None:
            break
    return out


def abandon_pulls(q: QueueState) -> list[WaiterAnswer]:
    """Empty answers for the parked pulls of a state being replaced (the queue actor
    rebuilds its state after a crash): their clients poll again."""
    return [WaiterAnswer(w, q.pull_reply([], [], batch=w.batch, owner=w.owner))
            for w in q.parked.pulls if not w.done and w.handle is not None]


def drop_waiters(q: QueueState, conn: Any, *, answer: bool = False) -> None:
    """A closed connection's parked pulls claim nothing and its waits end. ``answer``:
    each is answered as at its deadline, for a connection still open that carried them
    (a peer link, for one of its broker's clients that left: cluster/clients.py),
    whose in-flight commands must all be answered."""
    dropped = q.parked.drop(conn)
    if answer and dropped:
        q.parked.settled.extend(_empty_answer(q, waiter) for waiter in dropped)


def park_job_waiter(q: QueueState, waiter: JobWaiter) -> None:
    q.parked.park_hold(waiter)


def held_waits(q: QueueState, conn: Any) -> int:
    return q.parked.holds(conn)


def settle(q: QueueState, job_id: str, reply: dict[str, Any],
            error: str | None = None) -> None:
    """Answer every WaitJob on a job that reached its final outcome."""
    q.parked.settle(job_id, reply, error)


def settle_gone(q: QueueState, job_id: str) -> None:
    settle(q, job_id, {}, error=f"Job {job_id} not found")
