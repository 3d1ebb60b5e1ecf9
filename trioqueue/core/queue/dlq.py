"""The dead-letter queue's rules: an entry's content, entering it, leaving it (evicted,
expired, removed), the queue timer's part, and what the queries answer.

A dead-lettered job is its finished record (state ``failed``) with the entry in
``record["dlq"]``; :mod:`.dead_letters` holds the marks the rules below consult, and
:mod:`.dlq_work` the bulk commands (listing, retry, purge) done in slices.

Eviction, expiry and purging delete an entry without reading it: they run where the
core may not read (a bury inside FAIL, the timer). An entry's id can have been taken
meanwhile by a job pushed with that custom id into another queue (ids are broker-wide,
so the store then holds that job under it); such an entry is dropped from the marks
without a delete, found by the job index (``locate``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import flows
from ..job import FAILED, JobRecord
from . import dependencies
from .dead_letters import Mark
from .slices import slice_jobs
from .views import finished_wire
from .waiters import WaiterAnswer

if TYPE_CHECKING:
    from .slices import Sliced
    from .state import QueueState

# Entries evicted by one bury past ``maxEntries`` (one, unless the setting was just
# lowered: the timer then evicts the rest a slice per step).
EVICT_AT_BURY = 8
TIMEOUT_ERROR = "Job timeout exceeded"


def new_entry(job: JobRecord, now: int, reason: str, error: str | None,
              trace: list[str] | None) -> dict[str, Any]:
    """The entry a bury writes into the record (``record["dlq"]``).

    ``trace`` is the whole stack of the failing attempt when it came with a FAIL (cut to
    its tail in bytes by the handler); otherwise the job's own (``stackTraceLimit``
    lines of its last FAIL). A job revived by an auto-retry carries its retry count
    and the time of that retry in ``job.dlq``, so ``maxAutoRetries`` bounds the retries
    of a job, not of each entry."""
    prior = job.dlq or {}
    entry: dict[str, Any] = {"reason": reason, "error": error, "enteredAt": float(now),
                             "retryCount": int(prior.get("retryCount", 0))}
    if prior.get("lastRetryAt") is not None:
        entry["lastRetryAt"] = prior["lastRetryAt"]
    stack = trace if trace is not None else job.stacktrace
    if stack:
        entry["stack"] = list(stack)
    return entry


def dlq_enter(q: QueueState, job: JobRecord, now: int) -> None:
    """A job was just buried (its record written): index it, evict past maxEntries."""
    entry = job.dlq or {}
    reason = str(entry.get("reason") or "unknown")
    q.dlq.add(job.id, now, reason, int(entry.get("retryCount", 0)))
    if q.events_enabled:
        q.emit("dlq-added", job.id, now, reason=reason, error=entry.get("error"))
    if len(q.dlq) > q.settings.dlq.max_entries:
        _evict(q, now, EVICT_AT_BURY)


def drop_entry(q: QueueState, mark: Mark, now: int, event: str | None = None) -> None:
    """Delete one entry for good (evicted, expired, purged, removed, cleaned);
    ``event``: the event bunqueue emits for it, if any.

    Parents still waiting for the job (no failure policy: a DLQ retry could have
    completed it) are told it is gone, as for a removed queued job: with the entry
    gone nothing could ever settle them."""
    job_id = mark.job_id
    q.dlq.discard(job_id)
    if q.index.locate(job_id) is None:  # else its id now names a live job elsewhere
        q.writes.delete_job(job_id)
        q.logs.drop(job_id)
        if q.index.has_dependents(job_id):
            dependencies.settle_dependents(q, job_id, flows.DETACHED)
    if event is not None and q.events_enabled:
        q.emit(event, job_id, now, reason=mark.reason)


def _evict(q: QueueState, now: int, most: int) -> None:
    dead, limit = q.dlq, q.settings.dlq.max_entries
    while most > 0 and len(dead) > limit:
        oldest = dead.oldest()
        assert oldest is not None
        drop_entry(q, oldest, now)
        most -= 1


def _expire(q: QueueState, now: int, most: int) -> None:
    max_age = q.settings.dlq.max_age
    if max_age is None:
        return
    dead = q.dlq
    while most > 0 and (oldest := dead.oldest()) is not None and (
            oldest.entered_at + max_age <= now):
        drop_entry(q, oldest, now, "dlq-expired")
        most -= 1


def remove_dlq_job(q: QueueState, job_id: str, now: int) -> bool:
    """``RemoveDlqJob``: delete one entry; False when there is none (idempotent)."""
    mark = q.dlq.marks.get(job_id)
    if mark is None:
        return False
    drop_entry(q, mark, now)
    return True


# --- the timer

class TimerWork:
    """Stands where a client's request stands for long work the queue's own timer
    began (the DLQ's auto-retries): nobody waits for its answer, so it goes nowhere."""

    cmd = "the DLQ auto-retry timer"

    @property
    def replier(self) -> TimerWork:
        return self

    def deliver(self, reply: dict[str, Any]) -> None:
        pass

    def reply(self, payload: dict[str, Any]) -> dict[str, Any]:
        return payload

    def error_reply(self, message: str) -> dict[str, Any]:
        return {"ok": False, "error": message}


@dataclass(slots=True, eq=False)
class TimerWaiter:
    """The "waiter" of timer work in a :class:`~.waiters.WaiterAnswer`: the way the
    tick hands long work to its driver, as it does for a parked PULLB's leases."""

    handle: Any  # a TimerWork; opaque to the driver, as a waiter's handle is
    done: bool = True


def dlq_due(q: QueueState, now: int) -> bool:
    """Whether the DLQ has timer work at ``now`` (the tick asks before it calls)."""
    at = q.dlq.next_wakeup(q.settings.dlq)
    return at is not None and at <= now


def dlq_tick(q: QueueState, now: int) -> WaiterAnswer | None:
    """The DLQ's part of the queue's timer: evict past ``maxEntries``, expire past
    ``maxAge`` (a slice of each per step: the queue wakes again at once while some are
    left), then begin the auto-retries that are due as long work (they read the
    records)."""
    most = slice_jobs(q)
    _evict(q, now, most)
    _expire(q, now, most)
    first = q.dlq.first_retry(q.settings.dlq)
    if first is None or first[0] > now:
        return None
    work: Sliced = q.auto_retry_work(now)
    return WaiterAnswer(TimerWaiter(TimerWork()), {}, work=work)


# --- what the queries answer

def _attempts(record: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    """The attempts the timeline recorded (its 20 entries bound them): each failed
    attempt with the start of the delivery before it."""
    out: list[dict[str, Any]] = []
    started: float | None = None
    for entry in record.get("timeline") or ():
        state = entry.get("state")
        if state == "active":
            started = entry.get("timestamp")
        elif state == "failed" and "attempt" in entry:
            failed_at = entry.get("timestamp")
            error = entry.get("error")
            out.append({
                "attempt": entry["attempt"], "startedAt": started, "failedAt": failed_at,
                "reason": "timeout" if error == TIMEOUT_ERROR else "explicit_fail",
                "error": error,
                "duration": None if started is None or failed_at is None
                else failed_at - started})
            started = None
    if out and reason != "max_attempts_exceeded":
        out[-1]["reason"] = reason
    return out


def entry_wire(q: QueueState, record: dict[str, Any], now: int) -> dict[str, Any]:
    """A DlqEntry as bunqueue sends it, plus ``stack`` (the failing attempt's trace)."""
    entry = record.get("dlq") or {}
    config = q.settings.dlq
    entered = float(entry.get("enteredAt") or 0)
    reason = str(entry.get("reason") or "unknown")
    mark = q.dlq.marks.get(record["id"])
    next_retry = None if mark is None else q.dlq.next_retry_at(mark, config)
    return {
        "job": finished_wire(record),
        "enteredAt": entered,
        "reason": reason,
        "error": entry.get("error"),
        "attempts": _attempts(record, reason),
        "retryCount": int(entry.get("retryCount", 0)),
        "lastRetryAt": entry.get("lastRetryAt"),
        "nextRetryAt": None if next_retry is None else float(next_retry),
        "expiresAt": None if config.max_age is None else entered + config.max_age,
        "stack": entry.get("stack"),
    }


def dlq_stats(q: QueueState, now: int) -> dict[str, Any]:
    dead, config = q.dlq, q.settings.dlq
    oldest, newest = dead.oldest(), dead.newest()
    return {
        "total": len(dead),
        "byReason": dict(dead.by_reason),
        "byQueue": {q.name: len(dead)} if len(dead) else {},
        "pendingRetry": dead.pending_retry(config),
        "expired": dead.expired_count(now, config),
        "oldestEntry": None if oldest is None else float(oldest.entered_at),
        "newestEntry": None if newest is None else float(newest.entered_at),
    }


def set_dlq_config(q: QueueState, config: dict[str, Any], now: int) -> None:
    q.settings.dlq.update(config)
    q.store_settings()
    q.emit("dlq-config-changed", "", now, config=q.settings.dlq.to_wire())


def load_dlq(q: QueueState) -> None:
    """Rebuild the marks from the stored records (recovery, with a view that reads
    directly): every failed record of the queue, in the order they entered."""
    found: list[tuple[float, str, str, int]] = []
    after: Any = None
    while True:
        ids, after = q.finished.ids_page(FAILED, after=after, limit=1000)
        for job_id in ids:
            record = q.finished.get(job_id)
            if record is None or record.get("state") != FAILED:
                continue
            entry = record.get("dlq") or {}
            found.append((float(entry.get("enteredAt") or record.get("createdAt") or 0),
                          job_id, str(entry.get("reason") or "unknown"),
                          int(entry.get("retryCount", 0))))
        if after is None or not ids:
            break
    found.sort()
    q.dlq.clear()
    for entered, job_id, reason, retries in found:
        q.dlq.add(job_id, int(entered), reason, retries)
