"""CompactMemory's part in one queue: give back what deletes and moves left behind.

Two kinds of memory outlive the jobs they were for:

- The maps with an entry per live job (``SplitDict``: jobs, locks, the connection
  of each delivered job, the uniqueKey holders, each connection's jobs) keep their
  tables after deletes, as a dict does: after a million jobs went, tens of MB of empty
  slots. :meth:`SplitDict.compact` copies the buckets that are mostly empty.
- The ready, delayed and timeout heaps delete lazily: a job that left (cancelled,
  promoted, finished before its timeout) leaves its entry until it reaches the top.
  Each heap is swept a list at a time (``SplitHeap.sweep``, at most one chunk of
  8,192 entries per step), with the very test a pop applies, so no entry a pop would
  take is dropped.

It runs as the queue's long work (:class:`~.slices.Sliced`): a heap's list per step,
the maps in the last step, so the queue's other commands wait at most one list. The
result says what was freed: heap entries dropped, and the bytes the maps gave back
(``sys.getsizeof``, which a ``SplitDict`` answers for its whole table).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from ..job import ACTIVE, QUEUED
from .slices import Sliced, Steps

if TYPE_CHECKING:
    from .state import QueueState


def compact_work(q: QueueState) -> Sliced:
    """The long work; its reply is ``{"freed": {"heapEntries", "bytes"}}``."""
    return Sliced(_compact(q), lambda freed: {"freed": freed})


def _compact(q: QueueState) -> Steps:
    jobs = q.jobs

    def queued(entry: tuple[Any, ...]) -> bool:
        # (..., seq, id): the entry of the job's current admission (a pop's test)
        job = jobs.get(entry[-1])
        return job is not None and job.state == QUEUED and job.seq == entry[-2]

    def timed(entry: tuple[int, str, int]) -> bool:
        # (deadline, id, startedAt): the deadline of the job's current delivery
        job = jobs.get(entry[1])
        return job is not None and job.state == ACTIVE and job.started_at == entry[2]

    dropped = 0
    for swept in q.order.sweep(queued):
        dropped += swept
        yield None
    for swept in q.timeouts.sweep(timed):
        dropped += swept
        yield None
    before = sys.getsizeof(q.jobs)
    q.jobs.compact()
    after = sys.getsizeof(q.jobs)
    for part_before, part_after in (q.leases.compact(), q.dedup.compact()):
        before += part_before
        after += part_after
    return {"heapEntries": dropped, "bytes": before - after}
