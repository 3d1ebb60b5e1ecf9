"""The dashboard's admin pages in a real browser: dead letters, crons, webhooks and
workers, each driven through the page and checked against the broker's REST routes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from .conftest import Broker

# (a machine without the playwright package skips this module, saying why; CI has it)
expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is missing: pip install -e "
    "'.[test]'").expect


def dead_letter(broker: Broker, queue: str) -> str:
    """A job failed for good over REST (one attempt, pulled with an owner, failed)."""
    job_id = broker.call("POST", f"/queues/{queue}/jobs",
                         json={"name": "send", "data": {}, "maxAttempts": 1})["id"]
    pulled = broker.call("POST", f"/queues/{queue}/jobs/pull-batch",
                         json={"count": 1, "owner": "test"})
    assert [job["id"] for job in pulled["jobs"]] == [job_id]
    broker.call("POST", f"/jobs/{job_id}/fail",
                json={"token": pulled["tokens"][0], "error": "smtp refused"})
    return job_id


def dead_letters_of_two_reasons(broker: Broker, queue: str) -> tuple[str, str]:
    """A job that ran out of attempts and one discarded (reason ``unknown``)."""
    failed = dead_letter(broker, queue)
    discarded = broker.call("POST", f"/queues/{queue}/jobs", json={"data": {}})["id"]
    broker.call("POST", f"/jobs/{discarded}/discard")
    return failed, discarded


def fill_cron_form(page: Any, **fields: str) -> None:
    """Fill the crons page's form; ``fields`` are its inputs' names."""
    page.get_by_test_id("cron-form").wait_for()
    for name, value in fields.items():
        page.get_by_test_id("cron-form").locator(f"input[name={name}]").fill(value)


def accept_confirmations(page: Any) -> None:
    page.on("dialog", lambda dialog: dialog.accept())


def test_retrying_a_dead_letter_takes_it_out_of_the_dlq(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    kept, retried = dead_letter(broker, "mail"), dead_letter(broker, "mail")
    page.goto(broker.url + "/#/dlq/mail")
    expect(page.get_by_test_id("dlq-count")).to_have_text("2")
    row = page.get_by_test_id(f"dlq-row-{retried}").locator("xpath=ancestor::tr")
    expect(row).to_contain_text("smtp refused")
    expect(row).to_contain_text("max_attempts_exceeded")
    page.get_by_test_id(f"dlq-retry-{retried}").click()
    expect(page.get_by_test_id(f"dlq-row-{retried}")).to_have_count(0)
    expect(page.get_by_test_id("dlq-count")).to_have_text("1")
    expect(page.get_by_test_id(f"dlq-row-{kept}")).to_be_visible()
    assert broker.call("GET", f"/jobs/{retried}/state")["state"] == "waiting"


def test_the_dlq_is_filtered_by_reason_and_purged_after_a_confirmation(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    failed, discarded = dead_letters_of_two_reasons(broker, "mail")
    page.goto(broker.url + "/#/dlq/mail")
    expect(page.get_by_test_id("dlq-count")).to_have_text("2")
    page.get_by_test_id("dlq-reason-max_attempts_exceeded").click()
    expect(page.get_by_test_id("dlq-count")).to_have_text("1")
    expect(page.get_by_test_id(f"dlq-row-{discarded}")).to_have_count(0)
    expect(page.get_by_test_id(f"dlq-row-{failed}")).to_be_visible()
    accept_confirmations(page)
    page.get_by_test_id("dlq-purge").click()
    expect(page.get_by_test_id("dlq-count")).to_have_text("0")
    assert broker.call("GET", "/queues/mail/dlq")["entries"] == []


def test_retry_filtered_requeues_only_the_reason_shown(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    failed, discarded = dead_letters_of_two_reasons(broker, "mail")
    page.goto(broker.url + "/#/dlq/mail")
    page.get_by_test_id("dlq-reason-unknown").click()
    expect(page.get_by_test_id("dlq-count")).to_have_text("1")
    accept_confirmations(page)
    page.get_by_test_id("dlq-retry-filtered").click()
    expect(page.get_by_test_id("dlq-notice")).to_contain_text("1 re-queued")
    assert broker.call("GET", f"/jobs/{discarded}/state")["state"] == "waiting"
    assert [entry["job"]["id"] for entry in broker.call("GET", "/queues/mail/dlq")["entries"]
            ] == [failed]


def test_a_dead_letter_arriving_shows_up_live(start_broker: Callable[..., Broker],
                                             page: Any) -> None:
    broker = start_broker()
    page.goto(broker.url + "/#/dlq/mail")
    expect(page.get_by_test_id("dlq-count")).to_have_text("0")
    job_id = dead_letter(broker, "mail")
    expect(page.get_by_test_id(f"dlq-row-{job_id}")).to_be_visible()


def test_a_dead_letter_arriving_before_the_subscription_still_shows_up(
        start_broker: Callable[..., Broker], page: Any) -> None:
    """The page's first load and its live subscription are two steps: a change between
    them reaches the page through the reload that the subscription's reply triggers."""
    broker = start_broker()
    made: list[str] = []

    def hold_subscribe(ws: Any) -> None:
        server = ws.connect_to_server()

        def to_server(message: str | bytes) -> None:
            if not made and '"Subscribe"' in str(message):
                made.append(dead_letter(broker, "mail"))
            server.send(message)
        ws.on_message(to_server)

    page.route_web_socket("**/ws", hold_subscribe)
    page.goto(broker.url + "/#/dlq/mail")
    expect(page.get_by_test_id("dlq-count")).to_have_text("1")
    expect(page.get_by_test_id(f"dlq-row-{made[0]}")).to_be_visible()


def test_the_dlq_settings_are_saved(start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    page.goto(broker.url + "/#/dlq/mail")
    form = page.get_by_test_id("dlq-config")
    form.locator("input[name=maxEntries]").fill("25")
    form.locator("input[name=autoRetry]").check()
    page.get_by_test_id("dlq-config-save").click()
    expect(form).to_contain_text("saved")
    config = broker.call("GET", "/queues/mail/dlq-config")["config"]
    assert config["maxEntries"] == 25 and config["autoRetry"] is True


def test_a_cron_is_added_and_deleted(start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    page.goto(broker.url + "/#/crons")
    fill_cron_form(page, name="nightly", queue="reports", every="60000",
                   data='{"kind": "daily"}')
    page.get_by_test_id("cron-add").click()
    row = page.get_by_test_id("cron-row-nightly").locator("xpath=ancestor::tr")
    expect(row).to_contain_text("every 60,000 ms")
    cron = broker.call("GET", "/crons/nightly")["cron"]
    assert cron["queue"] == "reports" and cron["repeatEvery"] == 60000
    accept_confirmations(page)
    page.get_by_test_id("cron-delete-nightly").click()
    expect(page.get_by_test_id("cron-row-nightly")).to_have_count(0)
    assert broker.call("GET", "/crons")["crons"] == []


def test_a_cron_with_bad_data_is_refused_on_the_page(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    page.goto(broker.url + "/#/crons")
    fill_cron_form(page, name="broken", queue="reports", pattern="*/5 * * * *",
                   data="{not json")
    page.get_by_test_id("cron-add").click()
    expect(page.get_by_test_id("cron-form").get_by_role("alert")).to_contain_text("not JSON")
    assert broker.call("GET", "/crons")["crons"] == []


def test_a_webhook_is_disabled_enabled_and_deleted(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker(webhook_allow_private=True)
    hook_id = broker.call("POST", "/webhooks", json={
        "url": "http://127.0.0.1:9/hook", "events": ["job.failed"], "queue": "mail"},
    )["data"]["webhookId"]
    page.goto(broker.url + "/#/webhooks")
    toggle = page.get_by_test_id(f"webhook-toggle-{hook_id}")
    expect(toggle).to_have_text("enabled")
    toggle.click()
    expect(toggle).to_have_text("disabled")
    assert broker.call("GET", "/webhooks")["data"]["webhooks"][0]["enabled"] is False
    toggle.click()
    expect(toggle).to_have_text("enabled")
    accept_confirmations(page)
    page.get_by_test_id(f"webhook-delete-{hook_id}").click()
    expect(page.get_by_test_id(f"webhook-row-{hook_id}")).to_have_count(0)
    assert broker.call("GET", "/webhooks")["data"]["webhooks"] == []


def test_a_webhook_is_added_from_the_form(start_broker: Callable[..., Broker],
                                          page: Any) -> None:
    broker = start_broker(webhook_allow_private=True)
    page.goto(broker.url + "/#/webhooks")
    form = page.get_by_test_id("webhook-form")
    form.locator("input[name=url]").fill("http://127.0.0.1:9/added")
    form.locator("input[name=queue]").fill("mail")
    page.get_by_test_id("webhook-add").click()
    expect(page.get_by_test_id("webhook-table")).to_contain_text("http://127.0.0.1:9/added")
    hook = broker.call("GET", "/webhooks")["data"]["webhooks"][0]
    assert hook["queue"] == "mail" and set(hook["events"]) == {"job.completed", "job.failed"}


def test_the_workers_page_lists_a_registered_worker(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    worker = broker.call("POST", "/workers", json={
        "name": "mailer-1", "queues": ["mail"], "concurrency": 4})["data"]
    broker.call("POST", f"/workers/{worker['workerId']}/heartbeat",
                json={"activeJobs": 2, "processed": 7, "failed": 1})
    page.goto(broker.url + "/#/workers")
    row = page.get_by_test_id(f"worker-row-{worker['workerId']}").locator("xpath=ancestor::tr")
    expect(row).to_contain_text("mailer-1")
    expect(row).to_contain_text("2 / 4")
    expect(row.locator("td").nth(6)).to_have_text("7")
    expect(row.locator("td").nth(7)).to_have_text("1")
