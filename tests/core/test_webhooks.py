"""The webhook core, sans IO: the SSRF guard's verdicts, the event -> payload mapping,
the registry's lookups, and the commands' writes (the broker records a reply waits for)."""

from __future__ import annotations

import ipaddress
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trioqueue.core.commands.webhooks import (
    add_webhook,
    list_webhooks,
    remove_webhook,
    set_webhook_enabled,
)
from trioqueue.core.committed import Committed
from trioqueue.core.errors import Refused
from trioqueue.core.webhooks.registry import Webhook, WebhookRegistry, webhook_payload
from trioqueue.core.webhooks.urls import address_literal, check_url, refused_address
from trioqueue.core.writes import PutBrokerRecord

NOW = 1_700_000_000_000
GUARD = "Webhook URL must not target localhost, private or internal hosts"


class Scope:
    def __init__(self) -> None:
        self.webhooks = WebhookRegistry()


# ------------------------------------------------------------------ the SSRF guard


@pytest.mark.parametrize("url", [
    "https://example.com/hook", "http://example.com:8080/a?b=c",
    "http://93.184.216.34/x", "http://[2606:4700::1111]/x", "http://cafe.de/x",
])
def test_public_urls_pass(url: str) -> None:
    assert check_url(url, allow_private=False) == url


@pytest.mark.parametrize("url", [
    "http://\uff21\uff22\uff23.com/h",  # full-width letters
    "http://\u2460\u2461\u2466.0.0.1/h",  # circled digits
    "http://\uff11\uff12\uff17.\uff10.\uff10.\uff11/h",  # full-width digits
    "http://ab\u00adc.com/h",  # a soft hyphen
    "http://ex\u200bample.com/h",  # a zero-width space
    "http://ab\tc.com/h", "http://ab\x00c.com/h", "http://example.com/\x7f",
    "http://example.com/a\nb", "http://0177.0.0.1/h", "http://[1.2.3.4]/h",
    "http://exa mple.com/h", "http://ex%41mple.com/h", "http://[fe80::1%25eth0]/h",
    "http://example.com:0/h",
])
def test_urls_delivery_cannot_send_to_are_refused(url: str) -> None:
    """Each passed the old check (urllib) and made the delivery's parser (httpx) raise,
    which stopped the broker; or names a host no resolver reads."""
    with pytest.raises(Refused) as caught:
        check_url(url, allow_private=True)
    assert caught.value.message == "Invalid webhook URL"


@pytest.mark.parametrize(("url", "normal"), [
    ("HTTPS://Example.COM/", "https://example.com/"),
    ("HTTP://Example.com:80/x", "http://example.com/x"),
    ("http://b\u00fccher.de/x", "http://xn--bcher-kva.de/x"),
    ("http://example\u3002com/x", "http://example.com/x"),  # an ideographic full stop
    ("http://example.com/a b?q=\u00e9", "http://example.com/a%20b?q=%C3%A9"),
])
def test_a_url_is_kept_in_the_form_delivery_sends_to(url: str, normal: str) -> None:
    assert check_url(url, allow_private=False) == normal


@pytest.mark.parametrize("url", [
    "http://127\u30020\u30020\u30021/x", "http://127\uff0e0\uff0e0\uff0e1/x",
    "http://localhost\u3002/x", "http://LOCALHOST\uff0e/x",
])
def test_the_guard_judges_the_host_delivery_connects_to(url: str) -> None:
    """Dots a URL parser reads as full stops: the host is 127.0.0.1 or localhost."""
    with pytest.raises(Refused, match=GUARD):
        check_url(url, allow_private=False)


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=30), st.sampled_from(["", ":8080"]))
def test_every_url_accepted_is_one_delivery_parses_as_stored(host: str, port: str) -> None:
    try:
        url = check_url(f"http://{host}{port}/h", allow_private=True)
    except Refused:
        return
    assert str(httpx.URL(url)) == url


@pytest.mark.parametrize("url", [
    "http://localhost/", "http://foo.localhost/", "http://127.0.0.1:1/",
    "http://127.1/", "http://2130706433/", "http://0x7f.1/", "http://017700000001/",
    "http://10.0.0.1/", "http://192.168.0.1/", "http://172.31.255.255/",
    "http://169.254.169.254/", "http://[fd00::1]/", "http://[::ffff:10.0.0.1]/",
    "http://metadata.google.internal/", "http://instance-data/", "http://printer.local/",
    "http://[::]/", "http://224.0.0.1/",
])
def test_internal_hosts_refused(url: str) -> None:
    with pytest.raises(Refused, match=GUARD):
        check_url(url, allow_private=False)


def test_allow_private_lets_internal_hosts_through_but_not_other_schemes() -> None:
    assert check_url("http://127.0.0.1:9/x", allow_private=True)
    with pytest.raises(Refused, match="must use http or https"):
        check_url("file:///etc/passwd", allow_private=True)


@pytest.mark.parametrize(("url", "error"), [
    (None, "url is required"), ("", "url is required"), (5, "url is required"),
    ("http://example.com:99999/", "Invalid webhook URL"), ("https:///x", "Invalid webhook URL"),
    ("javascript:alert(1)", "Webhook URL must use http or https"),
    ("http://example.com/" + "x" * 2030, "Webhook URL too long (max 2048 characters)"),
    # stored percent-encoded, past the maximum
    ("http://example.com/" + "\u00e9" * 400, "Webhook URL too long (max 2048 characters)"),
    ("http://example.com/" + "\U0001f600" * 1000, "Webhook URL too long (max 2048 characters)"),
    ("http://example.com/" + " " * 700, "Webhook URL too long (max 2048 characters)"),
    ("http://" + ";" * 700 + "@example.com/", "Webhook URL too long (max 2048 characters)"),
])
def test_malformed_urls(url: Any, error: str) -> None:
    with pytest.raises(Refused) as caught:
        check_url(url, allow_private=False)
    assert caught.value.message == error


def test_the_longest_url_allowed() -> None:
    url = "http://example.com/" + "x" * (2048 - 19)
    assert len(url) == 2048 and check_url(url, allow_private=False)


@pytest.mark.parametrize(("address", "refused"), [
    ("127.0.0.1", True), ("169.254.169.254", True), ("10.9.8.7", True), ("0.0.0.0", True),
    ("100.64.1.1", True), ("::1", True), ("fe80::1", True), ("::ffff:127.0.0.1", True),
    ("2002:7f00:1::", True), ("8.8.8.8", False), ("2001:4860:4860::8888", False),
])
def test_resolved_addresses(address: str, refused: bool) -> None:
    assert refused_address(ipaddress.ip_address(address)) is refused


@pytest.mark.parametrize(("address", "refused"), [
    # NAT64's well-known prefix: the IPv4 address in its last 32 bits decides
    ("64:ff9b::7f00:1", True), ("64:ff9b::a9fe:a9fe", True), ("64:ff9b::a00:7", True),
    ("64:ff9b::808:808", False),
    # the local-use NAT64 prefix: where it holds the IPv4 address is the network's
    # choice, and it is not globally reachable
    ("64:ff9b:1::7f00:1", True), ("64:ff9b:1::808:808", True),
    # IPv4-compatible (::a.b.c.d) and IPv4-translated (::ffff:0:a.b.c.d)
    ("::7f00:1", True), ("::a9fe:a9fe", True), ("::808:808", False),
    ("::ffff:0:7f00:1", True), ("::ffff:0:c0a8:101", True), ("::ffff:0:808:808", False),
    # site-local, deprecated but still routed by some networks
    ("fec0::1", True), ("feff::1", True),
    # 6to4 and Teredo: refused when an IPv4 address they hold would be
    ("2002:a00:1::", True), ("2002:a9fe:a9fe::1", True), ("2002:808:808::", False),
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", True),  # client 192.0.2.45
    ("2001:0:7f00:1::", True),  # server 127.0.0.1
    ("::ffff:808:808", False),
])
def test_ipv6_forms_that_hold_an_ipv4_address(address: str, refused: bool) -> None:
    assert refused_address(ipaddress.ip_address(address)) is refused


@pytest.mark.parametrize("host", [
    "[64:ff9b::127.0.0.1]", "[64:ff9b::a9fe:a9fe]", "[64:ff9b:1::10.0.0.1]",
    "[::127.0.0.1]", "[::169.254.169.254]", "[::ffff:0:127.0.0.1]", "[::ffff:0:10.1.2.3]",
    "[fec0::1]", "[2002:7f00:1::]", "[2001:0:4136:e378:8000:63bf:3fff:fdd2]",
])
def test_ipv6_literals_that_hold_a_refused_ipv4_address(host: str) -> None:
    with pytest.raises(Refused, match=GUARD):
        check_url(f"http://{host}/h", allow_private=False)


def test_address_literal_reads_what_the_resolver_reads() -> None:
    assert address_literal("2130706433") == ipaddress.ip_address("127.0.0.1")
    assert address_literal("[::1]") == ipaddress.ip_address("::1")
    assert address_literal("example.com") is None
    assert address_literal("beef") is None


# ------------------------------------------------------------------ payloads


def event(kind: str, **extra: Any) -> dict[str, Any]:
    return {"eventType": kind, "queue": "q", "jobId": "j1", "timestamp": float(NOW), **extra}


def test_payloads() -> None:
    base = {"timestamp": NOW, "jobId": "j1", "queue": "q"}
    assert webhook_payload(event("pushed")) == {"event": "job.pushed", **base}
    assert webhook_payload(event("pulled")) == {"event": "job.started", **base}
    assert webhook_payload(event("completed", data={"r": 1})) == {
        "event": "job.completed", **base, "data": {"r": 1}}
    assert webhook_payload(event("failed", error="boom", data={}, terminal=True)) == {
        "event": "job.failed", **base, "error": "boom"}
    assert webhook_payload(event("failed", error="boom")) == {
        "event": "job.failed", **base, "error": "boom"}  # no flag: final (lock expiry)
    assert webhook_payload(event("progress", progress=50.0, data={})) == {
        "event": "job.progress", **base, "progress": 50.0}
    assert isinstance(webhook_payload(event("pushed"))["timestamp"], int)  # type: ignore[index]


@pytest.mark.parametrize("kind", ["retried", "stalled", "removed", "delayed", "drained"])
def test_events_no_webhook_takes(kind: str) -> None:
    assert webhook_payload(event(kind)) is None


def test_a_failure_followed_by_a_retry_is_not_sent() -> None:
    assert webhook_payload(event("failed", error="x", terminal=False)) is None


# ------------------------------------------------------------------ the registry


def test_watches_and_matching() -> None:
    registry = WebhookRegistry()
    assert not registry.watches("a")
    only_a = registry.new("https://e.com/1", ["job.pushed"], "a", None, NOW)
    assert registry.watches("a") and not registry.watches("b")
    every = registry.new("https://e.com/2", ["job.pushed", "job.failed"], None, None, NOW)
    assert registry.watches("b")
    assert registry.matching("a", "job.pushed") == [every, only_a]
    assert registry.matching("b", "job.failed") == [every]
    assert registry.matching("a", "job.progress") == []
    registry.set_enabled(every, False)
    assert not registry.watches("b") and registry.matching("a", "job.pushed") == [only_a]
    assert registry.stats() == {"total": 2, "enabled": 1}
    removed: list[str] = []
    registry.on_removed = removed.append
    registry.remove(only_a.id)
    assert removed == [only_a.id] and not registry.watches("a")


def test_record_round_trip_keeps_the_secret_and_not_the_counters() -> None:
    hook = Webhook(id="w", url="https://e.com", events=["job.pushed"], queue=None,
                   secret="s", created_at=NOW, enabled=False, success_count=4)
    back = Webhook.from_record(hook.record())
    assert (back.id, back.url, back.events, back.queue, back.secret, back.created_at,
            back.enabled, back.success_count) == ("w", "https://e.com", ["job.pushed"],
                                                  None, "s", NOW, False, 0)
    assert "secret" not in hook.wire()


# ------------------------------------------------------------------ the commands


def test_add_writes_the_record_the_reply_waits_for() -> None:
    scope = Scope()
    answer = add_webhook(scope, {"url": "https://e.com/h", "events": ["job.pushed"] * 2,
                                 "queue": "q", "secret": "s"}, NOW, None)
    assert isinstance(answer, Committed)
    data = answer.reply["data"]
    assert data["events"] == ["job.pushed"] and data["queue"] == "q"
    assert data["createdAt"] == NOW
    (op,) = answer.writes.ops
    assert op == PutBrokerRecord("webhook", data["webhookId"],
                                 scope.webhooks.hooks[data["webhookId"]].record())
    assert op.value is not None and op.value["secret"] == "s"


def test_set_enabled_and_remove_write_and_refuse_unknown_ids() -> None:
    scope = Scope()
    hook = scope.webhooks.new("https://e.com", ["job.pushed"], None, None, NOW)
    answer = set_webhook_enabled(scope, {"id": hook.id, "enabled": False}, NOW, None)
    assert answer.reply == {} and answer.writes.ops[0].value["enabled"] is False  # type: ignore[index]
    with pytest.raises(Refused, match="enabled must be a boolean"):
        set_webhook_enabled(scope, {"id": hook.id, "enabled": "no"}, NOW, None)
    with pytest.raises(Refused, match="Webhook not found"):
        set_webhook_enabled(scope, {"id": "other", "enabled": True}, NOW, None)
    answer = remove_webhook(scope, {"webhookId": hook.id}, NOW, None)
    assert answer.reply == {"data": {"removed": True}}
    assert answer.writes.ops == [PutBrokerRecord("webhook", hook.id, None)]
    with pytest.raises(Refused, match="Webhook not found"):
        remove_webhook(scope, {"webhookId": hook.id}, NOW, None)
    with pytest.raises(Refused, match="webhookId is required"):
        remove_webhook(scope, {}, NOW, None)


def test_refused_add_changes_nothing() -> None:
    scope = Scope()
    with pytest.raises(Refused):
        add_webhook(scope, {"url": "http://10.0.0.1/", "events": ["job.pushed"]}, NOW, None)
    with pytest.raises(Refused, match="Queue name"):
        add_webhook(scope, {"url": "https://e.com", "events": ["job.pushed"], "queue": ""},
                    NOW, None)
    assert list_webhooks(scope, {}, NOW, None) == {
        "data": {"webhooks": [], "stats": {"total": 0, "enabled": 0}}}


def test_a_reload_from_the_table_keeps_the_webhooks_still_there() -> None:
    """A cluster's reload (cluster/webhooks.py): a webhook still stored keeps its
    object, so its delivery task and counters go on; one gone is removed, with its
    deliveries; a new one is added; ``enabled`` is the table's. Only the commands'
    own changes count as this broker's changes."""
    registry = WebhookRegistry()
    removed: list[str] = []
    registry.on_removed = removed.append
    kept = registry.new("http://h/kept", ["job.pushed"], "q", None, NOW)
    registry.new("http://h/gone", ["job.pushed"], None, None, NOW)
    kept.success_count = 7
    changes = registry.changes
    assert changes == 2
    registry.replace([
        {**kept.record(), "enabled": False},
        {"id": "new", "url": "http://h/new", "events": ["job.failed"], "queue": "q",
         "secret": "s", "createdAt": NOW}])
    assert registry.changes == changes
    assert list(registry.hooks) == [kept.id, "new"] and registry.hooks[kept.id] is kept
    assert kept.success_count == 7 and not kept.enabled
    assert len(removed) == 1 and removed[0] != kept.id
    assert [h.id for h in registry.matching("q", "job.failed")] == ["new"]
    assert not registry.matching("q", "job.pushed")
