"""The webhook registry: who wants which job events, and what each delivery payload is.

Sans-IO, owned by the router (broker-wide, like the workers registry). The commands
(:mod:`..commands.webhooks`) change it and return the broker records to commit; the
delivery component (:mod:`trioqueue.actors.webhook_delivery`) asks it which webhooks an
event goes to and counts each delivery's outcome on the webhook.

Cheap for queues nobody watches: :meth:`WebhookRegistry.watches` is a dict lookup and a
counter, read once per queue step to decide whether that queue builds events at all.
The counters (``successCount``, ``failureCount``, ``lastTriggered``, ``droppedCount``)
live in memory only: a restart brings the webhooks back with counters at 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..ids import uuid7

RECORD_KIND = "webhook"  # the broker records' kind (Writes.put_broker_record)

# The job event types a webhook can ask for, by the queue event they come from.
EVENT_NAMES = {
    "pushed": "job.pushed",
    "pulled": "job.started",
    "completed": "job.completed",
    "failed": "job.failed",
    "progress": "job.progress",
}
WEBHOOK_EVENTS = frozenset(EVENT_NAMES.values())


@dataclass(slots=True, eq=False)
class Webhook:
    id: str
    url: str
    events: list[str]
    queue: str | None
    secret: str | None
    created_at: int
    enabled: bool = True
    # counted in memory by the deliveries (not persisted)
    last_triggered: int | None = None
    success_count: int = 0
    failure_count: int = 0
    dropped_count: int = 0  # events dropped because the webhook's buffer was full

    def record(self) -> dict[str, Any]:
        """What the store keeps of it (the secret included: deliveries sign with it)."""
        return {"id": self.id, "url": self.url, "events": list(self.events),
                "queue": self.queue, "secret": self.secret, "createdAt": self.created_at,
                "enabled": self.enabled}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Webhook:
        return cls(id=record["id"], url=record["url"], events=list(record["events"]),
                   queue=record.get("queue"), secret=record.get("secret"),
                   created_at=int(record["createdAt"]),
                   enabled=bool(record.get("enabled", True)))

    def wire(self) -> dict[str, Any]:
        """ListWebhooks' entry (never the secret)."""
        return {"id": self.id, "url": self.url, "events": list(self.events),
                "queue": self.queue, "createdAt": self.created_at,
                "lastTriggered": self.last_triggered, "successCount": self.success_count,
                "failureCount": self.failure_count, "enabled": self.enabled,
                "droppedCount": self.dropped_count}


class WebhookRegistry:
    def __init__(self) -> None:
        self.hooks: dict[str, Webhook] = {}
        # enabled webhooks per watched queue (None: every queue), kept as hooks change
        self._watching: dict[str | None, list[Webhook]] = {}
        # Set by the broker: the delivery component forgets a removed webhook's buffer
        # and task (a callable, so the core stays free of I/O).
        self.on_removed: Callable[[str], None] | None = None
        # The broker's flag (webhook_allow_private): private addresses allowed (dev).
        self.allow_private = False
        # Changes made by this broker's commands (a cluster's reload from the table
        # that one overtook is not applied: cluster/webhooks.py)
        self.changes = 0

    # ------------------------------------------------------------------ changes

    def new(self, url: str, events: list[str], queue: str | None, secret: str | None,
            now: int) -> Webhook:
        hook = Webhook(id=uuid7(now), url=url, events=events, queue=queue, secret=secret,
                       created_at=now)
        self.put(hook)
        return hook

    def put(self, hook: Webhook) -> None:
        self.hooks[hook.id] = hook
        self.changes += 1
        self._reindex()

    def remove(self, hook_id: str) -> Webhook | None:
        hook = self._drop(hook_id)
        if hook is not None:
            self.changes += 1
            self._reindex()
        return hook

    def _drop(self, hook_id: str) -> Webhook | None:
        hook = self.hooks.pop(hook_id, None)
        if hook is not None and self.on_removed is not None:
            self.on_removed(hook_id)
        return hook

    def set_enabled(self, hook: Webhook, enabled: bool) -> None:
        hook.enabled = enabled
        self.changes += 1
        self._reindex()

    def replace(self, records: Iterable[dict[str, Any]]) -> None:
        """The webhooks become the stored ones (a cluster's reload, after another
        broker changed them): one still stored keeps its object (its delivery task
        and counters) and takes the stored ``enabled``; one no longer stored is
        removed (its deliveries stop); a new one is added."""
        stored = {record["id"]: record for record in records}
        for hook_id in [h for h in self.hooks if h not in stored]:
            self._drop(hook_id)
        for hook_id, record in stored.items():
            hook = self.hooks.get(hook_id)
            if hook is None:
                self.hooks[hook_id] = Webhook.from_record(record)
            else:
                hook.enabled = bool(record.get("enabled", True))
        self._reindex()

    def load(self, records: Iterable[dict[str, Any]]) -> None:
        """The webhooks the store kept (at startup)."""
        for record in records:
            hook = Webhook.from_record(record)
            self.hooks[hook.id] = hook
        self._reindex()

    def _reindex(self) -> None:
        # Changes are rare (commands), lookups are per queue step: rebuild on change.
        watching: dict[str | None, list[Webhook]] = {}
        for hook in self.hooks.values():
            if hook.enabled:
                watching.setdefault(hook.queue, []).append(hook)
        self._watching = watching

    # ------------------------------------------------------------------ lookups

    def get(self, hook_id: str) -> Webhook | None:
        return self.hooks.get(hook_id)

    def watches(self, queue: str) -> bool:
        """Whether any enabled webhook wants events of ``queue``."""
        watching = self._watching
        return bool(watching) and (None in watching or queue in watching)

    def matching(self, queue: str, event: str) -> list[Webhook]:
        """The enabled webhooks ``event`` of ``queue`` goes to."""
        hooks = self._watching.get(None, []) + self._watching.get(queue, [])
        return [hook for hook in hooks if event in hook.events]

    def stats(self) -> dict[str, int]:
        return {"total": len(self.hooks),
                "enabled": sum(1 for hook in self.hooks.values() if hook.enabled)}


def webhook_payload(event: dict[str, Any]) -> dict[str, Any] | None:
    """The delivery payload of a queue event, or None when no webhook event maps to it.

    ``{event, timestamp, jobId, queue, data?, error?, progress?}`` as bunqueue sends.
    ``failed`` maps to ``job.failed`` only when it ends the job (not when a retry
    follows: that job is still going); a failure with no ``terminal`` flag is final.
    """
    kind = event.get("eventType")
    name = EVENT_NAMES.get(kind) if isinstance(kind, str) else None
    if name is None:
        return None
    payload: dict[str, Any] = {"event": name, "timestamp": int(event["timestamp"]),
                               "jobId": event["jobId"], "queue": event["queue"]}
    if kind == "completed":
        if event.get("data") is not None:
            payload["data"] = event["data"]
    elif kind == "failed":
        if event.get("terminal") is False:
            return None
        if event.get("error") is not None:
            payload["error"] = event["error"]
    elif kind == "progress":
        payload["progress"] = event.get("progress")
    return payload
