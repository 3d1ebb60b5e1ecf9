"""Queue: add jobs and read, change and wait for them (BullMQ's Queue, in Python names).

Every method is one command to the broker (``get_jobs`` pages when asked for
everything). Times in job options are milliseconds, as on the wire and in BullMQ;
waits take seconds, as Python does. A lookup that finds nothing returns ``None``
(``get_job``, ``get_job_by_custom_id``, ``get_progress``); a change to a job that does
not exist raises :class:`~trioqueue.client.errors.JobNotFound`.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Unpack

from ..core.errors import Refused
from ..core.fields import queue_name as check_queue_name
from ..core.stack_traces import trace_tail
from . import dlq, tracing
from .errors import CommandError, JobNotFound, ValidationError
from .job import Job
from .options import BulkJob, JobOptions, check_flag, check_int, check_ms, check_states, job_options
from .schedulers import template_fields

if TYPE_CHECKING:
    from .connection import Connection
    from .events import QueueEvents

_PAGE = 1000
_WEBHOOK_NOT_FOUND = "Webhook not found"
# The states Clean understands (BullMQ's names and bunqueue's): the queued ones are
# judged by their creation time, ``completed`` by completion, ``failed`` (the
# dead-letter queue) by the time the job entered it; ``active`` removes nothing.
CLEAN_STATES = frozenset({"wait", "waiting", "delayed", "prioritized", "paused",
                          "completed", "failed", "active"})


def error_text(error: BaseException | str) -> tuple[str, list[str] | None]:
    """The message and stack lines to send for a failure."""
    if isinstance(error, BaseException):
        stack = traceback.format_exception(type(error), error, error.__traceback__)
        lines = [line.rstrip() for chunk in stack for line in chunk.splitlines()]
        # the whole traceback (its tail, within the bound the broker keeps): the
        # user's frame and the exception line are at its end
        return str(error) or type(error).__name__, trace_tail(lines)
    return str(error), None


class Queue:
    """A named queue on a :class:`~trioqueue.client.connection.Connection`.

    BullMQ's flat surface: every method is one command (or a few), grouped below by
    what it touches: jobs, the queue's control, its limits, job groups, job
    schedulers, the dead-letter queue, webhooks and maintenance.
    """

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

    async def _queue_call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """A command about this queue (``queue`` set to its name)."""
        return await self._call(cmd, queue=self.name, **fields)

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

    # ------------------------------------------------------------------ queue-wide limits
    # (BullMQ's global rate limit and concurrency: they bind every worker of the queue
    # together, because the broker applies them where jobs are leased)

    async def set_global_rate_limit(self, max: int, duration_ms: int = 1000,
                                    ttl_ms: int | None = None) -> None:
        """At most ``max`` jobs leased in any window of ``duration_ms``, the first one
        included; ``ttl_ms`` ends the limit by itself. 0 stops pulls."""
        fields: dict[str, Any] = {"limit": check_int("max", max, 0),
                                  "duration": check_int("duration_ms", duration_ms, 1)}
        if ttl_ms is not None:
            fields["ttl"] = check_int("ttl_ms", ttl_ms, 1)
        await self._queue_call("RateLimit", **fields)

    async def remove_global_rate_limit(self) -> None:
        await self._queue_call("RateLimitClear")

    async def get_global_rate_limit(self) -> dict[str, Any] | None:
        """``{"max": n, "duration": ms}``, or None when the queue has none."""
        limit: dict[str, Any] | None = (await self._limits())["rateLimit"]
        return limit

    async def get_rate_limit_ttl(self, max_jobs: int | None = None) -> int:
        """-2 without a rate limit; else the ms left of its ttl, or (without a ttl) the
        ms until ``max_jobs`` (default 1) jobs may be leased; -1: never."""
        fields = {} if max_jobs is None else {"maxJobs": check_int("max_jobs", max_jobs, 1)}
        return int((await self._limits(**fields))["rateLimitTtl"])

    async def set_global_concurrency(self, concurrency: int) -> None:
        """At most ``concurrency`` jobs of the queue active at once, whoever pulls."""
        await self._queue_call("SetConcurrency", limit=check_int("concurrency", concurrency, 0))

    async def remove_global_concurrency(self) -> None:
        await self._queue_call("ClearConcurrency")

    async def get_global_concurrency(self) -> int | None:
        limit = (await self._limits())["concurrencyLimit"]
        return None if limit is None else int(limit)

    async def is_maxed(self) -> bool:
        """True while every slot of the queue's concurrency limit is taken."""
        return bool((await self._limits())["maxed"])

    async def _limits(self, **fields: Any) -> dict[str, Any]:
        reply = await self._queue_call("GetQueueLimits", **fields)
        limits: dict[str, Any] = reply["data"]["limits"]
        return limits

    # ------------------------------------------------------------------ job groups
    # (BullMQ Pro's group methods: a job joins a group with ``add(..., group_id=...)``;
    # the broker hands out the queue's groups round robin, ungrouped jobs first, and
    # within a group lower ``priority`` first)

    async def _group(self, cmd: str, group_id: str, **fields: Any) -> Any:
        return (await self._queue_call(cmd, groupId=group_id, **fields))["data"]

    async def get_group_jobs_count(self, group_id: str) -> int:
        """Jobs of the group waiting, prioritized or delayed."""
        return int((await self._group("GetGroupJobsCount", group_id))["count"])

    async def get_groups_jobs_count(self, max_count: int | None = None) -> int:
        """Waiting jobs of all the queue's groups (at most ``max_count``)."""
        fields = {} if max_count is None else {"maxCount": check_int("max_count", max_count, 1)}
        reply = await self._queue_call("GetGroupsJobsCount", **fields)
        return int(reply["data"]["count"])

    async def get_group_active_count(self, group_id: str) -> int:
        return int((await self._group("GetGroupActiveCount", group_id))["count"])

    async def set_group_concurrency(self, group_id: str, concurrency: int) -> None:
        """At most ``concurrency`` jobs of the group active at once (overrides the
        workers' ``group_concurrency``)."""
        await self._queue_call("SetGroupConcurrency", groupId=group_id,
                               concurrency=check_int("concurrency", concurrency, 1))

    async def get_group_concurrency(self, group_id: str) -> int | None:
        """The group's own limit; None when it has none."""
        value = (await self._group("GetGroupConcurrency", group_id))["concurrency"]
        return None if value is None else int(value)

    async def remove_group_concurrency(self, group_id: str) -> bool:
        return bool((await self._group("RemoveGroupConcurrency", group_id))["removed"])

    async def set_group_rate_limit(self, group_id: str, max: int, duration_ms: int) -> None:
        """At most ``max`` jobs of the group started per window of ``duration_ms``."""
        await self._queue_call("SetGroupRateLimit", groupId=group_id,
                               max=check_int("max", max, 1),
                               duration=check_int("duration_ms", duration_ms, 1))

    async def get_group_rate_limit(self, group_id: str) -> dict[str, Any] | None:
        """``{"max", "duration"}`` of the group's own limit, or None."""
        limit: dict[str, Any] | None = (await self._group("GetGroupRateLimit",
                                                          group_id))["limit"]
        return limit

    async def remove_group_rate_limit(self, group_id: str) -> bool:
        return bool((await self._group("RemoveGroupRateLimit", group_id))["removed"])

    async def get_group_rate_limit_ttl(self, group_id: str,
                                       max_jobs: int | None = None) -> int:
        """ms until ``max_jobs`` (default 1) more jobs of the group may start; 0: now;
        -2: the group has no rate limit."""
        fields = {} if max_jobs is None else {"maxJobs": check_int("max_jobs", max_jobs, 1)}
        return int((await self._group("GetGroupRateLimitTtl", group_id, **fields))["ttl"])

    async def rate_limit_group(self, group_id: str, duration_ms: int) -> None:
        """No job of the group starts for the next ``duration_ms`` (BullMQ Pro's
        ``rateLimitGroup``, e.g. after the group's API answered 429)."""
        await self._queue_call("RateLimitGroup", groupId=group_id,
                               duration=check_int("duration_ms", duration_ms, 1))

    async def pause_group(self, group_id: str) -> bool:
        """True when it was running; its active jobs finish, no new one starts."""
        return bool((await self._group("PauseGroup", group_id))["changed"])

    async def resume_group(self, group_id: str) -> bool:
        return bool((await self._group("ResumeGroup", group_id))["changed"])

    async def is_group_paused(self, group_id: str) -> bool:
        return bool((await self._group("IsGroupPaused", group_id))["paused"])

    # ------------------------------------------------------------------ job schedulers
    # (BullMQ's ``upsertJobScheduler``... over bunqueue's ``Cron`` commands: a schedule
    # kept by the broker pushes a job into this queue at every slot; it survives
    # restarts and fires with no client connected)

    async def upsert_job_scheduler(
        self, scheduler_id: str, *, every_ms: int | None = None, pattern: str | None = None,
        tz: str | None = None, limit: int | None = None, immediately: bool = False,
        template: Mapping[str, Any] | None = None, prevent_overlap: bool = True,
        skip_missed_on_restart: bool = True, skip_if_no_worker: bool = False,
    ) -> dict[str, Any]:
        """Create or replace the schedule ``scheduler_id`` (its count of runs is kept).

        ``pattern`` (a cron expression, 5 fields or 6 with seconds; in ``tz``) or
        ``every_ms``; ``limit``: at most that many runs, then the schedule is deleted;
        ``template``: ``{"name", "data", "opts"}`` of the jobs, ``opts`` as ``add()``
        takes them (attempts, backoff, delay, timeout, stall_timeout,
        remove_on_complete, remove_on_fail, priority). With ``prevent_overlap`` (the
        default) a run is skipped while the previous job is waiting or active.
        Returns the schedule (bunqueue's CronInfo)."""
        if (every_ms is None) == (pattern is None):
            raise ValueError("give one of every_ms and pattern")
        fields: dict[str, Any] = {"name": scheduler_id, "queue": self.name,
                                  "preventOverlap": check_flag("prevent_overlap",
                                                               prevent_overlap),
                                  "skipMissedOnRestart": check_flag(
                                      "skip_missed_on_restart", skip_missed_on_restart),
                                  "skipIfNoWorker": check_flag("skip_if_no_worker",
                                                               skip_if_no_worker),
                                  "immediately": check_flag("immediately", immediately)}
        if every_ms is not None:
            fields["repeatEvery"] = check_int("every_ms", every_ms, 1)
        if pattern is not None:
            fields["schedule"] = pattern
        if tz is not None:
            fields["timezone"] = tz
        if limit is not None:
            fields["maxLimit"] = check_int("limit", limit, 1)
        fields.update(template_fields(template or {}))
        reply = await self._call("Cron", **fields)
        info: dict[str, Any] = reply["cron"]
        return info

    async def get_job_scheduler(self, scheduler_id: str) -> dict[str, Any] | None:
        try:
            reply = await self._call("CronGet", name=scheduler_id)
        except CommandError as exc:
            if "not found" in str(exc):
                return None
            raise
        info: dict[str, Any] = reply["cron"]
        return info

    async def get_job_schedulers(self) -> list[dict[str, Any]]:
        """This queue's schedules (the broker's are all in ``CronList``)."""
        crons: list[dict[str, Any]] = (await self._call("CronList"))["crons"]
        return [c for c in crons if c["queue"] == self.name]

    async def remove_job_scheduler(self, scheduler_id: str) -> bool:
        """True when it existed."""
        try:
            await self._call("CronDelete", name=scheduler_id)
        except CommandError as exc:
            if "not found" in str(exc):
                return False
            raise
        return True

    # ------------------------------------------------------------------ dead-letter queue

    async def get_dlq(self, count: int | None = None,
                      **filter: Any) -> list[dlq.DlqEntry]:
        """The entries, oldest first: ``count`` of them (100 by default), or those the
        filter keeps (``reason``, ``older_than`` / ``newer_than`` epoch ms,
        ``retriable``, ``expired``, ``limit``, ``offset``)."""
        fields: dict[str, Any] = {"queue": self.name}
        if count is not None:
            fields["count"] = check_int("count", count, 0)
        if filter:
            fields["filter"] = dlq.filter_wire(filter)
        reply = await self._call("Dlq", **fields)
        return [dlq.entry(self, raw) for raw in reply["entries"]]

    async def get_dlq_stats(self) -> dict[str, Any]:
        """``total``, ``byReason``, ``byQueue``, ``pendingRetry``, ``expired``,
        ``oldestEntry``, ``newestEntry`` (bunqueue's names)."""
        reply = await self._queue_call("GetDlqStats")
        return dict(reply["data"]["stats"])

    async def retry_dlq(self, job_id: str | None = None, count: int | None = None,
                        **filter: Any) -> int:
        """Dead-lettered jobs back to waiting (same ids, attempts reset): one, the first
        ``count``, those the filter keeps, or all; how many. An entry whose id or
        unique key a live job holds now is skipped (not counted)."""
        fields: dict[str, Any] = {"queue": self.name}
        if job_id is not None:
            fields["jobId"] = job_id
        if count is not None:
            fields["count"] = check_int("count", count, 0)
        if filter:
            fields["filter"] = dlq.filter_wire(filter)
        return int((await self._call("RetryDlq", **fields))["count"])

    async def purge_dlq(self) -> int:
        """Delete every entry for good; how many."""
        return int((await self._queue_call("PurgeDlq"))["count"])

    async def remove_dlq_job(self, job_id: str) -> bool:
        """Delete one entry; False when there was none."""
        reply = await self._queue_call("RemoveDlqJob", jobId=job_id)
        return bool(reply["data"]["removed"])

    async def retry_completed(self, job_id: str | None = None,
                              count: int | None = None,
                              timestamp: int | None = None) -> int:
        """Completed jobs run again as new waiting generations (their results are
        deleted): one, the first ``count``, or those completed at or before
        ``timestamp`` (epoch ms); how many."""
        fields: dict[str, Any] = {"queue": self.name}
        if job_id is not None:
            fields["id"] = job_id
        if count is not None:
            fields["count"] = check_int("count", count, 0)
        if timestamp is not None:
            fields["timestamp"] = check_ms("timestamp", timestamp)
        return int((await self._call("RetryCompleted", **fields))["count"])

    async def set_dlq_config(self, **config: Any) -> None:
        """``auto_retry``, ``auto_retry_interval`` (ms), ``max_auto_retries``,
        ``max_age`` (ms, None: never), ``max_entries``."""
        await self._queue_call("SetDlqConfig", config=dlq.config_wire(config))

    async def get_dlq_config(self) -> dict[str, Any]:
        """The config by bunqueue's names (``autoRetry``, ``autoRetryInterval``, ...)."""
        return dict((await self._queue_call("GetDlqConfig"))["config"])

    # ------------------------------------------------------------------ webhooks
    # (the broker's, not the queue's: ``queue=None`` watches every queue and
    # ``list_webhooks`` lists them all; here because that is where bunqueue's clients
    # have them. Events: ``job.pushed``, ``job.started``, ``job.completed``,
    # ``job.failed`` (final failures only), ``job.progress``; docs/protocol.md,
    # "Webhooks", gives the payload, the signature and the retries)

    async def add_webhook(self, url: str, events: Sequence[str], queue: str | None = None,
                          secret: str | None = None) -> dict[str, Any]:
        """Register a webhook; returns ``{"webhookId", "url", "events", "queue",
        "createdAt"}``. With ``secret``, each delivery carries ``X-Webhook-Signature``,
        the hex HMAC-SHA256 of the body. The broker refuses URLs of localhost and
        private or internal addresses (unless started with --webhook-allow-private)."""
        if isinstance(events, str) or not all(isinstance(e, str) for e in events):
            raise ValidationError("events must be a list of event names")
        fields: dict[str, Any] = {"url": url, "events": list(events)}
        if queue is not None:
            fields["queue"] = queue
        if secret is not None:
            fields["secret"] = secret
        return dict((await self._call("AddWebhook", **fields))["data"])

    async def remove_webhook(self, webhook_id: str) -> bool:
        """True once removed; False when no webhook has that id."""
        return await self._unless_missing("RemoveWebhook", webhookId=webhook_id)

    async def list_webhooks(self) -> list[dict[str, Any]]:
        """Every webhook: ``id``, ``url``, ``events``, ``queue``, ``createdAt``,
        ``enabled`` and the counters since the broker started (``successCount``,
        ``failureCount``, ``droppedCount``, ``lastTriggered``); never the secret."""
        return list((await self._call("ListWebhooks"))["data"]["webhooks"])

    async def set_webhook_enabled(self, webhook_id: str, enabled: bool) -> bool:
        """Turn deliveries on or off (kept across restarts); False when no webhook has
        that id."""
        return await self._unless_missing("SetWebhookEnabled", id=webhook_id,
                                          enabled=bool(enabled))

    async def _unless_missing(self, cmd: str, **fields: Any) -> bool:
        try:
            await self._call(cmd, **fields)
        except CommandError as exc:
            if exc.message == _WEBHOOK_NOT_FOUND:
                return False
            raise
        return True

    # ------------------------------------------------------------------ maintenance

    async def clean(self, grace_ms: int, limit: int = 1000,
                    state: str | None = None) -> list[str]:
        """Remove jobs older than ``grace_ms``, at most ``limit`` (1 to 100,000), oldest
        first; their ids (BullMQ's ``clean(grace, limit, type)``). ``state``: None
        (the queued jobs, as ``"wait"``, ``"delayed"``, ``"prioritized"`` and
        ``"paused"``), ``"completed"`` or ``"failed"``; ``"active"`` removes nothing."""
        fields: dict[str, Any] = {"queue": self.name, "grace": check_ms("grace_ms", grace_ms),
                                  "limit": check_int("limit", limit, 1)}
        if state is not None:
            if state not in CLEAN_STATES:
                raise ValidationError(f"state must be one of {sorted(CLEAN_STATES)}, "
                                      f"not {state!r}")
            fields["state"] = state
        reply = await self._call("Clean", **fields)
        return [str(job_id) for job_id in reply["ids"]]

    async def get_queues(self) -> list[str]:
        """The names of the broker's queues that hold jobs (live or finished) or
        settings of their own, sorted."""
        return [str(name) for name in (await self._call("ListQueues"))["queues"]]

    async def list_queues(self) -> list[str]:
        """:meth:`get_queues`, by bunqueue's name."""
        return await self.get_queues()

    async def trim_events(self, max_length: int) -> int:
        """BullMQ's ``trimEvents``: the broker keeps no event journal (events reach the
        subscribers connected at the time), so this removes nothing and returns 0."""
        reply = await self._queue_call("TrimEvents",
                                 maxLength=check_int("max_length", max_length, 0))
        return int(reply["data"]["removed"])

    async def compact_memory(self, collect_garbage: bool = False) -> dict[str, int]:
        """Ask the broker to give back memory it keeps past its use; what it freed
        (``retainedResults``, ``heapEntries``, ``bytes``, ``gcObjects``, ``queues``).
        ``collect_garbage`` also runs a full collection in the broker, which holds it
        for a time that grows with the jobs it holds."""
        fields = {"gc": True} if check_flag("collect_garbage", collect_garbage) else {}
        reply = await self._call("CompactMemory", **fields)
        return dict(reply.get("freed") or {})


def _token(token: str | None) -> dict[str, Any]:
    return {} if token is None else {"token": token}


def _span(start: Any, end: Any) -> tuple[int, int]:
    """A slice's ``start`` (an int of at least 0) and inclusive ``end`` (-1: the last)."""
    return check_int("start", start, 0), check_int("end", end, -1)


def _number(key: str) -> int | float:
    value = float(key)
    return int(value) if value.is_integer() else value
