"""What the dead-letter methods of :class:`~trioqueue.client.Queue` send and return:
a DLQ filter and config in bunqueue's names, and :class:`DlqEntry`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import ValidationError
from .job import Job
from .options import check_flag, check_int

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


def filter_wire(options: dict[str, Any]) -> dict[str, Any]:
    """A DLQ filter's Python options as bunqueue's ``filter`` map."""
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


def config_wire(config: dict[str, Any]) -> dict[str, Any]:
    """``set_dlq_config``'s Python options as bunqueue's config fields."""
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
    return wire


def entry(queue: Queue, raw: dict[str, Any]) -> DlqEntry:
    return DlqEntry(
        job=Job(queue, raw["job"]), reason=raw["reason"], error=raw.get("error"),
        entered_at=int(raw["enteredAt"]), attempts=list(raw.get("attempts") or ()),
        retry_count=int(raw.get("retryCount", 0)),
        last_retry_at=_ms(raw.get("lastRetryAt")),
        next_retry_at=_ms(raw.get("nextRetryAt")), expires_at=_ms(raw.get("expiresAt")),
        stack=raw.get("stack"))
