"""Results of removed-on-complete jobs, kept a while for a late WaitJob (memory only).

The router holds one (``router.results``) and answers the JobIndex methods of that
name through it. A result dropped (expired, pushed out, its queue obliterated) goes to
the broker's graveyard: a result of many values kept longer than the graveyard tries
to find it alone would otherwise be freed here in one call.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..core.large_values.graveyard import Graveyard


class RetainedResults:
    """job id -> (expires at, queue, has result, result), oldest first; bounded in
    time and count (``removed_result_retention_s``, ``max_removed_results``)."""

    __slots__ = ("kept", "_retention_ms", "_max_results", "graveyard")

    def __init__(self, retention_s: float, max_results: int) -> None:
        # Read by the router before each admitted id (is anything kept at all?): a
        # plain dict test there, the writes all here.
        self.kept: OrderedDict[str, tuple[float, str, bool, Any]] = OrderedDict()
        self._retention_ms = retention_s * 1000
        self._max_results = max_results
        #: Where a dropped result goes to be taken apart (set by the broker).
        self.graveyard: Graveyard | None = None

    def _let_go(self, entry: tuple[float, str, bool, Any] | None) -> None:
        if entry is not None and self.graveyard is not None:
            self.graveyard.bury(entry[3])

    def forget(self, job_id: str) -> None:
        """A new job took the id: its old result is gone."""
        self._let_go(self.kept.pop(job_id, None))

    def retain(self, job_id: str, queue: str, has_result: bool, result: Any,
               now: int) -> None:
        """Keep a removed-on-complete job's result for a late WaitJob; a new job with
        the same custom id forgets it."""
        kept = self.kept
        self._let_go(kept.pop(job_id, None))
        kept[job_id] = (now + self._retention_ms, queue, has_result, result)
        while len(kept) > self._max_results:
            self._let_go(kept.popitem(last=False)[1])

    def get(self, job_id: str, now: int) -> tuple[bool, Any] | None:
        entry = self.kept.get(job_id)
        if entry is None:
            return None
        expires, _, has_result, result = entry
        if expires <= now:
            self._let_go(self.kept.pop(job_id))
            return None
        return has_result, result

    def forget_queue(self, queue: str) -> None:
        for job_id in [j for j, entry in self.kept.items() if entry[1] == queue]:
            self._let_go(self.kept.pop(job_id))

    def forget_expired(self, now: int) -> int:
        """Drop the results past their window (bounded by ``max_removed_results``;
        otherwise dropped only when a WaitJob asks); how many went."""
        expired = [j for j, entry in self.kept.items() if entry[0] <= now]
        for job_id in expired:
            self._let_go(self.kept.pop(job_id))
        return len(expired)
