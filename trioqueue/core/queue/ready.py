"""The order in which a queue's ungrouped queued jobs are delivered: the ready heap, the
delayed heap, the admission numbers, and whether due jobs wait for their promotion."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..job import JobRecord
from ..split_heap import SplitHeap

# ready entry: (-priority, 0 lifo / 1 fifo, -seq or runAt, seq, id)
ReadyEntry = tuple[float, int, int, int, str]
# delayed entry: (runAt, seq, id); moved to ready when due
DelayedEntry = tuple[int, int, str]


class ReadyOrder:
    """The ready and delayed heaps (stale entries stay and are skipped by ``seq``), the
    queue's last admission number, and ``due_left``: due jobs past one promotion's bound
    (see ``lifecycle.promote_slice``). The only writer of them; grouped jobs are ordered
    by :class:`~.groups.Groups` instead."""

    __slots__ = ("_ready", "_delayed", "due_left", "seq")

    def __init__(self) -> None:
        self._ready: SplitHeap[ReadyEntry] = SplitHeap()
        self._delayed: SplitHeap[DelayedEntry] = SplitHeap()
        self.due_left = False  # (read-only outside: set by promote_* below)
        self.seq = 0  # the last admission number given (read-only outside)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def keep_seq(self, seq: int) -> None:
        """A job came back with its stored number: new numbers continue above it."""
        if seq > self.seq:
            self.seq = seq

    def push_ready(self, job: JobRecord) -> None:
        if job.lifo:
            self._ready.push((-job.priority, 0, -job.seq, job.seq, job.id))
        else:
            # Ints, not floats: within one priority lifo and fifo entries differ in the
            # second element, so the third is only compared within one kind.
            self._ready.push((-job.priority, 1, job.run_at, job.seq, job.id))

    def push_delayed(self, job: JobRecord) -> None:
        self._delayed.push((job.run_at, job.seq, job.id))

    def pop_ready(self) -> ReadyEntry | None:
        """The best ready entry (maybe stale: the caller checks its ``seq``)."""
        return self._ready.pop()

    def pop_delayed(self) -> DelayedEntry | None:
        """The earliest delayed entry (maybe stale)."""
        return self._delayed.pop()

    def delayed_left(self) -> bool:
        return bool(self._delayed)

    def next_due(self) -> int | None:
        """The earliest runAt of the delayed heap (None: empty)."""
        top = self._delayed.first()
        return None if top is None else top[0]

    def promotion_due(self, now: int) -> bool:
        """Whether a pull (or a job leaving) should promote: a delayed job is due and
        no backlog of due jobs is left for the ticks (see ``lifecycle.promote_due``)."""
        top = self._delayed.first()
        return top is not None and top[0] <= now and not self.due_left

    def promote_stopped(self) -> None:
        """A promotion stopped at its bound with due jobs left."""
        self.due_left = True

    def promote_done(self) -> None:
        self.due_left = False

    def next_wakeup(self) -> int | None:
        """When due jobs next need promoting without a pull: at once while a backlog is
        left (the delayed heap's head is then in the past), else not at all."""
        return self.next_due() if self.due_left else None

    def sweep(self, keep: Callable[[Any], bool]) -> Iterator[int]:
        """Drop the entries ``keep`` refuses, a list of each heap at a time (Compact
        Memory); yields how many each dropped."""
        heap: SplitHeap[Any]
        for heap in (self._ready, self._delayed):
            # Every list once: the sealed chunks and the tail (sweep goes round in turn).
            for _ in range(len(heap.chunk_lengths())):
                yield heap.sweep(keep)

    def trim(self, entries: int) -> bool:
        """Drop up to ``entries`` of all-stale heaps (after a Drain or an Obliterate);
        True while some are left."""
        if len(self._ready):
            return self._ready.trim(entries) or bool(len(self._delayed))
        return self._delayed.trim(entries)

    def sizes(self) -> tuple[int, int]:
        """The entries of the ready and the delayed heap, stale ones included."""
        return len(self._ready), len(self._delayed)
