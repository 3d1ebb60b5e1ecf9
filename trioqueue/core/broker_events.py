"""Dashboard events of the broker's own state: cron schedules, webhooks, workers.

bunqueue tells its WebSocket pattern subscribers and SSE streams when a schedule, a
webhook or a worker registration changes (``cron:created``, ``worker:connected``...).
These events belong to no queue, so they carry no ``queue`` and reach every such
subscriber whatever its path's queue; their type is the name subscribers know them by
(a colon in it keeps them from SubscribeEvents, legacy WebSocket clients and webhooks).
"""

from __future__ import annotations

from typing import Any


def broker_event(event_type: str, now: int, /, **data: Any) -> dict[str, Any]:
    return {"eventType": event_type, "timestamp": float(now), **data}
