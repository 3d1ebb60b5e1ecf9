"""The queue-wide limits of a :class:`~trioqueue.client.Queue` (BullMQ's global rate
limit and concurrency, in snake_case): they bind every worker of the queue together,
because the broker applies them where jobs are leased."""

from __future__ import annotations

from typing import Any

from .options import check_int
from .queue_commands import QueueCommands


class QueueLimits(QueueCommands):
    """Mixed into :class:`~trioqueue.client.Queue`."""

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


__all__ = ["QueueLimits"]
