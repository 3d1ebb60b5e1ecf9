"""The DLQ's bulk commands as long work in slices: listing (``Dlq``), retrying
(``RetryDlq``, the timer's auto-retries, ``RetryCompleted``) and purging
(``PurgeDlq``).

Each reads the records it needs before it changes anything in a slice (it asks for a
slice's records at once, :func:`_want`), and no slice looks at more than
``SCAN_MARKS`` marks or acts on more than ``slice_jobs(q)`` entries, so a DLQ of a
million entries is retried or purged a slice per step while the other queues run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import Refused
from ..job import COMPLETED, FAILED
from . import moves
from .dead_letters import Key, Mark
from .dlq import drop_entry, entry_wire
from .slices import Sliced, Steps, _ids_page, slice_jobs, want_records

if TYPE_CHECKING:
    from .dlq_config import DlqConfig
    from .state import QueueState

DEFAULT_DLQ_PAGE = 100  # entries a Dlq answers without count or limit
MAX_DLQ_PAGE = 10_000
SCAN_MARKS = 2_000  # marks one slice of a filtered command looks at (a compare each)
# An auto-retry that could not run (its id or key is held) is tried again after its
# backoff, and never sooner than this: with an interval of 0 the timer would spin.
MIN_POSTPONE_MS = 1_000
_AFTER_ALL = 2**62  # an arrival number past every real one (a cursor's second field)


@dataclass(slots=True)
class DlqFilter:
    """``Dlq`` / ``RetryDlq``'s filter: instants are epoch ms, ``olderThan`` /
    ``newerThan`` compare ``enteredAt``; ``retriable`` and ``expired`` select the
    entries that are (True) or are not (False) so."""

    reason: str | None = None
    older_than: float | None = None
    newer_than: float | None = None
    retriable: bool | None = None
    expired: bool | None = None
    offset: int = 0
    limit: int | None = None

    def start(self) -> Key | None:
        """Where the scan begins: past ``newerThan`` in O(log n)."""
        if self.newer_than is None:
            return None
        return (math.floor(self.newer_than), _AFTER_ALL, "")

    def past_end(self, mark: Mark, now: int, config: DlqConfig) -> bool:
        """No mark from this one on can match (the order is by ``enteredAt``)."""
        if self.older_than is not None and mark.entered_at >= self.older_than:
            return True
        return bool(self.expired and config.max_age is not None
                    and mark.entered_at + config.max_age > now)

    def matches(self, mark: Mark, now: int, config: DlqConfig) -> bool:
        if self.reason is not None and mark.reason != self.reason:
            return False
        if self.retriable is not None and self.retriable != (
                mark.retry_count < config.max_auto_retries):
            return False
        if self.expired is not None:
            expired = (config.max_age is not None
                       and mark.entered_at + config.max_age <= now)
            if expired != self.expired:
                return False
        return True


def _matching(q: QueueState, flt: DlqFilter, now: int, cursor: Key | None,
              room: int) -> tuple[list[Mark], Key | None, bool]:
    """Up to ``room`` matching marks past ``cursor``, looking at ``SCAN_MARKS`` at
    most: (marks, the cursor to go on from, whether the scan reached the end)."""
    config = q.settings.dlq
    found: list[Mark] = []
    looked = 0
    for mark in q.dlq.in_order(cursor):
        if flt.past_end(mark, now, config):
            return found, cursor, True
        cursor = mark.key
        if flt.matches(mark, now, config):
            found.append(mark)
            if len(found) >= room:
                return found, cursor, False
        looked += 1
        if looked >= SCAN_MARKS:
            return found, cursor, False
    return found, cursor, True


def can_revive(q: QueueState, record: dict[str, Any], now: int) -> bool:
    """Whether a finished job may come back under its id: neither its id nor its
    unique key is held by a live job now (else a retry skips it)."""
    if q.index.locate(record["id"]) is not None:
        return False
    key = record.get("uniqueKey")
    return key is None or q.dedup_owner(key, now) is None


def _retry_one(q: QueueState, mark: Mark, now: int, *, auto: bool = False) -> bool:
    record = q.finished.get(mark.job_id)
    if record is None or record.get("state") != FAILED:
        q.dlq.discard(mark.job_id)  # its id went to another job meanwhile
        return False
    if not can_revive(q, record, now):
        if auto:
            delay = q.settings.dlq.retry_delay(mark.retry_count)
            q.dlq.postpone(mark, now + max(0, MIN_POSTPONE_MS - delay))
        return False
    carry = ({"retryCount": mark.retry_count + 1, "lastRetryAt": float(now)} if auto
             else None)
    moves.revive(q, record, now, carry=carry)
    return True


def list_dlq(q: QueueState, flt: DlqFilter, limit: int, now: int) -> Steps:
    """``Dlq``: the matching entries, oldest first; returns the DlqEntry maps."""
    cursor, skip = flt.start(), flt.offset
    picked: list[str] = []
    while len(picked) < limit:
        marks, cursor, end = _matching(q, flt, now, cursor, skip + limit - len(picked))
        for mark in marks:
            if skip:
                skip -= 1
            else:
                picked.append(mark.job_id)
        if end:
            break
        yield None
    entries: list[dict[str, Any]] = []
    step = slice_jobs(q)
    for start in range(0, len(picked), step):
        if start:
            yield None  # a slice's records per step
        part = picked[start:start + step]
        yield from want_records(q, part)
        for job_id in part:
            record = q.finished.get(job_id)
            if record is None or record.get("state") != FAILED:
                q.dlq.discard(job_id)
            else:
                entries.append(entry_wire(q, record, now))
    return entries


def retry_dlq(q: QueueState, flt: DlqFilter, count: int | None, now: int) -> Steps:
    """``RetryDlq`` of the first ``count`` matching entries (all with None); returns
    how many became waiting jobs (skipped ones are not counted)."""
    cursor, skip = flt.start(), flt.offset
    retried = 0
    while count is None or retried < count:
        room = slice_jobs(q) if count is None else min(slice_jobs(q), count - retried)
        marks, cursor, end = _matching(q, flt, now, cursor, room + skip)
        if skip:
            dropped = min(skip, len(marks))
            skip -= dropped
            marks = marks[dropped:]
        if marks:
            yield from want_records(q, [mark.job_id for mark in marks])
            for mark in marks:
                retried += _retry_one(q, mark, now)
        if end:
            break
        yield None
    if retried:
        q.emit("dlq-retry-all", "", now, count=retried)
    return retried


def _due(q: QueueState, now: int, most: int, tried: set[str]) -> list[Mark]:
    """Up to ``most`` marks whose auto-retry is due, not tried in this run."""
    config = q.settings.dlq
    due: list[Mark] = []
    for count, fifo in q.dlq.by_retries.items():
        if count >= config.max_auto_retries:
            continue
        delay = config.retry_delay(count)
        for job_id in fifo:
            mark = q.dlq.marks[job_id]
            if mark.retry_base + delay > now or len(due) >= most:
                break
            if job_id not in tried:
                due.append(mark)
    return due


def auto_retry(q: QueueState, now: int) -> Steps:
    """The timer's auto-retries that are due, a slice at a time; returns how many.
    One the store has no room for stops them all for ``MIN_POSTPONE_MS``: the entries
    stay in the DLQ, due, and the timer tries again then."""
    tried: set[str] = set()
    retried = 0
    while q.settings.dlq.auto_retry:
        marks = _due(q, now, slice_jobs(q), tried)
        if not marks:
            break
        tried.update(mark.job_id for mark in marks)
        yield from want_records(q, [mark.job_id for mark in marks])
        for mark in marks:
            try:
                revived = _retry_one(q, mark, now, auto=True)
            except Refused:  # (Storage full: can_revive passed) not now, nor lost
                q.dlq.retries_held_until = now + MIN_POSTPONE_MS
                return retried
            if revived:
                retried += 1
                q.emit("dlq-auto-retried", mark.job_id, now)
        yield None
    return retried


def purge_dlq(q: QueueState, now: int) -> Steps:
    """``PurgeDlq``: delete every entry, a slice per step; returns how many."""
    purged = 0
    dead = q.dlq
    while len(dead):
        for _ in range(min(slice_jobs(q), len(dead))):
            oldest = dead.oldest()
            assert oldest is not None
            drop_entry(q, oldest, now)
            purged += 1
        yield None
    if purged:
        q.emit("dlq-purged", "", now, count=purged)
    return purged


def retry_completed(q: QueueState, count: int | None, cutoff: float | None,
                    now: int) -> Steps:
    """``RetryCompleted``: completed jobs (those completed at or before ``cutoff``, the
    first ``count``) become new waiting generations; returns how many."""
    after: Any = None
    revived = 0
    while count is None or revived < count:
        ids, after = yield from _ids_page(q, COMPLETED, after)
        if ids:
            yield from want_records(q, ids)
        for job_id in ids:
            record = q.finished.get(job_id)
            if (record is None or record.get("state") != COMPLETED
                    or cutoff is not None and (record.get("completedAt") or 0) > cutoff
                    or not can_revive(q, record, now)):
                continue
            moves.revive(q, record, now)
            revived += 1
            if count is not None and revived >= count:
                break
        if after is None or not ids:
            break
        yield None
    return revived


def work(steps: Steps, key: str | None) -> Sliced:
    """The steps as a command's long work: its reply is ``{key: result}``."""
    return Sliced(steps, (lambda result: {key: result}) if key else (lambda _: {}))


def auto_retry_work(q: QueueState, now: int) -> Sliced:
    """The long work the queue's timer begins when auto-retries are due."""
    return work(auto_retry(q, now), "count")
