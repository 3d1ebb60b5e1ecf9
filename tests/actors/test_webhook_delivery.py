"""The delivery component without a broker: which queues build events, the backoff
schedule (MockClock), the address a request is pinned to, and the router's handling of
a broker command's writes (submitted, then the reply released after their commit)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
import trio
import trio.testing

from trioqueue.actors.events import EventHub
from trioqueue.actors.ports import RouterLimits
from trioqueue.actors.request import Replier, Request
from trioqueue.actors.router import Router
from trioqueue.actors.webhook_delivery import AddressRefused, WebhookDelivery
from trioqueue.config import Config
from trioqueue.core.commands.table import CORE_COMMANDS
from trioqueue.core.webhooks.registry import WebhookRegistry
from trioqueue.core.writes import Writes


def delivery(registry: WebhookRegistry | None = None, resolve: Any = None,
             **config: Any) -> WebhookDelivery:
    return WebhookDelivery(registry or WebhookRegistry(), Config(**config),
                           now_ms=lambda: 0, resolve=resolve)


def pushed(queue: str) -> dict[str, Any]:
    return {"eventType": "pushed", "queue": queue, "jobId": "j", "timestamp": 5.0}


def test_only_watched_queues_build_events() -> None:
    hub = EventHub()
    hooks = delivery()
    hooks.registry.new("https://e.com", ["job.pushed"], "a", None, 0)
    watched, unwatched = hooks.sink(hub, "a"), hooks.sink(hub, "b")
    assert watched.active and not unwatched.active
    hub.subscribe(lambda events: None)  # a TCP subscriber: every queue builds events
    assert unwatched.active


async def test_events_of_unwatched_queues_start_nothing() -> None:
    hooks = delivery()
    hooks.registry.new("https://e.com", ["job.completed"], "a", None, 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(hooks.run)
        hooks.sink(EventHub(), "b").publish([pushed("b")])
        hooks.sink(EventHub(), "a").publish([pushed("a")])  # not an event it asked for
        assert hooks._outboxes == {}
        nursery.cancel_scope.cancel()


async def test_backoff_schedule_and_failure_count(
        autojump_clock: trio.testing.MockClock) -> None:
    hooks = delivery(webhook_retry_delay_ms=1000, webhook_max_attempts=3)
    hook = hooks.registry.new("https://e.com", ["job.pushed"], None, "s", 0)
    attempts: list[float] = []
    bodies: list[bytes] = []

    async def failing(client: Any, url: Any, body: list[bytes], headers: dict[str, str]
                      ) -> bool:
        attempts.append(trio.current_time())
        bodies.append(b"".join(body))  # (the body's pieces, sent one after another)
        return False

    hooks._attempt = failing  # type: ignore[method-assign]
    start = trio.current_time()
    await hooks._deliver(None, hook, httpx.URL(hook.url),  # type: ignore[arg-type]
                         {"event": "job.pushed", "timestamp": 5})
    assert [round(t - start, 3) for t in attempts] == [0.0, 1.0, 3.0]  # delay x attempt
    assert hook.failure_count == 1 and hook.success_count == 0
    assert json.loads(bodies[0]) == {"event": "job.pushed", "timestamp": 5}


async def test_refused_address_is_not_retried() -> None:
    hooks = delivery()
    hook = hooks.registry.new("https://e.com", ["job.pushed"], None, None, 0)
    calls = 0

    async def refused(client: Any, url: Any, body: bytes, headers: dict[str, str]) -> bool:
        nonlocal calls
        calls += 1
        raise AddressRefused("e.com resolves to 127.0.0.1")

    hooks._attempt = refused  # type: ignore[method-assign]
    await hooks._deliver(None, hook, httpx.URL(hook.url),  # type: ignore[arg-type]
                         {"event": "job.pushed", "timestamp": 5})
    assert calls == 1 and hook.failure_count == 1


@pytest.mark.parametrize("error", [RuntimeError("a bug"), httpx.InvalidURL("bad"),
                                   KeyError("x"), ValueError("y")])
async def test_any_error_of_an_attempt_is_a_counted_failure(error: Exception) -> None:
    hooks = delivery()
    hook = hooks.registry.new("https://e.com", ["job.pushed"], None, None, 0)

    async def broken(client: Any, url: Any, body: bytes, headers: dict[str, str]) -> bool:
        raise error

    hooks._attempt = broken  # type: ignore[method-assign]
    await hooks._deliver(None, hook, httpx.URL(hook.url),  # type: ignore[arg-type]
                         {"event": "job.pushed", "timestamp": 5})
    assert hook.failure_count == 1 and hook.success_count == 0


@pytest.mark.parametrize("url", ["http://\uff21\uff22\uff23.com/h", "http://ab\tc.com/h",
                                 "http://ab\x00c.com/h", "http://ab\u00adc.com/h", "", None])
@pytest.mark.parametrize("loaded_by", ["load", "replace"])
async def test_a_stored_url_delivery_cannot_use_counts_each_event_as_a_failure(
        url: Any, loaded_by: str) -> None:
    """A webhook stored before AddWebhook refused such URLs (its record loaded at
    startup, or by a cluster's reload, on every broker): its events are failures,
    never a crash."""
    async def dns(host: str, port: int) -> list[str]:
        raise AssertionError("nothing to resolve")

    hooks = delivery(resolve=dns)
    getattr(hooks.registry, loaded_by)([{
        "id": "w", "url": url, "events": ["job.pushed"], "queue": None, "secret": None,
        "createdAt": 0}])
    hook = hooks.registry.hooks["w"]
    async with trio.open_nursery() as nursery:
        await nursery.start(hooks.run)
        hooks.offer("q", [pushed("q")] * 3)
        with trio.fail_after(5):
            while hook.failure_count < 3:
                await trio.testing.wait_all_tasks_blocked()
        hooks.offer("q", [pushed("q")])
        with trio.fail_after(5):
            while hook.failure_count < 4:
                await trio.testing.wait_all_tasks_blocked()
        assert hook.success_count == 0
        nursery.cancel_scope.cancel()


async def test_an_internationalised_name_is_resolved_in_its_ascii_form() -> None:
    asked: list[str] = []

    async def dns(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["93.184.216.34"]

    hooks = delivery(resolve=dns)
    url, headers, extensions = await hooks._target(httpx.URL("https://stra\u00dfe.de/h"))
    assert asked == ["xn--strae-oqa.de"]  # IDNA 2008, as the URL has it (not "strasse")
    assert headers == {"Host": "xn--strae-oqa.de"}
    assert extensions == {"sni_hostname": "xn--strae-oqa.de"}


async def test_a_request_goes_to_the_checked_address() -> None:
    async def dns(host: str, port: int) -> list[str]:
        assert (host, port) == ("hooks.example.com", 8443)
        return ["93.184.216.34", "2606:2800:220:1::1"]

    hooks = delivery(resolve=dns)
    url, headers, extensions = await hooks._target(
        httpx.URL("https://hooks.example.com:8443/in?x=1"))
    assert str(url) == "https://93.184.216.34:8443/in?x=1"
    assert headers == {"Host": "hooks.example.com:8443"}
    assert extensions == {"sni_hostname": "hooks.example.com"}


@pytest.mark.parametrize("answers", [["93.184.216.34", "127.0.0.1"], ["169.254.169.254"],
                                     ["::ffff:10.0.0.1"], ["64:ff9b::7f00:1"],
                                     ["::ffff:0:a9fe:a9fe"], ["::a00:1"], ["fec0::1"]])
async def test_any_refused_address_refuses_the_delivery(answers: list[str]) -> None:
    async def dns(host: str, port: int) -> list[str]:
        return answers

    with pytest.raises(AddressRefused):
        await delivery(resolve=dns)._target(httpx.URL("http://hooks.example.com/"))


async def test_allow_private_skips_resolution() -> None:
    async def dns(host: str, port: int) -> list[str]:
        raise AssertionError("not resolved")

    hooks = delivery(resolve=dns, webhook_allow_private=True)
    url = httpx.URL("http://127.0.0.1:9/x")
    assert await hooks._target(url) == (url, {}, {})


async def test_overflow_is_dropped_and_counted_and_removal_stops_the_task() -> None:
    hooks = delivery(webhook_buffer_events=2)
    hook = hooks.registry.new("https://e.com", ["job.pushed"], None, None, 0)
    async with trio.open_nursery() as nursery:
        await nursery.start(hooks.run)
        hooks.offer("q", [pushed("q")] * 5)  # its task has not run yet: 2 kept
        box = hooks._outboxes[hook.id]
        assert len(box.pending) == 2 and hook.dropped_count == 3
        hooks.registry.remove(hook.id)
        assert hook.id not in hooks._outboxes and box.scope.cancel_called
        await trio.testing.wait_all_tasks_blocked()
        assert len(nursery.child_tasks) == 1  # only run's own: the webhook's task ended
        nursery.cancel_scope.cancel()


# ------------------------------------------------------------------ the router


class Committer:
    off_thread = False

    def __init__(self) -> None:
        self.log: list[Any] = []

    def submit(self, writes: Writes) -> None:
        self.log.append(("submit", [op.kind for op in writes.ops]))  # type: ignore[union-attr]

    def release(self, deliveries: list[tuple[Replier, dict[str, Any]]]) -> None:
        self.log.append(("release", [reply for _, reply in deliveries]))

    def commit_now(self) -> None:
        pass

    async def commit(self) -> None:
        pass


class Got:
    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []

    def deliver(self, reply: dict[str, Any]) -> None:
        self.replies.append(reply)


async def test_router_releases_the_reply_after_submitting_the_writes() -> None:
    committer = Committer()
    limits = RouterLimits(max_queues=1, max_data_bytes=1, removed_result_retention_s=0,
                          max_removed_results=0, slice_budget_ms=4.0)
    router = Router(committer=committer, find_queue=lambda job_id: None,
                    now_ms=lambda: 7, limits=limits,
                    admission=None, new_actor=None, spawn=None)  # type: ignore[arg-type]
    got = Got()
    command = CORE_COMMANDS.wire["AddWebhook"]
    msg = {"cmd": "AddWebhook", "url": "https://e.com/h", "events": ["job.pushed"]}
    await router.dispatch([(command, Request("AddWebhook", msg, got))])
    assert got.replies == []  # nothing answered before the commit
    (submit, release) = committer.log
    assert submit == ("submit", ["webhook"])
    assert release[0] == "release" and release[1][0]["data"]["createdAt"] == 7
    refused = Request("AddWebhook", {"url": "http://10.0.0.1/", "events": ["job.pushed"]}, got)
    await router.dispatch([(command, refused)])
    assert got.replies[0]["ok"] is False and len(committer.log) == 2
