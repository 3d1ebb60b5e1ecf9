"""Job groups of a :class:`~trioqueue.client.Queue` (BullMQ Pro's group methods, in
snake_case): counts, per-group pause, concurrency and rate limits. A job joins a group
with ``add(..., group_id="tenant-1")``; the broker hands out the queue's groups round
robin, ungrouped jobs first, and within a group lower ``priority`` first."""

from __future__ import annotations

from typing import Any

from .options import check_int
from .queue_commands import QueueCommands


class QueueGroups(QueueCommands):
    """Mixed into :class:`~trioqueue.client.Queue`."""

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
