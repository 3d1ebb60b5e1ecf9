"""What the core knows of finished jobs: only what the actor fetched for it.

Completed and failed jobs live in storage, not in memory. The queue's rules never read
storage: they read a :class:`FinishedView`, which answers from what the actor supplied,
and raise :class:`NeedData` for anything it lacks (h11's ``NEED_DATA`` turned around:
the core says what it needs, the I/O shell fetches it). The actor then makes the store
current, fetches the reads (off the trio thread for a store that blocks), supplies them
and runs the command again.

Running it again is safe because every rule reads before it changes anything: a command
validates (and so reads) first and mutates after. :meth:`FinishedView.want` lets a rule
name several reads at once (a PUSHB's dependencies), so a command needs one round, not
one per read. The actor checks the promise: a command that had already recorded writes
when it raised NeedData is a bug, and crashes as any bug does.

The view forgets what it was given whenever the queue writes (its answers could be
stale), so it stays small: at most the reads of one command.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

# The reads, as hashable tuples (kind, *arguments); storage/reads.py's ``fetch``
# answers each from a store.
GET = "get"  # (GET, id) -> finished record of any queue, or None
RESULT = "result"  # (RESULT, id) -> (has_result, result)
OUTCOMES = "outcomes"  # (OUTCOMES, parent id) -> {child id: outcome}
COUNT = "count"  # (COUNT, state) -> finished jobs of this queue in that state
LIST = "list"  # (LIST, state, asc, offset, limit) -> records of this queue
IDS = "ids"  # (IDS, state, cursor, limit) -> (ids, next cursor | None)
# (RANKS, state, positions, others) -> per position (ascending) of that state's
# (createdAt, id) order: (createdAt, id, (jobs of each other state before it, ...))
RANKS = "ranks"

Read = tuple[Hashable, ...]
Ranked = tuple[int, str, tuple[int, ...]]  # one answer of a RANKS read
RankedList = list[Ranked]
IdsPage = tuple[list[str], Any]  # (ids, cursor of the next page | None)


class NeedData(Exception):  # noqa: N818 (a request, not an error)
    """The command needs these reads first; nothing was changed."""

    def __init__(self, reads: Iterable[Read]) -> None:
        self.reads = tuple(dict.fromkeys(reads))
        super().__init__(f"needs {len(self.reads)} read(s): {self.reads[:3]!r}")


class FinishedView:
    """The core's one reader of finished jobs."""

    __slots__ = ("queue", "known", "fallback")

    def __init__(self, queue: str,
                 fallback: Callable[[Read], Any] | None = None) -> None:
        self.queue = queue
        # What the actor supplied (public so the actor's hot loop can test it without
        # a call; only supply/forget and the reads below change it).
        self.known: dict[Read, Any] = {}
        # Set only while the I/O shell itself drives the core synchronously (recovery,
        # the synchronous form of long work): a miss is fetched at once.
        self.fallback = fallback

    # --- the actor's side

    def supply(self, read: Read, value: Any) -> None:
        self.known[read] = value

    def forget(self) -> None:
        if self.known:
            self.known.clear()

    # --- the core's side

    def _need(self, read: Read) -> Any:
        try:
            return self.known[read]
        except KeyError:
            if self.fallback is None:
                raise NeedData((read,)) from None
            return self.fallback(read)  # not kept: the driver commits between calls

    def want(self, reads: Iterable[Read]) -> None:
        """Make sure these reads are known, asking for all the missing ones at once."""
        if self.fallback is not None:
            return  # each read is fetched when it is made
        missing = [r for r in reads if r not in self.known]
        if missing:
            raise NeedData(missing)

    def get(self, job_id: str) -> dict[str, Any] | None:
        record: dict[str, Any] | None = self._need((GET, job_id))
        if record is None or record.get("queue") != self.queue:
            return None
        return record

    def result(self, job_id: str) -> tuple[bool, Any]:
        if self.get(job_id) is None:
            return False, None
        return self.result_any(job_id)

    def get_any(self, job_id: str) -> dict[str, Any] | None:
        record: dict[str, Any] | None = self._need((GET, job_id))
        return record

    def result_any(self, job_id: str) -> tuple[bool, Any]:
        found: tuple[bool, Any] = self._need((RESULT, job_id))
        return found

    def dep_outcomes(self, parent_id: str) -> dict[str, dict[str, Any]]:
        rows: dict[str, dict[str, Any]] = self._need((OUTCOMES, parent_id))
        return rows

    def count(self, state: str) -> int:
        return int(self._need((COUNT, state)))

    def list(self, state: str, *, asc: bool, offset: int,
             limit: int) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = self._need((LIST, state, asc, offset, limit))
        return records

    def ranks(self, state: str, positions: tuple[int, ...],
              others: tuple[str, ...]) -> RankedList:
        found: RankedList = self._need((RANKS, state, positions, others))
        return found

    def ids_page(self, state: str, *, after: Any, limit: int) -> IdsPage:
        page: IdsPage = self._need((IDS, state, after, limit))
        return page


def record_reads(job_ids: Iterable[str]) -> list[Read]:
    """A finished record and its result for each id (what admission may consult)."""
    reads: list[Read] = []
    for job_id in job_ids:
        reads.append((GET, job_id))
        reads.append((RESULT, job_id))
    return reads
