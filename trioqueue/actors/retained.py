"""Results of removed-on-complete jobs, kept a while for a late WaitJob (memory only):
a mixin of :class:`~trioqueue.actors.router.Router`, the JobIndex methods of that name.

A result dropped (expired, pushed out, its queue obliterated) goes to the broker's
graveyard: a result of many values kept longer than the graveyard tries to find it
alone would otherwise be freed here in one call.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..core.large_values.graveyard import Graveyard
from .ports import RouterLimits


class RetainedResults:
    """job id -> (expires at, queue, has result, result), oldest first."""

    _retained: OrderedDict[str, tuple[float, str, bool, Any]]
    _limits: RouterLimits
    #: Where a dropped result goes to be taken apart (set by the broker).
    graveyard: Graveyard | None

    def _let_go(self, entry: tuple[float, str, bool, Any] | None) -> None:
        if entry is not None and self.graveyard is not None:
            self.graveyard.bury(entry[3])

    def retain_result(self, job_id: str, queue: str, has_result: bool, result: Any,
                      now: int) -> None:
        """Keep a removed-on-complete job's result for a late WaitJob (memory only).

        Bounded in time and count (``removed_result_retention_s``,
        ``max_removed_results``); a new job with the same custom id forgets it.
        """
        retained = self._retained
        self._let_go(retained.pop(job_id, None))
        retained[job_id] = (now + self._limits.removed_result_retention_s * 1000,
                            queue, has_result, result)
        while len(retained) > self._limits.max_removed_results:
            self._let_go(retained.popitem(last=False)[1])

    def retained_result(self, job_id: str, now: int) -> tuple[bool, Any] | None:
        entry = self._retained.get(job_id)
        if entry is None:
            return None
        expires, _, has_result, result = entry
        if expires <= now:
            self._let_go(self._retained.pop(job_id))
            return None
        return has_result, result

    def forget_retained(self, queue: str) -> None:
        for job_id in [j for j, entry in self._retained.items() if entry[1] == queue]:
            self._let_go(self._retained.pop(job_id))

    def forget_expired_retained(self, now: int) -> int:
        """Drop the retained results past their window (bounded by
        ``max_removed_results``; otherwise dropped only when a WaitJob asks)."""
        expired = [j for j, entry in self._retained.items() if entry[0] <= now]
        for job_id in expired:
            self._let_go(self._retained.pop(job_id))
        return len(expired)
