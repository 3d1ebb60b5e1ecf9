"""bunqueue's dashboard event stream (reference section 7.3), over a real WebSocket and
SSE: each event triggered by its real action (a REST call as bunqueue's WebSocket event
scripts make them, a TCP command, a cron firing, a worker registering), received with
the payload fields the reference gives."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.webhook_receiver import WebhookReceiver

from ..transport.test_sse import SseReader

StartServer = Callable[..., Any]
Q = "ws-test-events"
DEADLINE_S = 5


class Subscriber:
    """A WebSocket subscribed to patterns; its event frames, waited for by name."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.seen: list[dict[str, Any]] = []  # every frame read, in order

    async def subscribe(self, *patterns: str) -> None:
        await self.ws.send_message(json.dumps({"cmd": "Subscribe", "events": list(patterns),
                                               "reqId": "sub"}))
        assert (await self.reply("sub"))["ok"] is True

    async def reply(self, req_id: str) -> dict[str, Any]:
        with trio.fail_after(DEADLINE_S):
            while True:
                frame = json.loads(await self.ws.get_message())
                self.seen.append(frame)
                if frame.get("reqId") == req_id:
                    return dict(frame)

    async def until(self, name: str) -> dict[str, Any]:
        with trio.fail_after(DEADLINE_S):
            while True:
                frame = json.loads(await self.ws.get_message())
                self.seen.append(frame)
                if frame.get("event") == name:
                    assert isinstance(frame["ts"], float)
                    data: dict[str, Any] = frame["data"]
                    return data


async def broker(start_server: StartServer, **overrides: Any) -> tuple[Server, RawClient]:
    server: Server = await start_server(memory=True, **overrides)
    assert server.tcp_port is not None
    return server, await RawClient.connect(server.tcp_port)


def http_client(server: Server) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}", timeout=10)


async def api(http: httpx.AsyncClient, method: str, path: str,
              body: object = None) -> dict[str, Any]:
    """As bunqueue's scripts call the REST API: a JSON body only when there is one."""
    answer = await http.request(method, path, json=body)
    reply: dict[str, Any] = answer.json()
    assert answer.status_code == 200 and reply["ok"] is True, (method, path, reply)
    return reply


async def push(http: httpx.AsyncClient, **opts: Any) -> str:
    return str((await api(http, "POST", f"/queues/{Q}/jobs", {"data": {"x": 1}, **opts}))["id"])


def ws_url(server: Server, path: str = "/ws") -> str:
    return f"ws://127.0.0.1:{server.ws_port}{path}"


async def test_job_events_of_rest_and_tcp_moves(start_server: StartServer) -> None:
    server, tcp = await broker(start_server)
    assert server.tcp_port is not None
    listener = await RawClient.connect(server.tcp_port)  # (SubscribeEvents: no such event)
    await listener.ok("SubscribeEvents", queue=Q)
    async with open_websocket_url(ws_url(server)) as ws, http_client(server) as http:
        sub = Subscriber(ws)
        await sub.subscribe("*")
        later = await push(http, delay=60000)
        await api(http, "POST", f"/jobs/{later}/promote")
        assert (await sub.until("job:promoted"))["jobId"] == later

        active = (await api(http, "GET", f"/queues/{Q}/jobs"))["job"]["id"]  # (the promoted)
        await api(http, "POST", f"/jobs/{active}/progress", {"progress": 50})
        progress = await sub.until("job:progress")
        assert progress["jobId"] == active and progress["progress"] == 50

        later = await push(http)

        await api(http, "PUT", f"/jobs/{later}/priority", {"priority": 99})
        changed = await sub.until("job:priority-changed")
        assert changed["jobId"] == later and changed["newPriority"] == 99
        await api(http, "PUT", f"/jobs/{later}/data", {"data": {"updated": True}})
        assert (await sub.until("job:data-updated"))["jobId"] == later
        await api(http, "PUT", f"/jobs/{active}/delay", {"delay": 5000})
        delayed = await sub.until("job:delay-changed")
        assert delayed["jobId"] == active and delayed["newDelay"] == 5000
        await api(http, "POST", f"/jobs/{later}/discard")
        discarded = await sub.until("job:discarded")
        assert discarded["jobId"] == later and discarded["queue"] == Q

        other = (await tcp.ok("PUSH", queue=Q, name="n"))["id"]
        pulled = await tcp.ok("PULL", queue=Q, owner="w")
        assert pulled["job"]["id"] == other
        await tcp.ok("MoveToDelayed", id=other, delay=1000, token=pulled["token"])
        moved = await sub.until("job:moved-to-delayed")
        assert moved["jobId"] == other and moved["delay"] == 1000
    # SubscribeEvents (and a WebSocket that never subscribed) get bunqueue's job events
    # only, as before: none of these dashboard events.
    await listener.call("Ping")
    kinds = [e["event"]["eventType"] for e in listener.events]
    assert "progress" in kinds and [k for k in kinds if ":" in k] == []


async def test_queue_events_of_drain_obliterate_and_stall_config(start_server: StartServer
                                                                  ) -> None:
    server, _ = await broker(start_server)
    async with open_websocket_url(ws_url(server, f"/ws/queues/{Q}")) as ws, \
            http_client(server) as http:
        sub = Subscriber(ws)
        await sub.subscribe("queue:*", "config:*")
        await push(http)
        await push(http)
        await api(http, "POST", f"/queues/{Q}/drain")
        drained = await sub.until("queue:drained")
        assert drained == {**drained, "queue": Q, "count": 2}
        await push(http)
        await api(http, "POST", f"/queues/{Q}/obliterate")
        assert (await sub.until("queue:obliterated"))["queue"] == Q
        await api(http, "PUT", f"/queues/{Q}/stall-config",
                  {"config": {"enabled": True, "stallInterval": 20000}})
        stall = await sub.until("config:stall-changed")
        assert stall["queue"] == Q and stall["config"]["stallInterval"] == 20000


async def test_cron_events(start_server: StartServer) -> None:
    server, _ = await broker(start_server, cron_min_interval_ms=50)
    async with open_websocket_url(ws_url(server)) as ws, http_client(server) as http:
        sub = Subscriber(ws)
        await sub.subscribe("cron:*")
        await api(http, "POST", "/crons", {"name": "ws-cron", "queue": Q, "data": {"t": 1},
                                           "repeatEvery": 60000})
        created = await sub.until("cron:created")
        assert created["name"] == "ws-cron" and created["queue"] == Q
        assert created["every"] == 60000 and isinstance(created["nextRun"], float)
        await api(http, "POST", "/crons", {"name": "ws-cron", "queue": Q, "repeatEvery": 100})
        assert (await sub.until("cron:updated"))["name"] == "ws-cron"
        fired = await sub.until("cron:fired")
        assert fired["name"] == "ws-cron" and fired["queue"] == Q
        await api(http, "DELETE", "/crons/ws-cron")
        assert (await sub.until("cron:deleted"))["name"] == "ws-cron"

        await api(http, "POST", "/crons", {"name": "lonely", "queue": "nobody",
                                           "repeatEvery": 100, "skipIfNoWorker": True})
        skipped = await sub.until("cron:skipped")
        assert skipped == {**skipped, "name": "lonely", "queue": "nobody",
                           "reason": "no-worker"}


async def test_worker_events(start_server: StartServer) -> None:
    server, tcp = await broker(start_server)
    async with open_websocket_url(ws_url(server, "/ws/queues/elsewhere")) as ws, \
            http_client(server) as http:
        sub = Subscriber(ws)  # (a queue path: broker-wide events reach it too)
        await sub.subscribe("worker:*")
        registered = await api(http, "POST", "/workers", {"name": "ws-worker", "queues": [Q]})
        worker_id = registered["data"]["workerId"]
        connected = await sub.until("worker:connected")
        assert connected == {**connected, "workerId": worker_id, "name": "ws-worker",
                             "queues": [Q]}
        await api(http, "POST", f"/workers/{worker_id}/heartbeat")
        assert (await sub.until("worker:heartbeat"))["workerId"] == worker_id
        await api(http, "DELETE", f"/workers/{worker_id}")
        assert (await sub.until("worker:disconnected"))["workerId"] == worker_id

        by_tcp = (await tcp.ok("RegisterWorker", name="tcp-worker", queues=[Q]))["data"]
        assert (await sub.until("worker:connected"))["workerId"] == by_tcp["workerId"]
        await tcp.aclose()  # its connection gone, its worker goes
        gone = await sub.until("worker:disconnected")
        assert gone["workerId"] == by_tcp["workerId"] and gone["name"] == "tcp-worker"


async def test_webhook_events(start_server: StartServer) -> None:
    server, _ = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws, http_client(server) as http:
        sub = Subscriber(ws)
        await sub.subscribe("webhook:*")
        added = await api(http, "POST", "/webhooks", {"url": "https://example.com/hook",
                                                      "events": ["job.completed"]})
        hook_id = added["data"]["webhookId"]
        event = await sub.until("webhook:added")
        assert event == {**event, "id": hook_id, "url": "https://example.com/hook",
                         "events": ["job.completed"]}
        await api(http, "PUT", f"/webhooks/{hook_id}/enabled", {"enabled": False})
        assert (await sub.until("webhook:disabled"))["webhookId"] == hook_id
        await api(http, "DELETE", f"/webhooks/{hook_id}")
        assert (await sub.until("webhook:removed"))["id"] == hook_id


async def test_limit_rejections_and_the_request_budget(start_server: StartServer) -> None:
    server, tcp = await broker(start_server, http_rate_limit_max_requests=3)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("ratelimit:*", "concurrency:*")
        await tcp.ok("RateLimit", queue="rated", limit=1, duration=60000)
        await tcp.ok("PUSHB", queue="rated", jobs=[{"name": "a"}, {"name": "b"}])
        assert (await tcp.ok("PULL", queue="rated"))["job"] is not None
        assert (await tcp.ok("PULL", queue="rated"))["job"] is None
        assert (await sub.until("ratelimit:rejected"))["queue"] == "rated"

        await tcp.ok("SetConcurrency", queue="capped", limit=1)
        await tcp.ok("PUSHB", queue="capped", jobs=[{"name": "a"}, {"name": "b"}])
        assert (await tcp.ok("PULL", queue="capped"))["job"] is not None
        assert (await tcp.ok("PULL", queue="capped"))["job"] is None
        assert (await sub.until("concurrency:rejected"))["queue"] == "capped"

        async with http_client(server) as http:
            statuses = [(await http.get("/queues")).status_code for _ in range(5)]
        assert statuses[-1] == 429
        hit = await sub.until("ratelimit:hit")
        assert hit["clientId"] == "127.0.0.1"


async def test_unsubscribe_all_stops_every_event(start_server: StartServer) -> None:
    server, _ = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws, http_client(server) as http:
        sub = Subscriber(ws)
        for unsubscribe in ({"cmd": "Unsubscribe", "events": []}, {"cmd": "Unsubscribe"}):
            await sub.subscribe("*")
            await push(http)
            await sub.until("job:pushed")
            await ws.send_message(json.dumps({**unsubscribe, "reqId": "off"}))
            assert await sub.reply("off") == {"ok": True, "subscribed": [], "reqId": "off"}
            job_id = await push(http, delay=60000)
            await api(http, "POST", f"/jobs/{job_id}/promote")
            sub.seen.clear()
            # Events are queued for the socket before the REST reply: any would come
            # before the pong.
            await ws.send_message(json.dumps({"cmd": "Ping", "reqId": "ping"}))
            await sub.reply("ping")
            assert [f for f in sub.seen if "event" in f or "eventType" in f] == []


async def test_sse_streams_dashboard_events_by_pattern(start_server: StartServer) -> None:
    server, _ = await broker(start_server)
    async with http_client(server) as http:
        with trio.fail_after(DEADLINE_S):
            refused = await http.get("/events?events=job:promoted,nope")
        assert refused.status_code == 400 and refused.json()["error"] == "Invalid: nope"
        async with http.stream("GET", f"/events/queues/{Q}?events=job:promoted,worker:*"
                               ) as response:
            reader = SseReader(response)
            await reader.frame()  # connected
            later = await push(http, delay=60000)
            await api(http, "POST", f"/jobs/{later}/promote")
            await api(http, "POST", "/workers", {"name": "sse-worker", "queues": [Q]})
            with trio.fail_after(DEADLINE_S):
                first = await reader.frame()
                second = await reader.frame()
            # only what the patterns name: no job:pushed, job:delayed or queue:counts
            assert first["event"] == "job:promoted" and first["data"]["jobId"] == later
            assert second["event"] == "worker:connected"
            assert second["data"]["name"] == "sse-worker"


# ------------------------------------------------------------------ the rest of 7.3


async def test_timeout_lock_expiry_and_ttl_events(start_server: StartServer) -> None:
    server, tcp = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("job:timeout", "job:lock-expired", "job:expired")
        slow = (await tcp.ok("PUSH", queue=Q, name="n", timeout=50, maxAttempts=1))["id"]
        assert (await tcp.ok("PULL", queue=Q))["job"]["id"] == slow
        timed_out = await sub.until("job:timeout")
        assert timed_out == {**timed_out, "jobId": slow, "queue": Q, "timeout": 50}

        held = (await tcp.ok("PUSH", queue=Q, name="n"))["id"]
        assert (await tcp.ok("PULL", queue=Q, owner="w", lockTtl=50))["job"]["id"] == held
        expired_lock = await sub.until("job:lock-expired")
        assert expired_lock == {**expired_lock, "jobId": held, "queue": Q,
                                "renewalCount": 0}
        await tcp.ok("Cancel", id=held)

        # A job whose ttl ran out while it was delayed is dropped when it is due.
        short = (await tcp.ok("PUSH", queue=Q, name="n", delay=50, ttl=10))["id"]
        assert (await tcp.ok("PULL", queue=Q, timeout=1000))["job"] is None
        expired = await sub.until("job:expired")
        assert expired == {**expired, "jobId": short, "queue": Q, "ttl": 10}
        assert expired["age"] >= 50


async def test_dependency_and_flow_events(start_server: StartServer) -> None:
    server, tcp = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("job:dependencies-resolved", "flow:*")
        ids = ["ek1", "ek2"]
        child = {"name": "child", "data": {"__parentId": "ep", "__parentQueue": "fa"},
                 "parentId": "ep", "maxAttempts": 1}
        await tcp.ok("PUSHF", jobs=[
            {"id": "ep", "queue": "fa", "input": {"name": "parent", "data": {},
                                                  "childrenIds": ids, "dependsOn": ids}},
            *({"id": i, "queue": "fb", "input": child} for i in ids)])
        for _ in ids:
            job = (await tcp.ok("PULL", queue="fb"))["job"]
            await tcp.ok("ACK", id=job["id"], result=1)
        resolved = await sub.until("job:dependencies-resolved")
        assert resolved == {**resolved, "jobId": "ep", "queue": "fa"}
        completed = await sub.until("flow:completed")
        assert completed == {**completed, "parentJobId": "ep", "queue": "fa",
                             "childrenCount": 2}

        await tcp.ok("PUSHF", jobs=[
            {"id": "fp", "queue": "fa", "input": {"name": "parent", "data": {},
                                                  "childrenIds": ["fk"], "dependsOn": ["fk"]}},
            {"id": "fk", "queue": "fb", "input": {**child, "parentId": "fp",
                                                  "failParentOnFailure": True}}])
        job = (await tcp.ok("PULL", queue="fb"))["job"]
        await tcp.ok("FAIL", id=job["id"], error="boom")
        failed = await sub.until("flow:failed")
        assert failed == {**failed, "parentJobId": "fp", "failedChildId": "fk",
                          "queue": "fa", "error": "boom"}


async def test_batch_and_queue_lifetime_events(start_server: StartServer) -> None:
    server, tcp = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("batch:*", "queue:created", "queue:removed")
        await tcp.ok("PUSH", queue="batches", name="n", jobId="known")
        assert (await sub.until("queue:created"))["queue"] == "batches"
        await tcp.ok("PUSHB", queue="batches", jobs=[
            {"name": "a", "customId": "known"}, {"name": "b"}, {"name": "c"}])
        pushed = await sub.until("batch:pushed")
        assert pushed == {**pushed, "queue": "batches", "total": 3, "inserted": 2,
                          "duplicates": 1}
        pulled = await tcp.ok("PULLB", queue="batches", count=10)
        assert len(pulled["jobs"]) == 3
        assert (await sub.until("batch:pulled")) == {
            **sub.seen[-1]["data"], "queue": "batches", "count": 3}
        await tcp.ok("Obliterate", queue="batches", force=True)
        assert (await sub.until("queue:removed"))["queue"] == "batches"


async def test_client_and_auth_events(start_server: StartServer) -> None:
    server: Server = await start_server(memory=True, auth_tokens=["secret"])
    assert server.tcp_port is not None
    async with open_websocket_url(ws_url(server), extra_headers=[
            ("Authorization", "Bearer secret")]) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("client:*", "auth:failed")
        tcp = await RawClient.connect(server.tcp_port)
        connected = await sub.until("client:connected")
        assert connected["transport"] == "tcp" and isinstance(connected["clientId"], str)
        assert (await tcp.call("Auth", token="wrong"))["ok"] is False
        assert (await sub.until("auth:failed")) == {**sub.seen[-1]["data"],
                                                    "transport": "tcp"}
        await tcp.aclose()
        gone = await sub.until("client:disconnected")
        assert gone == {**gone, "clientId": connected["clientId"], "transport": "tcp"}
        async with http_client(server) as http:
            assert (await http.get("/queues")).status_code == 401
        assert (await sub.until("auth:failed"))["transport"] == "http"


async def test_sse_streams_the_queue_and_client_events(start_server: StartServer) -> None:
    server, _ = await broker(start_server)
    assert server.tcp_port is not None
    async with http_client(server) as http:
        async with http.stream("GET", "/events?events=queue:created,client:connected,"
                               "batch:*") as response:
            reader = SseReader(response)
            await reader.frame()  # connected
            other = await RawClient.connect(server.tcp_port)
            await other.ok("PUSHB", queue="sse-batch", jobs=[{"name": "a"}, {"name": "b"}])
            frames: list[dict[str, Any]] = []
            with trio.fail_after(DEADLINE_S):
                while not frames or frames[-1]["event"] != "batch:pushed":
                    frames.append(await reader.frame())
            assert [(f["event"], f["data"].get("transport")) for f in frames] == [
                ("client:connected", "tcp"), ("queue:created", None), ("batch:pushed", None)]
            assert frames[1]["data"]["queue"] == "sse-batch"
            assert frames[2]["data"] == {**frames[2]["data"], "total": 2, "inserted": 2}
            await other.aclose()


async def test_webhook_delivery_events(start_server: StartServer,
                                       nursery: trio.Nursery) -> None:
    server, tcp = await broker(start_server, webhook_allow_private=True,
                               webhook_retry_delay_ms=10, webhook_max_attempts=2)
    good: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    bad: WebhookReceiver = await nursery.start(WebhookReceiver(statuses=[500, 500]).run)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("webhook:fired", "webhook:failed")
        fine = (await tcp.ok("AddWebhook", url=good.url, events=["job.pushed"],
                             queue="fine"))["data"]["webhookId"]
        broken = (await tcp.ok("AddWebhook", url=bad.url, events=["job.pushed"],
                               queue="broken"))["data"]["webhookId"]
        await tcp.ok("PUSH", queue="fine", name="n")
        fired = await sub.until("webhook:fired")
        assert fired == {**fired, "webhookId": fine, "url": good.url, "event": "job.pushed"}
        await tcp.ok("PUSH", queue="broken", name="n")
        failed = await sub.until("webhook:failed")
        assert failed == {**failed, "webhookId": broken, "url": bad.url,
                          "event": "job.pushed"}
        assert isinstance(failed["error"], str)


async def test_worker_idle_and_error_events(start_server: StartServer) -> None:
    server, tcp = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("worker:idle", "worker:error")
        worker_id = (await tcp.ok("RegisterWorker", name="busy", queues=[Q]))["data"][
            "workerId"]
        await tcp.ok("Heartbeat", id=worker_id, activeJobs=2, processed=3, failed=0)
        await tcp.ok("Heartbeat", id=worker_id, activeJobs=0, processed=5, failed=0)
        idle = await sub.until("worker:idle")
        assert idle == {**idle, "workerId": worker_id, "processedJobs": 5}
        await tcp.ok("Heartbeat", id=worker_id, activeJobs=0, processed=5, failed=6)
        error = await sub.until("worker:error")
        assert error == {**error, "workerId": worker_id, "name": "busy", "failedJobs": 6,
                         "processedJobs": 5, "failureRate": round(6 / 11, 3)}


async def test_server_shutdown_is_told_before_the_connections_close(
        start_server: StartServer) -> None:
    server, _ = await broker(start_server)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("server:*")
        server.stop("SIGTERM")
        assert (await sub.until("server:shutdown"))["signal"] == "SIGTERM"


async def test_queue_idle_and_threshold_events(start_server: StartServer) -> None:
    server, tcp = await broker(start_server, queue_idle_threshold_ms=50,
                               queue_size_threshold_jobs=3)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("queue:idle", "queue:threshold")
        ids = [(await tcp.ok("PUSH", queue=Q, name="n"))["id"] for _ in range(3)]
        threshold = await sub.until("queue:threshold")
        assert threshold == {**threshold, "queue": Q, "size": 3, "threshold": 3}
        ids.append((await tcp.ok("PUSH", queue=Q, name="n"))["id"])  # (still over: told once)
        for _ in ids:
            job = (await tcp.ok("PULL", queue=Q, timeout=0))["job"]
            await tcp.ok("ACK", id=job["id"])
        idle = await sub.until("queue:idle")  # no job ready or active for 50 ms
        assert idle == {**idle, "queue": Q, "idleSeconds": 0}
        assert [f["event"] for f in sub.seen if "event" in f] == [
            "queue:threshold", "queue:idle"]
        # a new crossing is told again
        for _ in range(3):
            await tcp.ok("PUSH", queue=Q, name="n")
        assert (await sub.until("queue:threshold"))["size"] == 3


async def test_worker_overloaded_event(start_server: StartServer) -> None:
    server, tcp = await broker(start_server, worker_overload_threshold_ms=50)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("worker:overloaded")
        worker_id = (await tcp.ok("RegisterWorker", name="full", queues=[Q],
                                  concurrency=2))["data"]["workerId"]
        await tcp.ok("Heartbeat", id=worker_id, activeJobs=2, processed=0, failed=0)
        await trio.sleep(0.06)  # (the overload must last the threshold: 50 ms)
        await tcp.ok("Heartbeat", id=worker_id, activeJobs=2, processed=0, failed=0)
        overloaded = await sub.until("worker:overloaded")
        assert overloaded == {**overloaded, "workerId": worker_id, "name": "full",
                              "activeJobs": 2, "concurrency": 2, "overloadedSeconds": 0}


async def test_storage_size_and_memory_warnings(start_server: StartServer) -> None:
    server, tcp = await broker(start_server, storage_warning_mib=1, memory_warning_mib=1)
    async with open_websocket_url(ws_url(server)) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("storage:size-warning", "server:memory-warning")
        memory = await sub.until("server:memory-warning")  # (a process takes over 1 MiB)
        assert memory["thresholdMB"] == 1 and memory["rssMB"] >= 1
        assert memory["heapUsedMB"] == memory["rssMB"]
        await tcp.ok("PUSH", queue=Q, name="big", data="x" * (3 << 19))  # 1.5 MiB
        size = await sub.until("storage:size-warning")
        assert size == {**size, "thresholdMB": 1} and size["sizeMB"] >= 1
        assert "queue" not in size and "queue" not in memory  # (broker-wide)


async def test_server_shutdown_is_sent_after_what_was_queued_before_it(
        start_server: StartServer) -> None:
    """A subscriber that fell behind (32 MB of events queued for it, more than the
    sockets hold) still gets server:shutdown once it reads on: the broker waits for
    the notice to be sent before it closes the connections."""
    server, tcp = await broker(start_server, shutdown_notice_s=10)
    result = "r" * (4 << 20)
    async with open_websocket_url(ws_url(server), max_message_size=64 << 20) as ws:
        sub = Subscriber(ws)
        await sub.subscribe("server:*", "job:completed")
        for _ in range(8):  # each ACK's reply comes after its event was queued
            job_id = (await tcp.ok("PUSH", queue=Q, name="n"))["id"]
            assert (await tcp.ok("PULL", queue=Q, timeout=0))["job"]["id"] == job_id
            await tcp.ok("ACK", id=job_id, result=result)
        server.stop("SIGTERM")
        assert (await sub.until("server:shutdown"))["signal"] == "SIGTERM"
        assert [f["event"] for f in sub.seen if "event" in f] == (
            ["job:completed"] * 8 + ["server:shutdown"])


async def test_a_subscriber_that_does_not_read_holds_shutdown_only_shutdown_notice_s(
        start_server: StartServer) -> None:
    """The wait for server:shutdown to leave is bounded: a subscriber that stopped
    reading with a backlog queued keeps the connections open no longer than
    ``shutdown_notice_s``."""
    server, tcp = await broker(start_server, shutdown_notice_s=0.3)
    async with open_websocket_url(ws_url(server), max_message_size=64 << 20) as ws:
        await Subscriber(ws).subscribe("server:*", "job:completed")
        for _ in range(8):  # 32 MB of events for a client that reads no more
            job_id = (await tcp.ok("PUSH", queue=Q, name="n"))["id"]
            await tcp.ok("PULL", queue=Q, timeout=0)
            await tcp.ok("ACK", id=job_id, result="r" * (4 << 20))
        started = trio.current_time()
        server.stop("SIGTERM")
        with trio.fail_after(DEADLINE_S):
            await tcp.drain_until_closed()  # (the connections close after the wait)
        assert 0.3 <= trio.current_time() - started < 2
