"""A job as the client sees it: the broker's Job object as Python attributes, plus the
operations BullMQ users call on a job (progress, logs, moves, waiting for its outcome).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .events import QueueEvents
    from .queue import Queue


def delay_of(run_at: int | None, created_at: int | None) -> int:
    """A job's delay (ms) as BullMQ reports it: how long after its creation it may run."""
    if run_at is None or created_at is None:
        return 0
    return max(run_at - created_at, 0)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


def _last_error(timeline: Any) -> str | None:
    for entry in reversed(timeline or ()):
        if entry.get("state") == "failed" and entry.get("error") is not None:
            return str(entry["error"])
    return None


class Job:
    """One job. ``raw`` is the Job map as the broker sent it.

    ``token`` is the lock token of the delivery that handed the job to a worker (None
    outside a worker, or for a pull without a lock); the move methods use it unless
    another is given.
    """

    def __init__(self, queue: Queue, raw: dict[str, Any], token: str | None = None) -> None:
        self.queue = queue
        self.raw = raw
        self.token = token or None
        self.id: str = raw["id"]
        get = raw.get  # one lookup, not one per field: a Job is made per add
        self.name: str = get("name", "default")
        self.data: Any = get("data")
        self.queue_name: str = get("queue", queue.name)
        self.priority: float = get("priority", 0)
        self.attempts_made: int = int(get("attempts", 0))
        self.max_attempts: int = int(get("maxAttempts", 3))
        self.timestamp: int | None = _int(get("createdAt"))
        self.run_at: int | None = _int(get("runAt"))
        self.processed_on: int | None = _int(get("startedAt"))
        self.finished_on: int | None = _int(get("completedAt"))
        self.progress: float = get("progress", 0)
        self.progress_message: str | None = get("progressMessage")
        # A dead-lettered job's come from its DLQ entry (the whole trace of the attempt
        # that failed it); a job failing and retried has its last error in its timeline.
        self.stacktrace: list[str] | None = get("failedStack") or get("stacktrace")
        self.failed_reason: str | None = get("failedReason") or _last_error(
            get("timeline"))
        self.stalled_counter: int = int(get("stallCount", 0))
        self.custom_id: str | None = get("customId")
        self.parent_id: str | None = get("parentId")
        self.children_ids: list[str] = list(get("childrenIds") or ())
        self.depends_on: list[str] = list(get("dependsOn") or ())
        self.tags: list[str] = list(get("tags") or ())
        self.group_id: str | None = get("groupId")
        self.unique_key: str | None = get("uniqueKey")
        self.timeline: list[dict[str, Any]] = list(get("timeline") or ())
        self.state: str | None = get("state")  # only when the broker says
        # W3C headers of the producer's span (core/trace_context.py), if it sent them
        self.trace_context: dict[str, str] | None = get("traceContext")

    @property
    def delay(self) -> int:
        return delay_of(self.run_at, self.timestamp)

    def __repr__(self) -> str:
        return f"<Job {self.id} {self.name!r} in {self.queue_name}>"

    # ------------------------------------------------------------------ reads

    async def get_state(self) -> str:
        self.state = await self.queue.get_job_state(self.id)
        return self.state

    async def is_waiting(self) -> bool:
        return await self.get_state() == "waiting"

    async def is_active(self) -> bool:
        return await self.get_state() == "active"

    async def is_delayed(self) -> bool:
        return await self.get_state() == "delayed"

    async def is_completed(self) -> bool:
        return await self.get_state() == "completed"

    async def is_failed(self) -> bool:
        return await self.get_state() == "failed"

    async def is_waiting_children(self) -> bool:
        return await self.get_state() == "waiting-children"

    async def get_children_values(self) -> dict[str, Any]:
        return await self.queue.get_children_values(self.id)

    async def get_failed_children_values(self) -> dict[str, Any]:
        return await self.queue.get_failed_children_values(self.id)

    async def get_ignored_children_failures(self) -> dict[str, Any]:
        return await self.queue.get_ignored_children_failures(self.id)

    async def get_dependencies(self, type: str | None = None, start: int = 0,
                               end: int = -1) -> dict[str, Any]:
        return await self.queue.get_dependencies(self.id, type, start, end)

    async def get_dependencies_count(self) -> dict[str, int]:
        return await self.queue.get_dependencies_count(self.id)

    async def get_logs(self, start: int = 0, end: int = -1) -> dict[str, Any]:
        return await self.queue.get_job_logs(self.id, start, end)

    # ------------------------------------------------------------------ changes

    async def update_progress(self, progress: Any, message: str | None = None) -> None:
        await self.queue.update_job_progress(self.id, progress, message)
        if isinstance(progress, (int, float)) and not isinstance(progress, bool):
            self.progress = min(max(progress, 0), 100)

    async def log(self, message: str, level: str = "info") -> None:
        await self.queue.add_job_log(self.id, message, level)

    async def clear_logs(self, keep: int = 0) -> None:
        await self.queue.clear_job_logs(self.id, keep)

    async def update_data(self, data: Any) -> None:
        await self.queue.update_job_data(self.id, data)
        self.data = data

    async def promote(self) -> None:
        await self.queue.promote_job(self.id)

    async def change_delay(self, delay_ms: int) -> None:
        await self.queue.change_job_delay(self.id, delay_ms, self.token)

    async def change_priority(self, priority: int = 0, lifo: bool | None = None) -> None:
        await self.queue.change_job_priority(self.id, priority, lifo)

    async def extend_lock(self, duration_ms: int, token: str | None = None) -> None:
        await self.queue.extend_job_lock(self.id, duration_ms, token or self.token)

    async def remove(self) -> None:
        await self.queue.remove(self.id)

    async def retry(self) -> None:
        await self.queue.retry_job(self.id)

    async def discard(self) -> None:
        await self.queue.discard_job(self.id, self.token)

    async def remove_child_dependency(self) -> bool:
        return await self.queue.remove_child_dependency(self.id)

    async def remove_unprocessed_children(self) -> None:
        await self.queue.remove_unprocessed_children(self.id)

    # ------------------------------------------------------------------ moves

    async def move_to_completed(self, result: Any = None, token: str | None = None) -> None:
        await self.queue.move_job_to_completed(self.id, result, token or self.token)

    async def move_to_failed(self, error: BaseException | str,
                             token: str | None = None) -> None:
        await self.queue.move_job_to_failed(self.id, error, token or self.token)

    async def move_to_wait(self, token: str | None = None) -> None:
        await self.queue.move_job_to_wait(self.id, token or self.token)

    async def move_to_delayed(self, timestamp_ms: int, token: str | None = None) -> None:
        await self.queue.move_job_to_delayed(self.id, timestamp_ms, token or self.token)

    async def move_to_waiting_children(self, token: str | None = None) -> bool:
        return await self.queue.move_job_to_waiting_children(self.id, token or self.token)

    async def wait_until_finished(self, queue_events: QueueEvents | None = None,
                                  ttl: float | None = 30.0) -> Any:
        """The job's result once it completes (see :meth:`Queue.wait_job_until_finished`)."""
        return await self.queue.wait_job_until_finished(self.id, queue_events, ttl)
