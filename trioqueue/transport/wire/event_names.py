"""The names live subscribers (WebSocket, SSE) know events by, and their patterns.

Queue actors publish events by an internal type (``pulled``, ``dlq-added``...);
bunqueue's WebSocket and SSE clients know them as ``family:name`` (``job:active``,
``dlq:added``) and subscribe with patterns: an exact name, ``family:*`` or ``*``.
"""

from __future__ import annotations

from typing import Any

# Internal event types and the names WebSocket subscribers know them by.
EVENT_NAMES = {
    "pushed": "job:pushed", "pulled": "job:active", "completed": "job:completed",
    "failed": "job:failed", "progress": "job:progress", "stalled": "job:stalled",
    "removed": "job:removed", "delayed": "job:delayed", "duplicated": "job:deduplicated",
    "retried": "job:retried", "waiting-children": "job:waiting-children",
    "waiting": "job:waiting", "paused": "queue:paused", "resumed": "queue:resumed",
    "drained": "queue:drained",
    # the dead-letter queue's (core/queue/dlq.py, dlq_work.py)
    "dlq-added": "dlq:added", "dlq-retried": "dlq:retried", "dlq-retry-all": "dlq:retry-all",
    "dlq-purged": "dlq:purged", "dlq-auto-retried": "dlq:auto-retried",
    "dlq-expired": "dlq:expired", "dlq-config-changed": "config:dlq-changed",
    # the queue's limits (core/queue/limits.py) and Clean (core/queue/cleaning.py)
    "ratelimit-set": "ratelimit:set", "ratelimit-cleared": "ratelimit:cleared",
    "concurrency-set": "concurrency:set", "concurrency-cleared": "concurrency:cleared",
    "cleaned": "queue:cleaned",
}
EVENT_FAMILIES = frozenset({
    "job", "queue", "dlq", "flow", "cron", "worker", "ratelimit", "concurrency", "webhook",
    "batch", "client", "auth", "health", "stats", "storage", "server", "config",
})


def valid_pattern(pattern: Any) -> bool:
    if not isinstance(pattern, str):
        return False
    if pattern == "*":
        return True
    family, _, name = pattern.partition(":")
    return family in EVENT_FAMILIES and bool(name) and ":" not in name


def parse_patterns(events: Any, *, unsubscribing: bool = False) -> list[str]:
    """The patterns of a ``Subscribe``/``Unsubscribe`` (or an SSE ``events`` query),
    or :class:`ValueError` with the error text. An empty list unsubscribes from all."""
    if not isinstance(events, list) or (not events and not unsubscribing):
        raise ValueError("events must be a non-empty array")
    bad = [str(p) for p in events if not valid_pattern(p)]
    if bad:
        raise ValueError(f"Invalid: {', '.join(bad)}")
    return list(dict.fromkeys(events))


def matches(name: str, patterns: list[str]) -> bool:
    family = name.partition(":")[0]
    return any(p == "*" or p == name or p == f"{family}:*" for p in patterns)


def event_data(event: dict[str, Any]) -> dict[str, Any]:
    """The ``data`` of a subscriber's frame: the event without its internal type."""
    return {k: v for k, v in event.items() if k != "eventType"}


def is_dashboard(event: dict[str, Any]) -> bool:
    """A dashboard event (``job:promoted``, ``worker:connected``...): its internal type
    is already its subscribers' name. Only pattern subscribers and SSE get those."""
    return ":" in event["eventType"]


def event_name(event: dict[str, Any]) -> str:
    """The subscriber's name of an internal event."""
    kind = event["eventType"]
    if ":" in kind:
        return str(kind)
    return EVENT_NAMES.get(kind, f"job:{kind}")
