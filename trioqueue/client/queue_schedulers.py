"""Job schedulers of a :class:`~trioqueue.client.Queue`, in BullMQ's shape
(``upsertJobScheduler``, ...) over bunqueue's ``Cron`` commands: a schedule that pushes
a job into this queue at every slot of a cron pattern or every N milliseconds, kept by
the broker (it survives restarts and fires with no client connected)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.repeating.crons import JOB_OPTIONS  # the job options a schedule passes on
from .errors import CommandError
from .options import check_flag, check_int, job_options
from .queue_commands import QueueCommands


class QueueSchedulers(QueueCommands):
    """Mixed into :class:`~trioqueue.client.Queue`."""

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
        fields.update(_template(template or {}))
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


def _template(template: Mapping[str, Any]) -> dict[str, Any]:
    unknown = set(template) - {"name", "data", "opts"}
    if unknown:
        raise ValueError(f"template takes name, data and opts, not {sorted(unknown)}")
    fields: dict[str, Any] = {}
    if template.get("name") is not None:
        fields["jobName"] = template["name"]
    if "data" in template:
        fields["data"] = template["data"]
    opts = job_options(dict(template.get("opts") or {}))
    if "priority" in opts:
        fields["priority"] = opts.pop("priority")
    passed = {k: v for k, v in opts.items() if k in JOB_OPTIONS}
    if len(passed) != len(opts):
        raise ValueError(f"a schedule's jobs take only {', '.join(JOB_OPTIONS)} and "
                         f"priority, not {sorted(set(opts) - set(passed))}")
    if passed:
        fields["jobOptions"] = passed
    return fields

