"""The REST calls bunqueue's own WebSocket test scripts make (its job-lifecycle and
queue/DLQ/cron event scripts create and move their jobs over REST, with bodies and
no bodies exactly as they send them), each answered as those scripts expect."""

from __future__ import annotations

import httpx

from .rest_client import http_fixture

http = http_fixture()
Q = "ws-job-events"


async def api(http: httpx.AsyncClient, method: str, path: str,
              body: object = None) -> dict[str, object]:
    """As the scripts' helper: JSON body only when there is one; the reply as JSON."""
    answer = await http.request(method, path, json=body)
    assert answer.status_code == 200, (method, path, answer.text)
    reply: dict[str, object] = answer.json()
    assert reply["ok"] is True, (method, path, reply)
    return reply


async def test_the_job_lifecycle_script_calls(http: httpx.AsyncClient) -> None:
    await api(http, "POST", f"/queues/{Q}/obliterate")
    first = str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 1}}))["id"])
    pulled = await api(http, "GET", f"/queues/{Q}/jobs")
    assert pulled["job"]["id"] == first  # type: ignore[index]
    await api(http, "POST", f"/jobs/{first}/progress", {"progress": 50})
    await api(http, "POST", f"/jobs/{first}/ack", {"result": {"done": True}})
    once = str((await api(http, "POST", f"/queues/{Q}/jobs",
                          {"data": {"x": 1}, "maxAttempts": 1}))["id"])
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "POST", f"/jobs/{once}/fail", {"error": "test failure"})
    removed = str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {}}))["id"])
    await api(http, "DELETE", f"/jobs/{removed}")
    later = str((await api(http, "POST", f"/queues/{Q}/jobs",
                           {"data": {}, "delay": 60000}))["id"])
    await api(http, "POST", f"/jobs/{later}/promote")
    await api(http, "PUT", f"/jobs/{later}/priority", {"priority": 99})
    await api(http, "PUT", f"/jobs/{later}/data", {"data": {"updated": True}})
    await api(http, "POST", f"/jobs/{later}/discard")
    moved = str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {}}))["id"])
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "PUT", f"/jobs/{moved}/delay", {"delay": 5000})
    state = await api(http, "GET", f"/jobs/{moved}/state")
    assert state["state"] == "delayed"


async def test_the_queue_dlq_cron_script_calls(http: httpx.AsyncClient) -> None:
    await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 1}})
    await api(http, "POST", f"/queues/{Q}/pause")
    await api(http, "POST", f"/queues/{Q}/resume")
    await api(http, "POST", f"/queues/{Q}/drain")
    await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 2}})
    cleaned = await api(http, "POST", f"/queues/{Q}/clean", {"grace": 0, "state": "waiting"})
    assert cleaned["count"] == 1
    dead = str((await api(http, "POST", f"/queues/{Q}/jobs",
                          {"data": {"x": 1}, "maxAttempts": 1}))["id"])
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "POST", f"/jobs/{dead}/fail", {"error": "dlq test"})
    assert (await api(http, "POST", f"/queues/{Q}/dlq/retry"))["count"] == 1
    await api(http, "GET", f"/queues/{Q}/jobs")
    await api(http, "POST", f"/jobs/{dead}/fail", {"error": "purge test"})
    assert (await api(http, "POST", f"/queues/{Q}/dlq/purge"))["count"] == 1
    await api(http, "POST", "/crons", {"name": "ws-cron-test", "queue": Q,
                                      "data": {"t": 1}, "repeatEvery": 60000})
    await api(http, "DELETE", "/crons/ws-cron-test")
    await api(http, "POST", f"/queues/{Q}/obliterate")
