"""Queue's webhook methods over every mode (TCP and embedded, LMDB and memory)."""

from __future__ import annotations

import pytest

from trioqueue.client import CommandError, Connection, Queue, ValidationError

pytestmark = pytest.mark.anyio


async def test_webhook_round_trip(conn: Connection) -> None:
    queue = Queue("wh-orders", conn)
    added = await queue.add_webhook("https://example.com/hook", ["job.completed"],
                                    queue="wh-orders", secret="s")
    assert added["url"] == "https://example.com/hook" and added["queue"] == "wh-orders"
    assert added["events"] == ["job.completed"] and added["createdAt"] > 0
    every = await queue.add_webhook("https://example.com/all", ("job.pushed", "job.failed"))
    assert every["queue"] is None
    listed = {hook["id"]: hook for hook in await queue.list_webhooks()}
    assert set(listed) == {added["webhookId"], every["webhookId"]}
    entry = listed[added["webhookId"]]
    assert entry["enabled"] is True and entry["successCount"] == 0
    assert "secret" not in entry
    assert await queue.set_webhook_enabled(added["webhookId"], False) is True
    assert {h["id"]: h["enabled"] for h in await queue.list_webhooks()} == {
        added["webhookId"]: False, every["webhookId"]: True}
    assert await queue.remove_webhook(added["webhookId"]) is True
    assert await queue.remove_webhook(added["webhookId"]) is False
    assert await queue.set_webhook_enabled(added["webhookId"], True) is False
    # another queue's handle sees the same (broker-wide) webhooks
    assert [h["id"] for h in await Queue("wh-other", conn).list_webhooks()] == [
        every["webhookId"]]
    assert await queue.remove_webhook(every["webhookId"]) is True


async def test_webhook_refusals(conn: Connection) -> None:
    queue = Queue("wh-bad", conn)
    with pytest.raises(ValidationError, match="must not target localhost"):
        await queue.add_webhook("http://127.0.0.1:8080/hook", ["job.pushed"])
    with pytest.raises(ValidationError, match="must use http or https"):
        await queue.add_webhook("ftp://example.com/x", ["job.pushed"])
    with pytest.raises(CommandError, match="Invalid webhook event: job.stalled"):
        await queue.add_webhook("https://example.com/x", ["job.stalled"])
    with pytest.raises(ValidationError, match="events must be a list"):
        await queue.add_webhook("https://example.com/x", "job.pushed")
    assert await queue.list_webhooks() == []
