"""Webhooks from a :class:`~trioqueue.client.Queue`: the broker POSTs job events to a URL.

Webhooks are the broker's, not the queue's: ``queue=None`` watches every queue, and
:meth:`QueueWebhooks.list_webhooks` lists them all, whichever queue asks. They are on
Queue because that is where bunqueue's clients have them (there is no other handle a
producer holds). Events: ``job.pushed``, ``job.started``, ``job.completed``,
``job.failed`` (final failures only), ``job.progress``; see docs/protocol.md,
"Webhooks", for the payload, the signature and the retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .errors import CommandError, ValidationError
from .queue_commands import QueueCommands

_NOT_FOUND = "Webhook not found"


class QueueWebhooks(QueueCommands):
    """Mixed into :class:`~trioqueue.client.Queue`."""

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
            if exc.message == _NOT_FOUND:
                return False
            raise
        return True
