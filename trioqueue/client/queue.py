"""Queue: add jobs and read, change and wait for them (BullMQ's Queue, in Python names).

Every method is one command to the broker (``get_jobs`` pages when asked for
everything). Times in job options are milliseconds, as on the wire and in BullMQ;
waits take seconds, as Python does. A lookup that finds nothing returns ``None``
(``get_job``, ``get_job_by_custom_id``, ``get_progress``); a change to a job that does
not exist raises :class:`~trioqueue.client.errors.JobNotFound`.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..core.errors import Refused
from ..core.fields import queue_name as check_queue_name
from ..core.stack_traces import trace_tail
from . import tracing
from .dlq import DlqMethods
from .errors import CommandError, JobNotFound, ValidationError
from .job import Job
from .maintenance import MaintenanceMixin
from .options import BulkJob, JobOptions, check_flag, check_int, check_ms, check_states, job_options
from .queue_groups import QueueGroups
from .queue_limits import QueueLimits
from .queue_schedulers import QueueSchedulers
from .queue_webhooks import QueueWebhooks

if TYPE_CHECKING:
    from .connection import Connection
    from .events import QueueEvents

_PAGE = 1000


def error_text(error: BaseException | str) -> tuple[str, list[str] | None]:
    """The message and stack lines to send for a failure."""
    if isinstance(error, BaseException):
        stack = traceback.format_exception(type(error), error, error.__traceback__)
        lines = [line.rstrip() for chunk in stack for line in chunk.splitlines()]
        # the whole traceback (its tail, within the bound the broker keeps): the
        # user's frame and the exception line are at its end
        return str(error) or type(error).__name__, trace_tail(lines)
    return str(error), None


class Queue(QueueLimits, QueueGroups, MaintenanceMixin, DlqMethods, QueueSchedulers,
            QueueWebhooks):
    """A named queue on a :class:`~trioqueue.client.connection.Connection`."""

    def __init__(self, name: str, connection: Connection, *, telemetry: bool = False) -> None:
        try:
            check_queue_name(name)
        except Refused as exc:
            raise ValidationError(exc.message) from None
        self.name = name
        self.connection = connection
        # add/add_bulk carry the current OpenTelemetry context in each job (tracing.py)
        self.telemetry = telemetry
        if telemetry:
            tracing.require()

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    async def _call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        return await self.connection.call(cmd, **fields)

    # ------------------------------------------------------------------ adding

    async def add(self, name: str, data: Any = None, **options: Unpack[JobOptions]) -> Job:
        """Add one job. Options: :class:`~trioqueue.client.options.JobOptions`
        (``job_id``, ``priority``, ``delay`` ms, ``attempts``, ``backoff``,
        ``deduplication``, ...), each checked for its Python type before anything is
        sent (:class:`~trioqueue.client.errors.ValidationError` names the argument).

        With a ``job_id`` of a job that is still live, nothing is added and the
        existing job is returned (idempotent adds).
        """
        wire = job_options(options) if options else {}
        if self.telemetry:
            tracing.inject(wire)
        reply = await self.connection.call("PUSH", queue=self.name, name=name, data=data,
                                           **wire)
        return self._added(reply["id"], name, data, wire)

    async def add_bulk(self, jobs: Iterable[BulkJob]) -> list[Job]:
        """Add many jobs in one command: all or none (the first invalid one refuses
        the batch). Each item: ``{"name", "data", "opts": {...}}`` (BullMQ's shape,
        :class:`~trioqueue.client.options.BulkJob`)."""
        items, wires = [], []
        for index, job in enumerate(jobs):
            try:
                wire = job_options(job.get("opts") or {}, custom_id_key="customId")
            except ValidationError as exc:
                raise ValidationError(f"jobs[{index}].opts: {exc.message}") from None
            if self.telemetry:
                tracing.inject(wire)
            wires.append(wire)
            items.append({"name": job.get("name", "default"), "data": job.get("data"),
                          **wire})
        if not items:
            return []
        reply = await self._call("PUSHB", queue=self.name, jobs=items)
        return [self._added(job_id, item["name"], item["data"], wire)
                for job_id, item, wire in zip(reply["ids"], items, wires, strict=True)]

    def _added(self, job_id: str, name: str, data: Any, wire: dict[str, Any]) -> Job:
        raw = {"id": job_id, "name": name, "data": data, "queue": self.name, **wire}
        raw.pop("jobId", None)
        raw.pop("customId", None)
        return Job(self, raw)

    # ------------------------------------------------------------------ reads

    async def get_job(self, job_id: str) -> Job | None:
        try:
            reply = await self._call("GetJob", id=job_id)
        except JobNotFound:
            return None
        return Job(self, reply["job"])

    async def get_job_by_custom_id(self, custom_id: str) -> Job | None:
        try:
            reply = await self._call("GetJobByCustomId", customId=custom_id)
        except JobNotFound:
            return None
        return Job(self, reply["job"])

    async def get_job_state(self, job_id: str) -> str:
        return str((await self._call("GetState", id=job_id))["state"])

    async def get_result(self, job_id: str) -> Any:
        """The stored result of a completed job (None when there is none)."""
        return (await self._call("GetResult", id=job_id)).get("result")

    async def get_progress(self, job_id: str) -> dict[str, Any] | None:
        """``{"progress", "message"}`` of an active job; None when it is not active."""
        try:
            reply = await self._call("GetProgress", id=job_id)
        except JobNotFound:
            return None
        except CommandError as exc:
            if exc.message.startswith("Job is not active"):
                return None
            raise
        return {"progress": reply.get("progress"), "message": reply.get("message")}

    async def get_job_counts(self) -> dict[str, int]:
        return dict((await self._call("GetJobCounts", queue=self.name))["counts"])

    async def get_counts_per_priority(self) -> dict[int | float, int]:
        counts = (await self._call("GetCountsPerPriority", queue=self.name))["counts"]
        return {_number(key): n for key, n in counts.items()}

    async def count(self) -> int:
        """Jobs waiting, prioritized or delayed."""
        return int((await self._call("Count", queue=self.name))["count"])

    async def get_jobs(self, states: str | Sequence[str] | None = None, start: int = 0,
                       end: int = -1, asc: bool = True) -> list[Job]:
        """Jobs in ``states`` (all states when None), ordered by creation time, from
        ``start`` to ``end`` inclusive (-1: to the last)."""
        start, end = _span(start, end)
        state = check_states("states", states)
        asc = check_flag("asc", asc)
        out: list[Job] = []
        offset = start
        while True:
            limit = _PAGE if end < 0 else min(_PAGE, end + 1 - offset)
            if limit <= 0:
                return out
            fields: dict[str, Any] = {"queue": self.name, "offset": offset,
                                      "limit": limit, "asc": asc}
            if state is not None:
                fields["state"] = state
            page = (await self._call("GetJobs", **fields))["jobs"]
            out.extend(Job(self, raw) for raw in page)
            if len(page) < limit:
                return out
            offset += len(page)

    async def get_job_logs(self, job_id: str, start: int = 0, end: int = -1
                           ) -> dict[str, Any]:
        """``{"logs": [{"timestamp", "level", "message"}], "count"}``."""
        start, end = _span(start, end)
        return dict((await self._call("GetLogs", id=job_id, start=start, end=end))["data"])

    async def get_children_values(self, job_id: str) -> dict[str, Any]:
        """Results of the job's completed children, keyed ``<queue>:<id>``."""
        return dict((await self._call("GetChildrenValues", id=job_id))["data"]["values"])

    async def get_failed_children_values(self, job_id: str) -> dict[str, Any]:
        return dict((await self._call("GetFailedChildrenValues", id=job_id))["values"])

    async def get_ignored_children_failures(self, job_id: str) -> dict[str, Any]:
        return dict((await self._call("GetIgnoredChildrenFailures", id=job_id))["values"])

    async def get_job_dependencies(self, job_id: str) -> dict[str, Any]:
        """``{"processed": {key: result}, "unprocessed": [key], "failed", "ignored"}``."""
        return dict((await self._call("GetDependencies", id=job_id))["data"])

    async def get_dependencies(self, job_id: str, type: str | None = None, start: int = 0,
                               end: int = -1) -> dict[str, Any]:
        """BullMQ's ``getDependencies``: one list (``processed``, ``unprocessed``,
        ``failed``, ``ignored``) from ``start`` to ``end``, plus ``count``; all four
        without ``type``."""
        if type is None:
            return await self.get_job_dependencies(job_id)
        start, end = _span(start, end)
        reply = await self._call("GetDependencies", id=job_id, type=type, start=start,
                                 end=end)
        return dict(reply["data"])

    async def get_dependencies_count(self, job_id: str) -> dict[str, int]:
        return dict((await self._call("GetDependenciesCount", id=job_id))["data"])

    async def get_deduplication_job_id(self, dedup_id: str) -> str | None:
        reply = await self._call("GetDeduplicationJobId", queue=self.name,
                                 deduplicationId=dedup_id)
        job_id = reply["data"]["jobId"]
        return None if job_id is None else str(job_id)

    async def remove_deduplication_key(self, dedup_id: str) -> int:
        """Release a deduplication key (BullMQ's ``removeDeduplicationKey``): its job
        goes on, and the next job added with the key is a new one; 1 if a live key was
        released, else 0."""
        reply = await self._call("RemoveDeduplicationKey", queue=self.name,
                                 deduplicationId=dedup_id)
        return int(reply["data"]["count"])

    async def remove_job_deduplication_key(self, job_id: str) -> bool:
        """Release the key of ``job_id`` only while that job still holds it (BullMQ's
        ``job.removeDeduplicationKey``)."""
        reply = await self._call("RemoveJobDeduplicationKey", id=job_id)
        return bool(reply["data"]["removed"])

    async def get_workers(self) -> list[dict[str, Any]]:
        workers = (await self._call("ListWorkers"))["data"]["workers"]
        return [w for w in workers if self.name in (w.get("queues") or ())]

    # ------------------------------------------------------------------ progress, logs

    async def update_job_progress(self, job_id: str, progress: Any,
                                  message: str | None = None) -> None:
        fields: dict[str, Any] = {"id": job_id, "progress": progress}
        if message is not None:
            fields["message"] = message
        await self._call("Progress", **fields)

    async def add_job_log(self, job_id: str, message: str, level: str = "info") -> None:
        await self._call("AddLog", id=job_id, message=message, level=level)

    async def clear_job_logs(self, job_id: str, keep: int = 0) -> None:
        await self._call("ClearLogs", id=job_id, keepLogs=check_int("keep", keep, 0))

    # ------------------------------------------------------------------ job changes

    async def remove(self, job_id: str) -> None:
        """Remove a job that has not started (waiting, delayed, waiting for children)."""
        await self._call("Cancel", id=job_id)

    async def retry_job(self, job_id: str) -> None:
        """Failed (in the DLQ) -> waiting again; active -> back to waiting."""
        await self._call("MoveToWait", id=job_id)

    async def discard_job(self, job_id: str, token: str | None = None) -> None:
        await self._call("Discard", id=job_id, **_token(token))

    async def promote_job(self, job_id: str) -> None:
        await self._call("Promote", id=job_id)

    async def promote_jobs(self, count: int | None = None) -> int:
        fields: dict[str, Any] = {"queue": self.name}
        if count is not None:
            fields["count"] = check_int("count", count, 0)
        return int((await self._call("PromoteJobs", **fields))["count"])

    async def update_job_data(self, job_id: str, data: Any) -> None:
        await self._call("Update", id=job_id, data=data)

    async def change_job_priority(self, job_id: str, priority: int = 0,
                                  lifo: bool | None = None) -> None:
        fields: dict[str, Any] = {"id": job_id, "priority": check_int("priority", priority)}
        if lifo is not None:
            fields["lifo"] = check_flag("lifo", lifo)
        await self._call("ChangePriority", **fields)

    async def change_job_delay(self, job_id: str, delay_ms: int,
                               token: str | None = None) -> None:
        delay = check_ms("delay_ms", delay_ms)
        await self._call("ChangeDelay", id=job_id, delay=delay, **_token(token))

    async def extend_job_lock(self, job_id: str, duration_ms: int,
                              token: str | None = None) -> None:
        duration = check_ms("duration_ms", duration_ms)
        await self._call("ExtendLock", id=job_id, duration=duration, **_token(token))

    async def remove_child_dependency(self, job_id: str) -> bool:
        return bool((await self._call("RemoveChildDependency", id=job_id))["removed"])

    async def remove_unprocessed_children(self, job_id: str) -> None:
        await self._call("RemoveUnprocessedChildren", id=job_id)

    # ------------------------------------------------------------------ moves (token rule)

    async def move_job_to_completed(self, job_id: str, result: Any = None,
                                    token: str | None = None) -> None:
        await self._call("ACK", id=job_id, result=result, **_token(token))

    async def move_job_to_failed(self, job_id: str, error: BaseException | str,
                                 token: str | None = None, *,
                                 unrecoverable: bool = False) -> None:
        message, stack = error_text(error)
        fields: dict[str, Any] = {"id": job_id, "error": message, **_token(token)}
        if stack is not None:
            fields["stack"] = stack
        if unrecoverable:
            fields["unrecoverable"] = True
        await self._call("FAIL", **fields)

    async def move_job_to_wait(self, job_id: str, token: str | None = None) -> None:
        await self._call("MoveToWait", id=job_id, **_token(token))

    async def move_job_to_delayed(self, job_id: str, timestamp_ms: int,
                                  token: str | None = None) -> None:
        """Delay an active job until ``timestamp_ms`` (epoch milliseconds), as BullMQ."""
        import time

        until = check_int("timestamp_ms", timestamp_ms, 0)
        delay = max(until - int(time.time() * 1000), 0)
        await self._call("MoveToDelayed", id=job_id, delay=delay, **_token(token))

    async def move_job_to_waiting_children(self, job_id: str,
                                           token: str | None = None) -> bool:
        """Park an active job until its children finish; False (and the job stays
        active) when it has nothing to wait for."""
        reply = await self._call("MoveToWaitingChildren", id=job_id, **_token(token))
        return bool(reply["data"]["moved"])

    # ------------------------------------------------------------------ waiting

    async def wait_job_until_finished(self, job_id: str,
                                      queue_events: QueueEvents | None = None,
                                      ttl: float | None = 30.0) -> Any:
        """The job's result once it completes, even on a later attempt.

        Raises :class:`~trioqueue.client.errors.JobFailed` with the last attempt's
        error once no retry is left, :class:`~trioqueue.client.errors.JobNotFound`
        for a job that no longer exists (unless the broker still retains the result
        of a job removed on completion), and
        :class:`~trioqueue.client.errors.WaitTimeout` after ``ttl`` seconds (``0`` or
        None: no limit). Lost connections and broker restarts are retried, not
        reported. With ``queue_events`` the outcome arrives with its event.
        """
        from .waiting import wait_until_finished

        return await wait_until_finished(self, job_id, queue_events, ttl)

    # ------------------------------------------------------------------ control

    async def pause(self) -> None:
        await self._call("Pause", queue=self.name)

    async def resume(self) -> None:
        await self._call("Resume", queue=self.name)

    async def is_paused(self) -> bool:
        return bool((await self._call("IsPaused", queue=self.name))["paused"])

    async def drain(self) -> int:
        return int((await self._call("Drain", queue=self.name))["count"])

    async def obliterate(self) -> None:
        await self._call("Obliterate", queue=self.name)

    async def set_stall_config(self, **config: Any) -> None:
        """``enabled``, ``stall_interval`` (ms), ``max_stalls``, ``grace_period`` (ms)."""
        names = {"enabled": "enabled", "stall_interval": "stallInterval",
                 "max_stalls": "maxStalls", "grace_period": "gracePeriod"}
        unknown = set(config) - set(names)
        if unknown:
            raise ValidationError(f"unknown stall option: {sorted(unknown)[0]}")
        wire = {names[k]: (check_flag(k, v) if k == "enabled" else
                           check_int(k, v, 0) if k == "max_stalls" else check_ms(k, v))
                for k, v in config.items() if v is not None}
        await self._call("SetStallConfig", queue=self.name, config=wire)

    async def get_stall_config(self) -> dict[str, Any]:
        return dict((await self._call("GetStallConfig", queue=self.name))["config"])


def _token(token: str | None) -> dict[str, Any]:
    return {} if token is None else {"token": token}


def _span(start: Any, end: Any) -> tuple[int, int]:
    """A slice's ``start`` (an int of at least 0) and inclusive ``end`` (-1: the last)."""
    return check_int("start", start, 0), check_int("end", end, -1)


def _number(key: str) -> int | float:
    value = float(key)
    return int(value) if value.is_integer() else value
