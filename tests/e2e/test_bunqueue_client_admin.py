"""bunqueue's published Python client's admin calls (DLQ, limits, schedulers, webhooks,
queues, clean) work against us unchanged: issues 14 and 15 as a bunqueue user meets
them. The client is synchronous; it runs in a worker thread."""

from __future__ import annotations

from typing import Any

import trio
from bunqueue import Queue

from trioqueue.server.run import Server
from trioqueue.testing import RawClient


def _admin(port: int) -> dict[str, Any]:
    queue = Queue("bq-admin", host="127.0.0.1", port=port)
    out: dict[str, Any] = {}
    try:
        # the dead-letter queue: a job of one attempt failed over the raw protocol
        job = queue.add("n", {"i": 1}, attempts=1)
        pulled = queue.connection.call({"cmd": "PULL", "queue": "bq-admin"})
        queue.connection.call({"cmd": "FAIL", "id": pulled["job"]["id"], "error": "boom"})
        out["dlq"] = queue.get_dlq()
        queue.set_dlq_config({"maxEntries": 5})
        out["dlq_config"] = queue.get_dlq_config()
        out["retried"] = queue.retry_dlq(job.id)
        out["state_after_retry"] = queue.get_state(job.id)
        # limits
        queue.set_global_concurrency(2)
        queue.set_global_rate_limit(10, 1000)
        out["limits"] = queue.connection.call(
            {"cmd": "GetQueueLimits", "queue": "bq-admin"})["data"]["limits"]
        queue.remove_global_concurrency()
        queue.remove_global_rate_limit()
        # schedulers
        queue.upsert_job_scheduler("every-hour", {"every": 3_600_000},
                                   {"name": "tick", "data": {"k": 1},
                                    "opts": {"attempts": 2}})
        queue.add_cron("nightly", "0 2 * * *", {"x": 1}, tz="Europe/Rome")
        out["scheduler"] = queue.get_job_scheduler("every-hour")
        out["schedulers"] = sorted(s["name"] for s in queue.get_job_schedulers())
        queue.remove_job_scheduler("every-hour")
        out["gone"] = queue.get_job_scheduler("every-hour")
        # webhooks
        hook = queue.add_webhook("https://example.com/hook", ["job.completed"],
                                 queue="bq-admin", secret="s")
        queue.set_webhook_enabled(hook, False)  # type: ignore[arg-type]
        out["webhooks"] = queue.list_webhooks()
        queue.remove_webhook(hook)  # type: ignore[arg-type]
        out["webhooks_after"] = queue.list_webhooks()
        # queues and cleaning
        out["queues"] = queue.list_queues()
        queue.add("old", {"i": 2})
        out["cleaned"] = queue.clean(0)
    finally:
        queue.close()
    return out


async def test_bunqueue_python_client_admin_calls(server: Server) -> None:
    assert server.tcp_port is not None
    with trio.fail_after(60):
        out = await trio.to_thread.run_sync(_admin, server.tcp_port)
    [dead] = out["dlq"]
    assert dead["data"] == {"i": 1}
    assert out["dlq_config"]["maxEntries"] == 5
    assert (out["retried"], out["state_after_retry"]) == (1, "waiting")
    assert out["limits"]["concurrencyLimit"] == 2
    assert out["limits"]["rateLimit"] == {"max": 10, "duration": 1000}
    scheduler = out["scheduler"]
    assert (scheduler["name"], scheduler["queue"], scheduler["repeatEvery"]) == (
        "every-hour", "bq-admin", 3_600_000)
    assert out["schedulers"] == ["every-hour", "nightly"] and out["gone"] is None
    [hook] = out["webhooks"]
    assert (hook["url"], hook["events"], hook["enabled"]) == (
        "https://example.com/hook", ["job.completed"], False)
    assert out["webhooks_after"] == []
    assert "bq-admin" in out["queues"]
    assert out["cleaned"] >= 1  # the retried job and the new one, both waiting
    client = await RawClient.connect(server.tcp_port)
    counts = (await client.ok("GetJobCounts", queue="bq-admin"))["counts"]
    assert counts["waiting"] == 0
    await client.aclose()
