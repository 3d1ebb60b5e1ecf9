"""Webhooks over real TCP: the four commands (both codecs), deliveries to a real local
HTTP receiver (body, signature, retries, counters), a dead receiver that slows neither
pushes nor another webhook, the SSRF guard at AddWebhook and at delivery, and the
registry kept across a restart."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trioqueue.actors import webhook_delivery
from trioqueue.actors.broker import open_postgres
from trioqueue.config import Config
from trioqueue.core.writes import Writes
from trioqueue.server.run import Server
from trioqueue.storage.lmdb.store import LmdbStorage
from trioqueue.testing import RawClient
from trioqueue.testing.cluster import BrokerCluster, queue_served_by
from trioqueue.testing.process import BrokerProcess
from trioqueue.testing.served import served
from trioqueue.testing.webhook_receiver import WebhookReceiver

ALL_EVENTS = ["job.pushed", "job.started", "job.completed", "job.failed", "job.progress"]


async def wait_until(predicate: Callable[[], Any], timeout_s: float = 10.0) -> None:
    with trio.fail_after(timeout_s):
        while not await predicate():
            await trio.sleep(0.01)


async def hook_entry(client: RawClient, hook_id: str) -> dict[str, Any]:
    hooks = (await client.ok("ListWebhooks"))["data"]["webhooks"]
    return next(hook for hook in hooks if hook["id"] == hook_id)


async def counted(client: RawClient, hook_id: str, field: str, value: int) -> None:
    async def reached() -> bool:
        return bool((await hook_entry(client, hook_id))[field] >= value)

    await wait_until(reached)


@pytest.fixture
async def hooks_server(start_server: Callable[..., Any]) -> Server:
    """A broker whose webhooks may reach 127.0.0.1 (the test receiver), fast retries."""
    server: Server = await start_server(webhook_allow_private=True,
                                        webhook_retry_delay_ms=10)
    return server


async def client_of(server: Server, codec: str = "msgpack") -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port, codec)


# ------------------------------------------------------------------ the commands


async def test_add_list_enable_remove(client: RawClient) -> None:
    added = (await client.ok("AddWebhook", url="https://example.com/hook",
                             events=["job.completed", "job.failed"], queue="emails",
                             secret="s3cret"))["data"]
    assert set(added) == {"webhookId", "url", "events", "queue", "createdAt"}
    assert added["url"] == "https://example.com/hook" and added["queue"] == "emails"
    assert added["events"] == ["job.completed", "job.failed"]
    other = (await client.ok("AddWebhook", url="http://example.org/x",
                             events=["job.pushed"]))["data"]
    assert other["queue"] is None
    listed = (await client.ok("ListWebhooks"))["data"]
    assert listed["stats"] == {"total": 2, "enabled": 2}
    entry = next(h for h in listed["webhooks"] if h["id"] == added["webhookId"])
    assert entry["url"] == added["url"] and entry["createdAt"] == added["createdAt"]
    assert entry["lastTriggered"] is None and entry["enabled"] is True
    assert entry["successCount"] == 0 and entry["failureCount"] == 0
    assert "secret" not in entry
    set_reply = await client.ok("SetWebhookEnabled", id=added["webhookId"], enabled=False)
    assert set(set_reply) == {"ok", "reqId"}  # {} on the wire
    assert (await hook_entry(client, added["webhookId"]))["enabled"] is False
    assert (await client.ok("ListWebhooks"))["data"]["stats"] == {"total": 2, "enabled": 1}
    removed = await client.ok("RemoveWebhook", webhookId=added["webhookId"])
    assert removed["data"] == {"removed": True}
    again = await client.call("RemoveWebhook", webhookId=added["webhookId"])
    assert again["ok"] is False and again["error"] == "Webhook not found"
    missing = await client.call("SetWebhookEnabled", id="nope", enabled=True)
    assert missing["ok"] is False and missing["error"] == "Webhook not found"
    assert (await client.ok("ListWebhooks"))["data"]["stats"] == {"total": 1, "enabled": 1}


@pytest.mark.parametrize(("fields", "error"), [
    ({"events": ["job.stalled"]}, "Invalid webhook event: job.stalled"),
    ({"events": []}, "events must be a non-empty array"),
    ({"events": "job.pushed"}, "events must be an array of strings"),
    ({"url": None}, "url is required"),
    ({"url": "ftp://example.com/x"}, "Webhook URL must use http or https"),
    ({"url": "https://example.com/" + "a" * 2040}, "Webhook URL too long (max 2048 characters)"),
    ({"url": "http://"}, "Invalid webhook URL"),
    ({"enabled": 1}, None),  # an unknown field is ignored
])
async def test_add_refusals(client: RawClient, fields: dict[str, Any], error: str | None) -> None:
    msg: dict[str, Any] = {"url": "https://example.com/hook", "events": ["job.pushed"]}
    msg.update(fields)
    reply = await client.call("AddWebhook", **msg)
    if error is None:
        assert reply["ok"] is True
    else:
        assert reply == {"ok": False, "error": error, "reqId": reply["reqId"]}


@pytest.mark.parametrize("url", [
    "http://localhost:8080/hook", "http://LOCALHOST./x", "http://api.localhost/x",
    "http://127.0.0.1/x", "http://127.1/x", "http://2130706433/x", "http://0x7f000001/x",
    "http://10.1.2.3/x", "http://172.16.0.9/x", "http://192.168.1.1/x",
    "http://169.254.169.254/latest/meta-data", "http://metadata.google.internal/x",
    "http://[::1]:9000/x", "http://[fe80::1]/x", "http://[::ffff:127.0.0.1]/x",
    "http://0.0.0.0/x", "http://100.64.0.1/x",
    # dots a URL parser reads as full stops
    "http://127\u30020\u30020\u30021/x", "http://localhost\uff0e/x",
    # IPv6 forms that hold an IPv4 address, and site-local
    "http://[64:ff9b::127.0.0.1]/x", "http://[64:ff9b::169.254.169.254]/x",
    "http://[64:ff9b:1::10.0.0.1]/x", "http://[::127.0.0.1]/x",
    "http://[::ffff:0:10.0.0.1]/x", "http://[fec0::1]/x", "http://[2002:a9fe:a9fe::]/x",
])
async def test_ssrf_refused_at_add(client: RawClient, url: str) -> None:
    reply = await client.call("AddWebhook", url=url, events=["job.pushed"])
    assert reply["ok"] is False
    assert reply["error"] == "Webhook URL must not target localhost, private or internal hosts"
    assert (await client.ok("ListWebhooks"))["data"]["stats"]["total"] == 0


# The URLs that passed the old check (urllib) and made the delivery's parser (httpx)
# raise, which stopped the broker at the next event of the webhook's queue.
UNPARSEABLE = [
    "http://\uff21\uff22\uff23.com/h",  # full-width letters
    "http://\u2460\u2461\u2466.0.0.1/h",  # circled digits
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/h",  # full-width digits
    "http://ab\u00adc.com/h",  # a soft hyphen
    "http://ab\tc.com/h", "http://ab\x00c.com/h",
]


@pytest.mark.parametrize("url", UNPARSEABLE)
async def test_add_refuses_urls_delivery_cannot_send_to(client: RawClient, url: str) -> None:
    reply = await client.call("AddWebhook", url=url, events=["job.pushed"])
    assert reply == {"ok": False, "error": "Invalid webhook URL", "reqId": reply["reqId"]}
    assert (await client.ok("ListWebhooks"))["data"]["stats"]["total"] == 0


@pytest.mark.parametrize(("url", "normal"), [
    ("HTTPS://Example.COM:443/In", "https://example.com/In"),
    ("http://b\u00fccher.de/x y", "http://xn--bcher-kva.de/x%20y"),
    ("http://example\u3002org/x", "http://example.org/x"),
])
async def test_add_stores_the_url_in_the_form_delivery_sends_to(
        client: RawClient, url: str, normal: str) -> None:
    added = (await client.ok("AddWebhook", url=url, events=["job.pushed"]))["data"]
    assert added["url"] == normal
    assert (await hook_entry(client, added["webhookId"]))["url"] == normal


async def test_rest_add_refuses_and_normalises_as_tcp(start_server: Callable[..., Any]) -> None:
    server: Server = await start_server()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=10.0) as http:
        for url in [*UNPARSEABLE, "http://127\u30020\u30020\u30021/h",
                    "http://[64:ff9b::127.0.0.1]/h"]:
            reply = await http.post("/webhooks", json={"url": url, "events": ["job.pushed"]})
            assert reply.status_code == 400, (url, reply.text)
            assert reply.json()["error"] in (
                "Invalid webhook URL", "Webhook URL must not target localhost, private "
                "or internal hosts"), (url, reply.text)
        added = await http.post("/webhooks", json={"url": "http://B\u00dcCHER.de/h",
                                                   "events": ["job.pushed"]})
        assert added.status_code == 200 and added.json()["data"]["url"] == (
            "http://xn--bcher-kva.de/h")
        assert (await http.get("/webhooks")).json()["data"]["stats"]["total"] == 1


async def test_a_stored_webhook_with_a_bad_url_does_not_stop_the_broker(
        tmp_path: Path) -> None:
    """Webhooks stored before AddWebhook refused such URLs: the broker starts, each
    event of their queue is a failure of each, counted, and the broker goes on."""
    data_dir = tmp_path / "data"
    store = LmdbStorage(str(data_dir))
    writes = Writes()
    for n, url in enumerate([*UNPARSEABLE, "http://127\uff0e0\uff0e0\uff0e1/h"]):
        writes.put_broker_record("webhook", f"w{n}", {
            "id": f"w{n}", "url": url, "events": ["job.pushed"], "queue": "q",
            "secret": None, "createdAt": 1, "enabled": True})
    store.apply([writes])
    store.close()
    broker = BrokerProcess(data_dir)
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        for n in range(1, 3):
            await client.ok("PUSH", queue="q", name="n", data=n)
            for hook in (await client.ok("ListWebhooks"))["data"]["webhooks"]:
                await counted(client, hook["id"], "failureCount", n)
        await client.ok("PUSH", queue="other", name="n", data=0)
        assert broker.process is not None and broker.process.poll() is None
        hooks = (await client.ok("ListWebhooks"))["data"]["webhooks"]
        assert len(hooks) == len(UNPARSEABLE) + 1
        assert all(h["successCount"] == 0 for h in hooks)
        await client.aclose()
    finally:
        await broker.stop()


@pytest.mark.slow  # (three brokers started on the store: the one-broker test above is the fast one)
async def test_a_cluster_on_a_store_holding_a_bad_webhook_keeps_serving(
        tmp_path: Path, pg_dsn: str) -> None:
    """The same in a cluster, where every broker holds every webhook: each broker counts
    the events of the queue it serves as failures and goes on (each exited before)."""
    store = open_postgres(pg_dsn, outage_s=10.0)
    writes = Writes()
    writes.put_broker_record("webhook", "bad", {
        "id": "bad", "url": UNPARSEABLE[0], "events": ["job.pushed"], "queue": None,
        "secret": None, "createdAt": 1, "enabled": True})
    store.apply([writes])
    store.close()
    async with BrokerCluster(pg_dsn, 3, tmp_path) as cluster:
        clients = [await RawClient.connect(broker.tcp_port) for broker in cluster.brokers]
        queues = [queue_served_by(f"b{n}", "bad-") for n in range(3)]
        for round_ in (1, 2):
            for client, queue in zip(clients, queues, strict=True):
                await client.ok("PUSH", queue=queue, name="n", data=round_)
            for client in clients:  # each broker counts the deliveries it made
                await counted(client, "bad", "failureCount", round_)
        assert len(cluster.running()) == 3
        for client in clients:
            await client.aclose()


# ------------------------------------------------------------------ deliveries


async def test_delivery_body_and_signature(hooks_server: Server, nursery: trio.Nursery,
                                           codec: str) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    client = await client_of(hooks_server, codec)
    hook = (await client.ok("AddWebhook", url=receiver.url, events=ALL_EVENTS,
                            queue="hooked", secret="top-secret"))["data"]
    await client.ok("PUSH", queue="unwatched", name="n", data={"x": 0})
    pushed = await client.ok("PUSH", queue="hooked", name="n", data={"x": 1})
    job = (await client.ok("PULL", queue="hooked"))["job"]
    await client.ok("Progress", id=job["id"], progress=40)
    await client.ok("ACK", id=job["id"], token=job.get("lockToken"), result={"sum": 3})
    requests = await receiver.wait_for(4)
    bodies = [json.loads(r.body) for r in requests]
    assert [b["event"] for b in bodies] == [
        "job.pushed", "job.started", "job.progress", "job.completed"]
    for request, body in zip(requests, bodies, strict=True):
        assert request.method == "POST" and request.target == "/hook"
        assert request.headers["content-type"] == "application/json"
        assert request.headers["x-webhook-event"] == body["event"]
        assert request.headers["x-webhook-timestamp"] == str(body["timestamp"])
        expected = hmac.new(b"top-secret", request.body, hashlib.sha256).hexdigest()
        assert request.headers["x-webhook-signature"] == expected
        assert body["jobId"] == pushed["id"] and body["queue"] == "hooked"
    assert bodies[2]["progress"] == 40
    assert bodies[3]["data"] == {"sum": 3}
    await counted(client, hook["webhookId"], "successCount", 4)
    entry = await hook_entry(client, hook["webhookId"])
    assert entry["failureCount"] == 0 and entry["lastTriggered"] >= entry["createdAt"]
    assert len(receiver.requests) == 4  # nothing of the unwatched queue
    # ... which never even built its events (nobody listens to it)
    actors = hooks_server.broker.router.actors
    assert actors["hooked"].state.events_enabled
    assert not actors["unwatched"].state.events_enabled
    await client.aclose()


async def test_failed_is_sent_when_final_and_unsigned_without_secret(
        hooks_server: Server, nursery: trio.Nursery) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    client = await client_of(hooks_server)
    await client.ok("AddWebhook", url=receiver.url, events=["job.failed"])
    await client.ok("PUSH", queue="f", name="n", data=1, maxAttempts=2, backoff=0)
    for _ in range(2):
        job = (await client.ok("PULL", queue="f"))["job"]
        await client.ok("FAIL", id=job["id"], token=job.get("lockToken"), error="boom")
    (request,) = await receiver.wait_for(1)
    body = json.loads(request.body)
    assert body["event"] == "job.failed" and body["error"] == "boom"
    assert "x-webhook-signature" not in request.headers
    await client.aclose()


async def test_retry_after_500_then_success(hooks_server: Server,
                                            nursery: trio.Nursery) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver(statuses=[500]).run)
    client = await client_of(hooks_server)
    hook = (await client.ok("AddWebhook", url=receiver.url, events=["job.pushed"]))["data"]
    await client.ok("PUSH", queue="q", name="n", data=1)
    first, second = await receiver.wait_for(2)
    assert first.body == second.body
    assert first.headers["x-webhook-timestamp"] == second.headers["x-webhook-timestamp"]
    await counted(client, hook["webhookId"], "successCount", 1)
    assert (await hook_entry(client, hook["webhookId"]))["failureCount"] == 0
    await client.aclose()


async def test_failure_counted_after_the_last_attempt(start_server: Callable[..., Any],
                                                      nursery: trio.Nursery) -> None:
    server = await start_server(webhook_allow_private=True, webhook_retry_delay_ms=5,
                                webhook_max_attempts=3)
    receiver: WebhookReceiver = await nursery.start(
        WebhookReceiver(statuses=[500, 503, 404]).run)
    client = await client_of(server)
    hook = (await client.ok("AddWebhook", url=receiver.url, events=["job.pushed"]))["data"]
    await client.ok("PUSH", queue="q", name="n", data=1)
    await receiver.wait_for(3)
    await counted(client, hook["webhookId"], "failureCount", 1)
    entry = await hook_entry(client, hook["webhookId"])
    assert entry["successCount"] == 0 and entry["lastTriggered"] is None
    await client.ok("PUSH", queue="q", name="n", data=2)  # the receiver answers 200 now
    await counted(client, hook["webhookId"], "successCount", 1)
    assert len(receiver.requests) == 4
    await client.aclose()


async def test_disabled_and_removed_webhooks_get_nothing(hooks_server: Server,
                                                         nursery: trio.Nursery) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    marker: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    client = await client_of(hooks_server)
    hook = (await client.ok("AddWebhook", url=receiver.url, events=["job.pushed"]))["data"]
    # A second webhook, always on: once it has the event, the first would have had it.
    await client.ok("AddWebhook", url=marker.url, events=["job.pushed"])
    await client.ok("SetWebhookEnabled", id=hook["webhookId"], enabled=False)
    await client.ok("PUSH", queue="q", name="n", data=1)
    await marker.wait_for(1)
    await client.ok("SetWebhookEnabled", id=hook["webhookId"], enabled=True)
    await client.ok("PUSH", queue="q", name="n", data=2)
    (request,) = await receiver.wait_for(1)
    assert json.loads(request.body)["event"] == "job.pushed"
    await client.ok("RemoveWebhook", webhookId=hook["webhookId"])
    await client.ok("PUSH", queue="q", name="n", data=3)
    await marker.wait_for(3)
    assert len(receiver.requests) == 1
    await client.aclose()


# ------------------------------------------------------------------ a dead receiver


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[int(len(ordered) * 0.99) - 1]


async def timed_push(client: RawClient, queue: str, samples: list[float]) -> None:
    start = time.perf_counter()
    await client.ok("PUSH", queue=queue, name="n", data={"x": len(samples)})
    samples.append(time.perf_counter() - start)


async def push_p99s(client: RawClient, count: int) -> tuple[float, float]:
    """p99 of PUSH into an unwatched queue and into the dead webhook's queue, the two
    alternated push by push so that a hiccup of the machine hits both alike."""
    base: list[float] = []
    hooked: list[float] = []
    for _ in range(count):
        await timed_push(client, "plain", base)
        await timed_push(client, "hooked", hooked)
    return p99(base), p99(hooked)


async def test_dead_receiver_slows_neither_pushes_nor_another_webhook(
        start_server: Callable[..., Any], nursery: trio.Nursery) -> None:
    server = await start_server(webhook_allow_private=True, webhook_buffer_events=10,
                                webhook_request_timeout_s=60)
    dead: WebhookReceiver = await nursery.start(WebhookReceiver(hang=True).run)
    live: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    client = await client_of(server)
    for _ in range(100):  # warm-up
        await client.ok("PUSH", queue="warm", name="n", data=1)
    dead_hook = (await client.ok("AddWebhook", url=dead.url, events=["job.pushed"],
                                 queue="hooked"))["data"]
    # This machine (2 shared cores) stalls now and then for ~4 ms whatever runs; a
    # handful of such stalls decides a p99 of 1000. So up to three measures: a real
    # slowdown (a delivery holding the event loop) fails all three.
    total = 0
    for _ in range(3):
        base, hooked = await push_p99s(client, 1000)
        total += 1000
        if hooked <= 2 * base:
            break
    assert hooked <= 2 * base, (hooked, base)
    await dead.wait_for(1)
    # The dead webhook took one event and buffered 10: the others were dropped, counted.
    entry = await hook_entry(client, dead_hook["webhookId"])
    assert total - 11 <= entry["droppedCount"] <= total - 10
    assert entry["successCount"] == 0 and len(dead.requests) == 1
    # A healthy webhook of the same queue is served while the dead one still hangs.
    await client.ok("AddWebhook", url=live.url, events=["job.pushed"], queue="hooked")
    for i in range(5):
        await client.ok("PUSH", queue="hooked", name="n", data=i)
    await live.wait_for(5)
    assert len(dead.requests) == 1
    await client.aclose()


# ------------------------------------------------------------------ SSRF at delivery


@pytest.mark.parametrize("address", ["127.0.0.1", "169.254.169.254", "10.0.0.7",
                                     "64:ff9b::7f00:1", "::ffff:0:a9fe:a9fe", "fec0::7"])
async def test_name_resolving_to_a_refused_address_fails_the_delivery(
        start_server: Callable[..., Any], nursery: trio.Nursery,
        monkeypatch: pytest.MonkeyPatch, address: str) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    looked_up: list[str] = []

    async def fake_dns(host: str, port: int) -> list[str]:
        looked_up.append(host)
        return [address]

    monkeypatch.setattr(webhook_delivery, "resolve_host", fake_dns)
    server = await start_server()  # no webhook_allow_private
    client = await client_of(server)
    url = f"http://hooks.example.net:{receiver.port}/hook"
    hook = (await client.ok("AddWebhook", url=url, events=["job.pushed"]))["data"]
    await client.ok("PUSH", queue="q", name="n", data=1)
    await counted(client, hook["webhookId"], "failureCount", 1)
    assert looked_up == ["hooks.example.net"]  # refused at once: no retry
    assert receiver.requests == []
    await client.aclose()


# ------------------------------------------------------------------ restarts


async def test_webhooks_survive_a_restart(configure: Callable[..., Config],
                                          nursery: trio.Nursery) -> None:
    receiver: WebhookReceiver = await nursery.start(WebhookReceiver().run)
    config = configure(webhook_allow_private=True)  # LMDB in this test's directory
    async with served(config) as client:
        kept = (await client.ok("AddWebhook", url=receiver.url, events=["job.pushed"],
                                queue="q", secret="k"))["data"]
        off = (await client.ok("AddWebhook", url="https://example.com/a",
                               events=["job.completed"]))["data"]
        gone = (await client.ok("AddWebhook", url="https://example.com/b",
                                events=["job.failed"]))["data"]
        await client.ok("SetWebhookEnabled", id=off["webhookId"], enabled=False)
        await client.ok("RemoveWebhook", webhookId=gone["webhookId"])
        before = (await client.ok("ListWebhooks"))["data"]
    async with served(config) as client:
        after = (await client.ok("ListWebhooks"))["data"]
        assert after["stats"] == {"total": 2, "enabled": 1}
        assert sorted(after["webhooks"], key=lambda h: h["id"]) == sorted(
            before["webhooks"], key=lambda h: h["id"])
        await client.ok("PUSH", queue="q", name="n", data=1)
        (request,) = await receiver.wait_for(1)
        assert request.headers["x-webhook-signature"] == hmac.new(
            b"k", request.body, hashlib.sha256).hexdigest()
        await counted(client, kept["webhookId"], "successCount", 1)
