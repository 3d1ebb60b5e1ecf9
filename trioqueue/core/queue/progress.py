"""Progress and logs of a job."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import fields
from .. import states as st
from ..errors import JOB_NOT_FOUND, Refused
from ..job import ACTIVE, JobRecord

if TYPE_CHECKING:
    from .state import QueueState

MAX_LOGS_PER_JOB = 100
# bunqueue keeps 10,000 jobs' logs; beyond that the oldest job's logs go first.
MAX_JOBS_WITH_LOGS = 10_000


class Logs:
    """The log lines of the queue's jobs (kept in memory only, as bunqueue keeps them):
    at most ``MAX_LOGS_PER_JOB`` a job, for at most ``MAX_JOBS_WITH_LOGS`` jobs (the
    oldest job's lines go first). The only writer of that map."""

    __slots__ = ("_by_job",)

    def __init__(self) -> None:
        self._by_job: dict[str, list[dict[str, Any]]] = {}

    def add(self, job_id: str, now: int, message: str, level: str) -> None:
        by_job = self._by_job
        logs = by_job.get(job_id)
        if logs is None:
            if len(by_job) >= MAX_JOBS_WITH_LOGS:
                by_job.pop(next(iter(by_job)))
            logs = by_job[job_id] = []
        logs.append({"timestamp": float(now), "level": level, "message": message})
        if len(logs) > MAX_LOGS_PER_JOB:
            del logs[0]

    def page(self, job_id: str, start: int | None, end: int | None) -> dict[str, Any]:
        logs = self._by_job.get(job_id, [])
        n = len(logs)
        lo = 0 if start is None else start
        hi = n - 1 if end is None or end < 0 else end
        if lo < 0:
            lo = max(n + lo, 0)
        return {"logs": logs[lo : hi + 1], "count": n}

    def keep_last(self, job_id: str, keep: int) -> None:
        logs = self._by_job.get(job_id)
        if logs is None:
            return
        if keep <= 0:
            del self._by_job[job_id]
        else:
            del logs[: max(len(logs) - keep, 0)]

    def drop(self, job_id: str) -> None:
        """The job is gone: its lines go too."""
        self._by_job.pop(job_id, None)

    def clear(self) -> None:
        self._by_job.clear()

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_job

    def __len__(self) -> int:
        return len(self._by_job)


def active_for_progress(q: QueueState, job_id: str, now: int) -> JobRecord:
    job = q.jobs.get(job_id)
    if job is None:
        record = q.finished.get(job_id)
        if record is not None:
            raise Refused(f"Job is not active (current state: {record['state']})")
        raise Refused(JOB_NOT_FOUND)
    if job.state != ACTIVE:
        state = st.visible_state(job.state, job.run_at, job.priority, now)
        raise Refused(f"Job is not active (current state: {state})")
    return job


def set_progress(q: QueueState, job_id: str, now: int, progress: Any, message: Any,
                 has_message: bool) -> None:
    job = active_for_progress(q, job_id, now)
    value, text = fields.normalise_progress(progress)
    if has_message:
        text = message if isinstance(message, str) or message is None else str(message)
    elif text is None:
        text = job.progress_message
    job.progress = value
    job.progress_message = text
    q.stall_watch.beat(job, now)
    q.persist(job)
    q.emit("progress", job.id, now, progress=value,
               data={"progress": value, "message": text})


def get_progress(q: QueueState, job_id: str, now: int) -> dict[str, Any]:
    job = active_for_progress(q, job_id, now)
    return {"progress": job.progress, "message": job.progress_message}


def known(q: QueueState, job_id: str) -> bool:
    return job_id in q.jobs or q.finished.get(job_id) is not None


def add_log(q: QueueState, job_id: str, now: int, message: str, level: str) -> None:
    if not known(q, job_id):
        raise Refused(JOB_NOT_FOUND)
    q.logs.add(job_id, now, message, level)


def get_logs(q: QueueState, job_id: str, start: int | None, end: int | None) -> dict[str, Any]:
    return q.logs.page(job_id, start, end)


def clear_logs(q: QueueState, job_id: str, keep: int) -> None:
    q.logs.keep_last(job_id, keep)

