"""The dead-letter queue's admin methods of :class:`~trioqueue.client.Queue` (a mixin:
``Queue`` takes it as a base), in BullMQ's snake_case style over bunqueue's DLQ
commands."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from .errors import ValidationError
from .job import Job
from .options import check_flag, check_int, check_ms
from .queue_commands import QueueCommands

if TYPE_CHECKING:
    from .queue import Queue

# Python name -> bunqueue's name in the ``filter`` map
_FILTER = {"reason": "reason", "older_than": "olderThan", "newer_than": "newerThan",
           "retriable": "retriable", "expired": "expired", "limit": "limit",
           "offset": "offset"}
_CONFIG = {"auto_retry": "autoRetry", "auto_retry_interval": "autoRetryInterval",
           "max_auto_retries": "maxAutoRetries", "max_age": "maxAge",
           "max_entries": "maxEntries"}


@dataclass
class DlqEntry:
    """One dead-lettered job with why and when (bunqueue's DlqEntry). ``stack`` is the
    whole trace of the attempt that failed it (``job.stacktrace`` too)."""

    job: Job
    reason: str
    error: str | None
    entered_at: int
    attempts: list[dict[str, Any]]
    retry_count: int
    last_retry_at: int | None
    next_retry_at: int | None
    expires_at: int | None
    stack: list[str] | None


def _ms(value: Any) -> int | None:
    return None if value is None else int(value)


def _filter(options: dict[str, Any]) -> dict[str, Any]:
    unknown = set(options) - set(_FILTER)
    if unknown:
        raise ValidationError(f"unknown DLQ filter: {sorted(unknown)[0]}")
    wire: dict[str, Any] = {}
    for name, value in options.items():
        if value is None:
            continue
        if name == "reason":
            if not isinstance(value, str):
                raise ValidationError(f"reason must be a string, not {value!r}")
        elif name in ("retriable", "expired"):
            value = check_flag(name, value)
        else:
            value = check_int(name, value, 0)
        wire[_FILTER[name]] = value
    return wire


class DlqMethods(QueueCommands):
    """``get_dlq``, ``get_dlq_stats``, ``retry_dlq``, ``purge_dlq``, ``remove_dlq_job``,
    ``retry_completed``, ``set_dlq_config``, ``get_dlq_config``."""


    async def get_dlq(self, count: int | None = None,
                      **filter: Any) -> list[DlqEntry]:
        """The entries, oldest first: ``count`` of them (100 by default), or those the
        filter keeps (``reason``, ``older_than`` / ``newer_than`` epoch ms,
        ``retriable``, ``expired``, ``limit``, ``offset``)."""
        fields: dict[str, Any] = {"queue": self.name}
        if count is not None:
            fields["count"] = check_int("count", count, 0)
        if filter:
            fields["filter"] = _filter(filter)
        reply = await self._call("Dlq", **fields)
        return [_entry(cast("Queue", self), raw) for raw in reply["entries"]]

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
            fields["filter"] = _filter(filter)
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
        unknown = set(config) - set(_CONFIG)
        if unknown:
            raise ValidationError(f"unknown DLQ option: {sorted(unknown)[0]}")
        wire: dict[str, Any] = {}
        for name, value in config.items():
            if name == "auto_retry":
                value = check_flag(name, value)
            elif not (name == "max_age" and value is None):
                value = check_int(name, value, 0)
            wire[_CONFIG[name]] = value
        await self._queue_call("SetDlqConfig", config=wire)

    async def get_dlq_config(self) -> dict[str, Any]:
        """The config by bunqueue's names (``autoRetry``, ``autoRetryInterval``, ...)."""
        return dict((await self._queue_call("GetDlqConfig"))["config"])


def _entry(queue: Queue, raw: dict[str, Any]) -> DlqEntry:
    return DlqEntry(
        job=Job(queue, raw["job"]), reason=raw["reason"], error=raw.get("error"),
        entered_at=int(raw["enteredAt"]), attempts=list(raw.get("attempts") or ()),
        retry_count=int(raw.get("retryCount", 0)),
        last_retry_at=_ms(raw.get("lastRetryAt")),
        next_retry_at=_ms(raw.get("nextRetryAt")), expires_at=_ms(raw.get("expiresAt")),
        stack=raw.get("stack"))
