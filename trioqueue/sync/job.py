"""A job as the synchronous client hands it out: a snapshot with blocking methods."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..client.job import Job, delay_of

if TYPE_CHECKING:
    from .queue import SyncQueue


class SyncJob:
    """A job as :class:`~trioqueue.client.Job` describes it (the same attributes, read
    when the job was fetched), with blocking methods instead of coroutines.

    The attributes are a snapshot: :meth:`get_state` and
    :meth:`SyncQueue.get_job` read the job again.
    """

    id: str
    name: str
    data: Any
    queue_name: str
    priority: float
    attempts_made: int
    max_attempts: int
    timestamp: int | None
    run_at: int | None
    processed_on: int | None
    finished_on: int | None
    progress: float
    progress_message: str | None
    stacktrace: list[str] | None
    failed_reason: str | None
    stalled_counter: int
    custom_id: str | None
    parent_id: str | None
    children_ids: list[str]
    depends_on: list[str]
    tags: list[str]
    group_id: str | None
    unique_key: str | None
    timeline: list[dict[str, Any]]
    state: str | None
    trace_context: dict[str, str] | None
    token: str | None
    raw: dict[str, Any]

    def __init__(self, queue: SyncQueue, job: Job) -> None:
        # Every instance attribute of the async Job but its Queue (which belongs to the
        # loop): copied, so that a new Job attribute reaches SyncJob without a change.
        for key, value in vars(job).items():
            if key != "queue":
                setattr(self, key, value)
        self.queue = queue

    @property
    def delay(self) -> int:
        return delay_of(self.run_at, self.timestamp)

    def __repr__(self) -> str:
        return f"<SyncJob {self.id} {self.name!r} in {self.queue_name}>"

    def get_state(self) -> str:
        self.state = self.queue.get_job_state(self.id)
        return self.state

    def get_children_values(self) -> dict[str, Any]:
        return self.queue.get_children_values(self.id)

    def get_dependencies(self, type: str | None = None, start: int = 0, end: int = -1
                         ) -> dict[str, Any]:
        return self.queue.get_dependencies(self.id, type, start, end)

    def get_logs(self, start: int = 0, end: int = -1) -> dict[str, Any]:
        return self.queue.get_job_logs(self.id, start, end)

    def update_progress(self, progress: Any, message: str | None = None) -> None:
        self.queue.update_job_progress(self.id, progress, message)

    def log(self, message: str, level: str = "info") -> None:
        self.queue.add_job_log(self.id, message, level)

    def update_data(self, data: Any) -> None:
        self.queue.update_job_data(self.id, data)
        self.data = data

    def promote(self) -> None:
        self.queue.promote_job(self.id)

    def remove(self) -> None:
        self.queue.remove(self.id)

    def retry(self) -> None:
        self.queue.retry_job(self.id)

    def wait_until_finished(self, ttl: float | None = 30.0) -> Any:
        """The job's result once it completes (see
        :meth:`SyncQueue.wait_job_until_finished`)."""
        return self.queue.wait_job_until_finished(self.id, ttl)
