"""Webhook deliveries: job events POSTed to the webhooks that watch them, off every queue.

Queue actors publish a step's events through a per-queue sink (:class:`QueueEventSink`),
which hands them to the TCP/WebSocket hub and, when an enabled webhook watches that
queue, to :meth:`WebhookDelivery.offer`. ``offer`` never waits: it maps each event to
its webhook payload and appends it to the buffer of each webhook it goes to, bounded
(``webhook_buffer_events``; past it the event is dropped and counted in the webhook's
``droppedCount``). Each webhook has ONE task, started with its first event, that sends
its buffer in order, one request at a time, with its own HTTP client. So a receiver
that is slow, dead or never answers holds up only its own webhook's buffer: never a
queue (which only appended to a buffer) and never another webhook (own task, own
connection pool).

A delivery is a POST of the payload as JSON with ``X-Webhook-Event``,
``X-Webhook-Timestamp`` and, with a secret, ``X-Webhook-Signature`` (hex HMAC-SHA256
of the body), as bunqueue sends it. The body is made a slice at a time (a completed
event may carry a result of a million small maps: one ``json.dumps`` of it held the
event loop for hundreds of milliseconds), its signature updated a piece at a time, and
sent as those pieces with its length given. Each attempt has a connect timeout and a timeout
on the whole request; a non-2xx answer, an error or a timeout is retried after
``webhook_retry_delay_ms`` x attempt, up to ``webhook_max_attempts`` attempts in all,
then counted in ``failureCount``; a 2xx counts in ``successCount``. Redirects are not
followed (one could lead to an internal address).

Before each attempt the URL's host is resolved here and every address it resolves to
is checked by the SSRF guard (:func:`~trioqueue.core.webhooks.urls.refused_address`);
the request then goes to that checked address (Host header and TLS name kept), so a
name cannot resolve to a public address for the check and a private one for the
connection. A refused address fails the delivery at once (no retry). With
``webhook_allow_private`` (development) neither check is made.

A delivery never stops the broker. The URL is parsed as AddWebhook parsed it
(:func:`~trioqueue.core.webhooks.urls.delivery_url`), once per webhook task; a URL
stored before AddWebhook refused what this parser refuses makes each of that webhook's
events a failure, said once in the log. Any error of an attempt other than the
transport's fails that delivery (counted, not retried), and an error escaping a
webhook's task ends only that task: its buffered events are counted as failures and
its next event starts a new one.

The tasks run in this component's nursery, itself a task of the broker's: stopped at
shutdown with everything else. Deliveries are at most once per attempt series and
fire-and-forget: events buffered when the broker stops are not delivered.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import trio

from ..config import Config
from ..core.broker_events import broker_event
from ..core.large_values.json_slices import json_bytes_steps
from ..core.large_values.slicing import Slicer, run_paused
from ..core.webhooks.registry import Webhook, WebhookRegistry, webhook_payload
from ..core.webhooks.urls import delivery_url, refused_address
from .events import EventHub

log = logging.getLogger("trioqueue.webhooks")

# host, port -> the addresses it resolves to (a test replaces it to play DNS)
Resolve = Callable[[str, int], Awaitable[list[str]]]


async def resolve_host(host: str, port: int) -> list[str]:
    infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]).split("%", 1)[0] for info in infos]


class AddressRefused(Exception):
    """The webhook's host resolves to an address the SSRF guard refuses."""


class _Outbox:
    """One webhook's buffer of payloads and its task's cancel scope."""

    __slots__ = ("pending", "wake", "scope")

    def __init__(self) -> None:
        self.pending: deque[dict[str, Any]] = deque()
        self.wake = trio.Event()
        self.scope = trio.CancelScope()


class WebhookDelivery:
    def __init__(self, registry: WebhookRegistry, config: Config, *,
                 now_ms: Callable[[], int], resolve: Resolve | None = None) -> None:
        self.registry = registry
        registry.allow_private = config.webhook_allow_private
        registry.on_removed = self.forget
        self._max_attempts = config.webhook_max_attempts
        self._retry_delay_s = config.webhook_retry_delay_ms / 1000
        self._connect_timeout_s = config.webhook_connect_timeout_s
        self._request_timeout_s = config.webhook_request_timeout_s
        self._buffer = config.webhook_buffer_events
        self._now_ms = now_ms
        # read at each use, so a test may swap the module's resolver
        self._resolve = resolve
        self._outboxes: dict[str, _Outbox] = {}
        self._nursery: trio.Nursery | None = None
        self._tls: ssl.SSLContext | None = None
        # Where webhook:fired and webhook:failed go (the router's announce; None: nowhere).
        self.announce: Callable[[list[dict[str, Any]]], None] | None = None

    def sink(self, hub: EventHub, queue: str) -> QueueEventSink:
        """The event sink of queue ``queue``'s actor."""
        return QueueEventSink(hub, self, queue)

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        # Built once, in a thread: loading the CA bundle takes tens of milliseconds,
        # which each webhook's client would otherwise spend on the event loop.
        self._tls = await trio.to_thread.run_sync(ssl.create_default_context)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # ------------------------------------------------------------------ taking events

    def watches(self, queue: str) -> bool:
        return self.registry.watches(queue)

    def offer(self, queue: str, events: list[dict[str, Any]]) -> None:
        """Buffer ``events`` of ``queue`` for the webhooks they go to (never waits)."""
        registry = self.registry
        for event in events:
            payload = webhook_payload(event)
            if payload is None:
                continue
            for hook in registry.matching(queue, payload["event"]):
                self._put(hook, payload)

    def _put(self, hook: Webhook, payload: dict[str, Any]) -> None:
        box = self._outboxes.get(hook.id)
        if box is None:
            if self._nursery is None:
                return  # not started (or stopped): nothing could send it
            box = self._outboxes[hook.id] = _Outbox()
            self._nursery.start_soon(self._serve, hook, box, name=f"webhook:{hook.id}")
        if len(box.pending) >= self._buffer:
            hook.dropped_count += 1
            return
        box.pending.append(payload)
        box.wake.set()

    def forget(self, hook_id: str) -> None:
        """A removed webhook: its buffer is dropped and its task stopped."""
        box = self._outboxes.pop(hook_id, None)
        if box is not None:
            box.pending.clear()
            box.scope.cancel()

    # ------------------------------------------------------------------ sending

    async def _serve(self, hook: Webhook, box: _Outbox) -> None:
        with box.scope:
            try:
                await self._send_all(hook, box)
            except Exception:  # a bug here is this webhook's failure, never the broker's
                log.exception("webhook %s stopped; its buffered events count as failures",
                              hook.id)
                hook.failure_count += len(box.pending)
                box.pending.clear()
                if self._outboxes.get(hook.id) is box:
                    del self._outboxes[hook.id]  # its next event starts a new task

    async def _send_all(self, hook: Webhook, box: _Outbox) -> None:
        url = self._url_of(hook)
        timeout = httpx.Timeout(self._request_timeout_s, connect=self._connect_timeout_s)
        async with httpx.AsyncClient(timeout=timeout, follow_redirects=False,
                                     trust_env=False, verify=self._tls or True,
                                     limits=httpx.Limits(max_connections=1)) as client:
            while True:
                while not box.pending:
                    box.wake = trio.Event()
                    await box.wake.wait()
                if url is None:
                    box.pending.popleft()
                    hook.failure_count += 1
                else:  # (the payload held by _deliver alone: it lets go once encoded)
                    await self._deliver(client, hook, url, box.pending.popleft())

    @staticmethod
    def _url_of(hook: Webhook) -> httpx.URL | None:
        """The webhook's URL as parsed for sending; None (said once) for one no request
        can be sent to: stored before AddWebhook refused such URLs, its every event is
        a failure."""
        try:
            return delivery_url(hook.url)
        except Exception as exc:  # Refused, or a stored URL that is not even a string
            log.warning("webhook %s cannot be delivered to %.200r (%s): each of its events "
                        "counts as a failure; remove it and add it again", hook.id,
                        hook.url, getattr(exc, "message", exc))
            return None

    async def _deliver(self, client: httpx.AsyncClient, hook: Webhook, url: httpx.URL,
                       payload: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/json",
                   "X-Webhook-Event": payload["event"],
                   "X-Webhook-Timestamp": str(payload["timestamp"])}
        event = payload["event"]
        body = await _body_pieces(payload)
        del payload  # (its values are not needed past here)
        headers["Content-Length"] = str(sum(map(len, body)))
        if hook.secret:
            headers["X-Webhook-Signature"] = await _signature(hook.secret, body)
        error = "Webhook delivery failed after max retries"
        for attempt in range(1, self._max_attempts + 1):
            try:
                if await self._attempt(client, url, body, headers):
                    hook.success_count += 1
                    hook.last_triggered = self._now_ms()
                    self._tell("webhook:fired", hook, event)
                    return
            except AddressRefused as exc:
                log.warning("webhook %s not delivered: %s", hook.id, exc)
                error = str(exc)
                break
            except Exception as exc:  # whatever fails one attempt fails this delivery
                log.warning("webhook %s not delivered: %r", hook.id, exc)
                error = str(exc) or type(exc).__name__
                break
            if attempt < self._max_attempts:
                await trio.sleep(self._retry_delay_s * attempt)
        hook.failure_count += 1
        self._tell("webhook:failed", hook, event, error=error)

    def _tell(self, name: str, hook: Webhook, event: str, **more: Any) -> None:
        if self.announce is not None:
            self.announce([broker_event(name, self._now_ms(), webhookId=hook.id,
                                        url=hook.url, event=event, **more)])

    async def _attempt(self, client: httpx.AsyncClient, url: httpx.URL, body: list[bytes],
                       headers: dict[str, str]) -> bool:
        """One POST; True for a 2xx answer. Raises AddressRefused (no retry), and any
        error other than the transport's (not retried either)."""
        with trio.move_on_after(self._request_timeout_s):
            try:
                target, extra, extensions = await self._target(url)
                response = await client.post(target, content=_Pieces(body),
                                             headers={**headers, **extra},
                                             extensions=extensions)
            except (httpx.HTTPError, OSError) as exc:
                log.info("webhook delivery to %s failed: %r", url, exc)
                return False
            return 200 <= response.status_code < 300
        log.info("webhook delivery to %s timed out", url)
        return False

    async def _target(self, url: httpx.URL) -> tuple[httpx.URL, dict[str, str],
                                                      dict[str, Any]]:
        """Where to send: the URL pinned to an address the guard accepts. The host is
        resolved, checked and named (TLS) in its ASCII form, the one the URL holds."""
        if self.registry.allow_private:
            return url, {}, {}
        host = url.raw_host.decode("ascii")
        port = url.port or (443 if url.scheme == "https" else 80)
        resolve = self._resolve or resolve_host
        addresses = await resolve(host, port)
        if not addresses:
            raise OSError(f"{host} resolves to no address")
        for address in addresses:
            if refused_address(ipaddress.ip_address(address)):
                raise AddressRefused(f"{host} resolves to {address}, a refused address")
        extensions: dict[str, Any] = {}
        if url.scheme == "https":
            extensions["sni_hostname"] = host
        return (url.copy_with(host=addresses[0]), {"Host": url.netloc.decode("ascii")},
                extensions)


async def _body_pieces(payload: dict[str, Any]) -> list[bytes]:
    """The payload's compact JSON in UTF-8 (as ``JSON.stringify`` writes it), as pieces
    made a slice at a time."""
    slicer = Slicer()
    pieces: list[bytes] = await run_paused(json_bytes_steps(payload, slicer), slicer,
                                           trio.lowlevel.checkpoint)
    return pieces


async def _signature(secret: str, body: list[bytes]) -> str:
    """The hex HMAC-SHA256 of the body, a piece at a time (each about a quarter of a
    millisecond), with the loop given back now and then."""
    mac = hmac.new(secret.encode(), digestmod=hashlib.sha256)
    slicer = Slicer()
    for piece in body:
        mac.update(piece)
        slicer.look_soon()
        if slicer.due():
            await trio.lowlevel.checkpoint()
            slicer.restart()
    return mac.hexdigest()


class _Pieces:
    """A body sent as its pieces, one write each (a new one per attempt: a stream is
    read once)."""

    __slots__ = ("_pieces", "_at")

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces
        self._at = 0

    def __aiter__(self) -> _Pieces:
        return self

    async def __anext__(self) -> bytes:
        if self._at >= len(self._pieces):
            raise StopAsyncIteration
        self._at += 1
        return self._pieces[self._at - 1]


class QueueEventSink:
    """One queue actor's event sink: the hub's subscribers and the webhooks watching
    the queue. The queue builds events only while one of them listens."""

    __slots__ = ("_hub", "_delivery", "_queue")

    def __init__(self, hub: EventHub, delivery: WebhookDelivery, queue: str) -> None:
        self._hub = hub
        self._delivery = delivery
        self._queue = queue

    @property
    def active(self) -> bool:
        return self._hub.active or self._delivery.watches(self._queue)

    def publish(self, events: list[dict[str, Any]]) -> None:
        self._hub.publish(events)
        if self._delivery.watches(self._queue):
            self._delivery.offer(self._queue, events)
