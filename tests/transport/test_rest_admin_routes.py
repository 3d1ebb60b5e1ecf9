"""The cron, webhook, worker and debug REST routes over real HTTP."""

from __future__ import annotations

import httpx

from .rest_client import http_fixture

http = http_fixture()


async def test_crons_upsert_list_get_delete(http: httpx.AsyncClient) -> None:
    made = await http.post("/crons", json={
        "name": "nightly", "queue": "q", "data": {"k": 1}, "repeatEvery": 60_000,
        "ignored": True})
    assert made.status_code == 200 and made.json()["cron"]["name"] == "nightly"
    assert [c["name"] for c in (await http.get("/crons")).json()["crons"]] == ["nightly"]
    got = await http.get("/crons/nightly")
    assert got.status_code == 200 and got.json()["cron"]["repeatEvery"] == 60_000
    assert (await http.get("/crons/none")).status_code == 404
    assert (await http.delete("/crons/nightly")).status_code == 200
    assert (await http.delete("/crons/nightly")).status_code == 400
    refused = await http.post("/crons", json={"name": "bad", "queue": "q"})
    assert refused.status_code == 400  # neither schedule nor repeatEvery
    assert (await http.post("/crons", content=b"{")).status_code == 400


async def test_webhooks_add_list_enable_remove(http: httpx.AsyncClient) -> None:
    added = await http.post("/webhooks", json={
        "url": "https://hooks.example.com/in", "events": ["job.completed"]})
    assert added.status_code == 200, added.text
    hook_id = added.json()["data"]["webhookId"]
    listed = (await http.get("/webhooks")).json()["data"]
    assert [hook["id"] for hook in listed["webhooks"]] == [hook_id]
    disabled = await http.put(f"/webhooks/{hook_id}/enabled", json={"enabled": False})
    assert disabled.status_code == 200
    assert (await http.get("/webhooks")).json()["data"]["webhooks"][0]["enabled"] is False
    assert (await http.put("/webhooks/none/enabled", json={"enabled": True})).status_code == 400
    assert (await http.delete(f"/webhooks/{hook_id}")).status_code == 200
    assert (await http.delete(f"/webhooks/{hook_id}")).status_code == 400
    local = await http.post("/webhooks", json={"url": "http://127.0.0.1/x",
                                               "events": ["job.completed"]})
    assert local.status_code == 400


async def test_workers_register_heartbeat_list_unregister(http: httpx.AsyncClient) -> None:
    made = await http.post("/workers", json={"name": "w", "queues": ["q"],
                                             "concurrency": 4})
    assert made.status_code == 200, made.text
    worker_id = made.json()["data"]["workerId"]
    beat = await http.post(f"/workers/{worker_id}/heartbeat", json={"activeJobs": 2})
    assert beat.status_code == 200 and beat.json()["data"] == {"ok": True}
    # An HTTP worker outlives the request that registered it (HTTP is stateless).
    workers = (await http.get("/workers")).json()["data"]["workers"]
    assert [(w["id"], w["activeJobs"]) for w in workers] == [(worker_id, 2)]
    assert (await http.post("/workers/none/heartbeat", json={})).status_code == 400
    assert (await http.delete(f"/workers/{worker_id}")).status_code == 200
    assert (await http.get("/workers")).json()["data"]["workers"] == []
    assert (await http.delete(f"/workers/{worker_id}")).status_code == 400
    assert (await http.post("/workers", json={"queues": ["q"]})).status_code == 400


async def test_ping_gc_and_heapstats(http: httpx.AsyncClient) -> None:
    ping = await http.get("/ping")
    assert ping.status_code == 200 and ping.json()["data"]["pong"] is True
    assert (await http.post("/gc")).json()["ok"] is True
    heap = (await http.get("/heapstats")).json()
    assert heap["ok"] is True and heap["memory"]["rss"] > 0
    assert len(heap["gc"]["generations"]) == 3
    assert (await http.get("/gc")).status_code == 404  # POST only
