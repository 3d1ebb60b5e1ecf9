"""How many jobs a queue's slices of long work take: sized from what they cost here.

The core cuts long work (Drain, Obliterate, PromoteJobs, a PULLB or ACKB of 1,000 jobs,
a closed connection's release) into slices of at most ``SLICE_JOBS`` jobs, and promotes
due jobs at most ``PROMOTE_MAX_JOBS`` a tick. A fixed count is a fixed time only for
one kind of job on one machine: a lease at a million active jobs costs ten times a
drained job, and a job of a megabyte far more. trio runs every runnable task between two
polls of the sockets, and a request crosses a few such passes, so another queue's client
waits for one to three slices.

So the queue actor times each slice (with its commit) and tells the core a smaller
count when a slice ran past ``Config.slice_budget_ms``, and a larger one again, a
quarter at a time, when slices take under half of it. The core only reads the counts
(``QueueState.slice_cap``, ``promote_cap``): it keeps no clock, and its tests see the
fixed sizes. A slice is timed in the trio thread's CPU time, not by the wall clock:
the size decides what the slice itself costs, while on a busy host the wall clock also
counts the time the OS gave the core to another process, and shrinking every slice for
that costs throughput (a commit and a scheduler pass per slice).

A count set from the last slices does not bound the slice under way, though: at a
million jobs a slice of 100 leases now and then took several times its usual CPU time
(a cold cache, a busy host), and every other queue waited for all of it. So the
budget is also the slice's deadline by the wall clock (``WORK_SHARE`` of it, the rest
left for the slice's commit), which is what the other queues wait by: the core asks
:meth:`SliceBudget.over` every few jobs (``slices.LOOK_EVERY_JOBS``,
``QueueState.slice_over``) and ends the slice early when it says so. In a quiet spell
slices end by their count and the deadline costs one clock read per few jobs, small
against the work of those jobs.
"""

from __future__ import annotations

import time

from ..core.queue import lifecycle, slices
from ..core.queue.state import QueueState

_wall = time.perf_counter  # (a vDSO read, 50 ns; thread_time is a system call, 0.6 us)

# The share of the budget a slice's own work may take by the wall clock. Its commit
# follows in the same step, and a slice that ran slow commits slowly too: with the
# whole budget as the deadline, long steps were left at a million jobs; with half,
# another queue's slow calls became rare.
WORK_SHARE = 0.5


def resized(cap: int, most: int, spent_s: float, budget_s: float) -> int:
    """The next count of a slice that took ``spent_s`` with ``cap`` jobs at most
    (0: ``most``): proportionally fewer past the budget, a quarter more under half."""
    size = slices.capped(cap, most)
    if spent_s > budget_s:
        return max(slices.MIN_SLICE_JOBS, int(size * budget_s / spent_s))
    if spent_s < budget_s / 2 and size < most:
        return min(most, size + max(1, size // 4))
    return size


class SliceBudget:
    """Times a queue actor's slices and promotions; resizes the next ones."""

    __slots__ = ("budget_s", "_began", "_deadline")

    def __init__(self, budget_ms: float) -> None:
        self.budget_s = budget_ms / 1000  # 0: the fixed sizes
        self._began = 0.0
        self._deadline = 0.0

    def over(self) -> bool:
        """Whether the slice (or tick) begun last has used its time, by the wall clock."""
        return _wall() >= self._deadline

    def start_clock(self, q: QueueState) -> None:
        """Give ``q`` the deadline of the step or slice about to run (none without a
        budget): a step's first slice of a PULLB and its tick's promotions are bounded
        by it. Set each time: the state is replaced when the actor restarts."""
        if self.budget_s:
            self._deadline = _wall() + self.budget_s * WORK_SHARE
            q.slice_over = self.over
        else:
            q.slice_over = None

    def begin(self, q: QueueState) -> None:
        self.start_clock(q)
        self._began = time.thread_time()

    def sliced(self, q: QueueState) -> None:
        """A slice of long work ran (since :meth:`begin`)."""
        if self.budget_s:
            q.slice_cap = resized(q.slice_cap, slices.SLICE_JOBS,
                                  time.thread_time() - self._began, self.budget_s)

    def begin_tick(self, q: QueueState) -> None:
        """A tick is about to run. Only one that follows a tick which left due jobs is
        sure to promote a full slice, so only that one is timed: every other step
        pays no clock read (a system call for a thread's CPU time)."""
        self._began = time.thread_time() if self.budget_s and q.order.due_left else 0.0

    def promoted(self, q: QueueState) -> None:
        """The tick begun at :meth:`begin_tick` ran."""
        if self._began and q.order.due_left:
            q.promote_cap = resized(q.promote_cap, lifecycle.PROMOTE_MAX_JOBS,
                                    time.thread_time() - self._began, self.budget_s)
