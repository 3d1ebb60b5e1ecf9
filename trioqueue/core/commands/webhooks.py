"""AddWebhook, RemoveWebhook, ListWebhooks and SetWebhookEnabled: broker commands.

Answered by the router with its :class:`~..webhooks.WebhookRegistry`. The three that
change a webhook return :class:`~..committed.Committed`: the webhook's broker record
(kind ``webhook``) is written, and the reply leaves once it is committed. The registry
is changed at once, before the commit: the router runs on the one trio thread, so no
command can see the change before its reply but those of the same batch, and a failed
commit stops the broker (as for every write).
"""

from __future__ import annotations

from typing import Any, Protocol

from .. import fields
from ..broker_events import broker_event
from ..committed import Committed
from ..errors import Refused
from ..webhooks.registry import RECORD_KIND, WEBHOOK_EVENTS, Webhook, WebhookRegistry
from ..webhooks.urls import check_url
from ..writes import Writes

Reply = dict[str, Any]
NOT_FOUND = "Webhook not found"


class WebhookScope(Protocol):
    """What these handlers use of the router (maintenance.BrokerScope's part)."""

    @property
    def webhooks(self) -> WebhookRegistry: ...


def _registry(scope: WebhookScope) -> WebhookRegistry:
    return scope.webhooks


def _events(value: Any) -> list[str]:
    events = fields.str_list(value, "events")
    if not events:
        raise Refused("events must be a non-empty array")
    for event in events:
        if event not in WEBHOOK_EVENTS:
            raise Refused(f"Invalid webhook event: {event}")
    return list(dict.fromkeys(events))  # each once, in the order given


def _stored(hook: Webhook | None, hook_id: str) -> Writes:
    writes = Writes()
    writes.put_broker_record(RECORD_KIND, hook_id, None if hook is None else hook.record())
    return writes


def add_webhook(scope: WebhookScope, msg: dict[str, Any], now: int, conn: Any) -> Committed:
    registry = _registry(scope)
    url = check_url(msg.get("url"), allow_private=registry.allow_private)
    events = _events(msg.get("events"))
    queue = msg.get("queue")
    queue = None if queue is None else fields.queue_name(queue)
    secret = fields.optional_str(msg.get("secret"), "secret") or None
    hook = registry.new(url, events, queue, secret, now)
    reply = {"data": {"webhookId": hook.id, "url": hook.url, "events": list(hook.events),
                      "queue": hook.queue, "createdAt": hook.created_at}}
    return Committed(reply, _stored(hook, hook.id), (broker_event(
        "webhook:added", now, id=hook.id, url=hook.url, events=list(hook.events)),))


def _hook_id(msg: dict[str, Any], field: str) -> str:
    hook_id = msg.get(field)
    if not isinstance(hook_id, str) or not hook_id:
        raise Refused(f"{field} is required")
    return hook_id


def remove_webhook(scope: WebhookScope, msg: dict[str, Any], now: int, conn: Any) -> Committed:
    hook_id = _hook_id(msg, "webhookId")
    if _registry(scope).remove(hook_id) is None:
        raise Refused(NOT_FOUND)
    return Committed({"data": {"removed": True}}, _stored(None, hook_id),
                     (broker_event("webhook:removed", now, id=hook_id),))


def set_webhook_enabled(scope: WebhookScope, msg: dict[str, Any], now: int, conn: Any) -> Committed:
    hook_id = _hook_id(msg, "id")
    enabled = msg.get("enabled")
    if not isinstance(enabled, bool):
        raise Refused("enabled must be a boolean")
    registry = _registry(scope)
    hook = registry.get(hook_id)
    if hook is None:
        raise Refused(NOT_FOUND)
    registry.set_enabled(hook, enabled)
    name = "webhook:enabled" if enabled else "webhook:disabled"
    return Committed({}, _stored(hook, hook_id),
                     (broker_event(name, now, webhookId=hook_id),))


def list_webhooks(scope: WebhookScope, msg: dict[str, Any], now: int, conn: Any) -> Reply:
    registry = _registry(scope)
    return {"data": {"webhooks": [hook.wire() for hook in registry.hooks.values()],
                     "stats": registry.stats()}}
