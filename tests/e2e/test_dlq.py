"""The dead-letter queue's commands over real TCP, with both codecs (the ``codec``
fixture), their error texts, a restart on the same LMDB directory, and auto-retry on
the broker's own clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.served import served

# on both stores (the representative PostgreSQL run in CI; tests/conftest.py)
pytestmark = pytest.mark.engines("lmdb", "postgres")

DEFAULTS = {"autoRetry": False, "autoRetryInterval": 3_600_000, "maxAutoRetries": 3,
            "maxAge": 604_800_000, "maxEntries": 10_000}
TRACE = ["Traceback (most recent call last):",
         *[f'  File "/lib/x.py", line {i}, in f{i}' for i in range(30)],
         '  File "/app/tasks.py", line 7, in handler',
         "    raise KeyError('who')", "KeyError: 'who'"]


async def bury(client: RawClient, queue: str, error: str = "boom", **fields: Any) -> str:
    """A job of one attempt, pulled and failed: a DLQ entry."""
    pushed = await client.ok("PUSH", queue=queue, name="n", data=fields.pop("data", 1),
                             maxAttempts=1, **fields)
    pulled = await client.ok("PULL", queue=queue, timeout=0)
    assert pulled["job"]["id"] == pushed["id"]
    await client.ok("FAIL", id=pushed["id"], error=error, stack=TRACE)
    return str(pushed["id"])


async def dlq_ids(client: RawClient, queue: str, **msg: Any) -> list[str]:
    reply = await client.ok("Dlq", queue=queue, **msg)
    assert reply["jobs"] == [entry["job"] for entry in reply["entries"]]
    return [job["id"] for job in reply["jobs"]]


async def test_dlq_entries_and_stats(client: RawClient) -> None:
    first = await bury(client, "dl", error="bad address")
    second = await bury(client, "dl")
    discarded = (await client.ok("PUSH", queue="dl", name="n", data=3))["id"]
    await client.ok("Discard", id=discarded)
    reply = await client.ok("Dlq", queue="dl")
    entry = reply["entries"][0]
    assert entry["job"]["id"] == first and entry["job"]["state"] == "failed"
    assert entry["reason"] == "max_attempts_exceeded" and entry["error"] == "bad address"
    assert entry["stack"] == TRACE  # the whole trace, the user's frame and error last
    assert entry["job"]["failedReason"] == "bad address"
    assert entry["retryCount"] == 0 and entry["nextRetryAt"] is None
    assert entry["expiresAt"] == entry["enteredAt"] + DEFAULTS["maxAge"]
    assert [a["attempt"] for a in entry["attempts"]] == [1]
    assert await dlq_ids(client, "dl") == [first, second, discarded]
    assert await dlq_ids(client, "dl", count=1) == [first]
    assert await dlq_ids(client, "dl", filter={"reason": "unknown"}) == [discarded]
    assert await dlq_ids(client, "dl", filter={"offset": 1, "limit": 1}) == [second]
    stats = (await client.ok("GetDlqStats", queue="dl"))["data"]["stats"]
    assert stats["total"] == 3 and stats["byQueue"] == {"dl": 3}
    assert stats["byReason"] == {"max_attempts_exceeded": 2, "unknown": 1}
    assert stats["pendingRetry"] == 0 and stats["expired"] == 0
    assert stats["oldestEntry"] == entry["enteredAt"]
    assert stats["newestEntry"] >= stats["oldestEntry"]
    assert (await client.ok("GetJobCounts", queue="dl"))["counts"]["failed"] == 3
    empty = (await client.ok("GetDlqStats", queue="nothing"))["data"]["stats"]
    assert empty["total"] == 0 and empty["oldestEntry"] is None


async def test_retry_purge_remove(client: RawClient) -> None:
    ids = [await bury(client, "rt") for _ in range(4)]
    assert (await client.ok("RetryDlq", queue="rt", jobId=ids[0]))["count"] == 1
    job = (await client.ok("GetJob", id=ids[0]))["job"]
    assert job["state"] == "waiting" and job["attempts"] == 0
    assert (await client.ok("RetryDlq", queue="rt", jobId=ids[0]))["count"] == 0
    assert (await client.ok("RetryDlq", queue="rt", count=1))["count"] == 1
    assert await dlq_ids(client, "rt") == ids[2:]
    removed = await client.ok("RemoveDlqJob", queue="rt", jobId=ids[2])
    assert removed["data"] == {"removed": True}
    again = await client.ok("RemoveDlqJob", queue="rt", jobId=ids[2])
    assert again["data"] == {"removed": False}
    assert (await client.ok("GetState", id=ids[2]))["state"] == "unknown"
    assert (await client.ok("PurgeDlq", queue="rt"))["count"] == 1
    assert (await client.ok("PurgeDlq", queue="rt"))["count"] == 0
    assert await dlq_ids(client, "rt") == []
    missing = await client.call("RemoveDlqJob", queue="rt")
    assert missing["ok"] is False and missing["error"] == "jobId is required"


async def test_retry_all_skips_an_entry_whose_key_is_held(client: RawClient) -> None:
    keyed = await bury(client, "sk", uniqueKey="order-9")
    plain = await bury(client, "sk")
    holder = await client.ok("PUSH", queue="sk", name="n", data=2, uniqueKey="order-9")
    assert holder["id"] != keyed
    assert (await client.ok("RetryDlq", queue="sk"))["count"] == 1
    assert await dlq_ids(client, "sk") == [keyed]
    assert (await client.ok("GetState", id=plain))["state"] == "waiting"
    custom = await bury(client, "sk2", jobId="order-10")
    assert (await client.ok("RetryDlq", queue="sk2",
                            filter={"reason": "max_attempts_exceeded"}))["count"] == 1
    assert (await client.ok("GetJob", id=custom))["job"]["state"] == "waiting"


async def test_retry_completed(client: RawClient) -> None:
    ids = []
    for i in range(3):
        pushed = await client.ok("PUSH", queue="rc", name="n", data=i)
        await client.ok("PULL", queue="rc", timeout=0)
        await client.ok("ACK", id=pushed["id"], result={"n": i})
        ids.append(pushed["id"])
    assert (await client.ok("RetryCompleted", queue="rc", id=ids[0]))["count"] == 1
    assert (await client.ok("GetState", id=ids[0]))["state"] == "waiting"
    assert "result" not in await client.ok("GetResult", id=ids[0])  # deleted with it
    assert (await client.ok("GetResult", id=ids[1]))["result"] == {"n": 1}
    assert (await client.ok("RetryCompleted", queue="rc", timestamp=0))["count"] == 0
    assert (await client.ok("RetryCompleted", queue="rc", count=5))["count"] == 2
    counts = (await client.ok("GetJobCounts", queue="rc"))["counts"]
    assert counts["waiting"] == 3 and counts["completed"] == 0


async def test_dlq_config(client: RawClient) -> None:
    assert (await client.ok("GetDlqConfig", queue="cf"))["config"] == DEFAULTS
    await client.ok("SetDlqConfig", queue="cf", config={
        "autoRetry": True, "maxAutoRetries": "5", "maxAge": None, "maxEntries": "lots"})
    assert (await client.ok("GetDlqConfig", queue="cf"))["config"] == {
        **DEFAULTS, "autoRetry": True, "maxAutoRetries": 5, "maxAge": None}
    bad = await client.call("SetDlqConfig", queue="cf", config="x")
    assert bad["ok"] is False and bad["error"] == "config must be an object"
    await client.ok("SetDlqConfig", queue="cf", config={"maxEntries": 1})
    first = await bury(client, "cf")
    second = await bury(client, "cf")
    assert await dlq_ids(client, "cf") == [second]  # the oldest evicted
    assert (await client.ok("GetState", id=first))["state"] == "unknown"
    await client.ok("Obliterate", queue="cf")
    assert (await client.ok("GetDlqConfig", queue="cf"))["config"] == DEFAULTS
    assert await dlq_ids(client, "cf") == []


async def test_auto_retry_fires_on_the_queue_timer(client: RawClient) -> None:
    await client.ok("SetDlqConfig", queue="ar", config={
        "autoRetry": True, "autoRetryInterval": 200, "maxAutoRetries": 1})
    job = await bury(client, "ar")
    assert (await client.ok("GetState", id=job))["state"] == "failed"
    with trio.fail_after(5):
        while (await client.ok("GetState", id=job))["state"] != "waiting":
            await trio.sleep(0.02)
    await client.ok("PULL", queue="ar", timeout=0)
    await client.ok("FAIL", id=job, error="again")
    [entry] = (await client.ok("Dlq", queue="ar"))["entries"]
    assert entry["retryCount"] == 1 and entry["nextRetryAt"] is None
    assert entry["lastRetryAt"] is not None


async def test_entries_and_config_survive_a_restart(
    configure: Callable[..., Config],
) -> None:
    config = configure()  # LMDB, in this test's directory
    async with served(config) as client:
        await client.ok("SetDlqConfig", queue="rs", config={"maxEntries": 50})
        ids = [await bury(client, "rs", error=f"e{i}") for i in range(3)]
        only = await bury(client, "dlq-only")  # a queue known by its dead letters alone
    async with served(config) as client:
        assert (await client.ok("GetDlqConfig", queue="rs"))["config"]["maxEntries"] == 50
        reply = await client.ok("Dlq", queue="rs")
        assert [e["job"]["id"] for e in reply["entries"]] == ids
        assert [e["error"] for e in reply["entries"]] == ["e0", "e1", "e2"]
        assert reply["entries"][0]["stack"] == TRACE
        assert await dlq_ids(client, "dlq-only") == [only]
        stats = (await client.ok("GetDlqStats", queue="rs"))["data"]["stats"]
        assert stats["total"] == 3
        assert (await client.ok("RetryDlq", queue="rs"))["count"] == 3


async def test_dlq_events(connect: Callable[..., Any]) -> None:
    listener: RawClient = await connect()
    client: RawClient = await connect()
    await listener.ok("SubscribeEvents", queue="ev")
    job = await bury(client, "ev", error="bad")
    await client.ok("RetryDlq", queue="ev", jobId=job)
    await client.ok("Discard", id=job)
    await client.ok("RetryDlq", queue="ev")
    await client.ok("Discard", id=job)
    await client.ok("PurgeDlq", queue="ev")
    await client.ok("SetDlqConfig", queue="ev", config={"maxEntries": 5})
    await client.ok("Ping")
    seen: list[dict[str, Any]] = []
    with trio.fail_after(5):
        while not any(e["eventType"] == "dlq-config-changed" for e in seen):
            if listener.events:
                seen.append(listener.events.pop(0))
                continue
            msg = await listener.receive()
            if msg.get("type") == "event":
                seen.append(msg["event"])
    dlq = [e for e in seen if e["eventType"].startswith("dlq-")]
    assert [e["eventType"] for e in dlq] == [
        "dlq-added", "dlq-retried", "dlq-added", "dlq-retry-all", "dlq-added",
        "dlq-purged", "dlq-config-changed"]
    assert dlq[0]["jobId"] == job and dlq[0]["reason"] == "max_attempts_exceeded"
    assert dlq[0]["error"] == "bad"
    assert dlq[3]["count"] == 1 and dlq[5]["count"] == 1
    assert dlq[6]["config"]["maxEntries"] == 5
