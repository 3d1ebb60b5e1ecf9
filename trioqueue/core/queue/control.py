"""Queue-wide control: drain, obliterate, pause, and the persisted settings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..job import COMPLETED, FAILED, QUEUED
from .settings import QueueSettings

if TYPE_CHECKING:
    from .state import QueueState


def drain(q: QueueState, now: int) -> int:
    """Remove every queued job (waiting, prioritized, delayed); active jobs and jobs
    waiting for children stay. No per-job event, as in bunqueue."""
    queued = [job for job in q.jobs.values() if job.state == QUEUED]
    for job in queued:
        q._drop_queued(job, now)
    q._ready.clear()
    q._delayed.clear()
    return len(queued)


def obliterate(q: QueueState, now: int) -> None:
    """Remove everything of the queue: live jobs in every state (an active job's
    worker then finds it gone), finished jobs with their results, logs, retained
    results, the stored pause and stall settings. Parked pulls keep waiting."""
    for job in list(q.jobs.values()):
        q._drop_queued(job, now)
    for state in (COMPLETED, FAILED):
        for job_id in list(q.finished.ids(state)):
            q.writes.delete_job(job_id)
    q._ready.clear()
    q._delayed.clear()
    q._lock_heap.clear()
    q._timeouts.clear()
    q.stall_watch.clear()
    q.logs.clear()
    q.index.forget_retained(q.name)
    q.settings = QueueSettings()
    q.writes.put_queue_meta(q.name, q.settings.to_meta())


def set_paused(q: QueueState, paused: bool, now: int) -> None:
    if q.settings.paused != paused:
        q.settings.paused = paused
        q.writes.put_queue_meta(q.name, q.settings.to_meta())
        q._emit("paused" if paused else "resumed", "", now)


def meta(q: QueueState) -> dict[str, Any]:
    return q.settings.to_meta()


def load_meta(q: QueueState, meta: dict[str, Any]) -> None:
    q.settings = QueueSettings.from_meta(meta)
