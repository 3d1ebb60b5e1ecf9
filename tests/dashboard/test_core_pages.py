"""The dashboard's core pages in a real browser: overview, queues, a queue, a job, auth.

Each test drives the page as an operator would and checks what the page shows; the
screenshots of docs/dashboard/ are taken here (into a scratch folder unless
``$TRIOQUEUE_DASHBOARD_SCREENSHOTS`` names one: see conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import Broker

# (a machine without the playwright package skips this module, saying why; CI has it)
expect = pytest.importorskip(
    "playwright.sync_api", reason="the playwright package is missing: pip install -e "
    "'.[test]'").expect

# Live frames every 0.2 s rather than 5 s, so a test sees a snapshot quickly.
FAST = {"stats_snapshot_interval_s": 0.2}


def push(broker: Broker, queue: str, **job: Any) -> str:
    reply = broker.call("POST", f"/queues/{queue}/jobs", json={"data": {}, **job})
    return str(reply["id"])


def open_job(broker: Broker, page: Any, **job: Any) -> str:
    """Push a job to ``emails`` and open its page; its id."""
    job_id = push(broker, "emails", **job)
    page.goto(broker.url + f"/#/jobs/{job_id}")
    return job_id


def set_priority(page: Any, text: str) -> None:
    """Type ``text`` in the job page's priority box and press its button."""
    page.get_by_test_id("job-priority-input").fill(text)
    page.get_by_test_id("job-action-priority").click()


def test_the_overview_shows_counts_and_updates_them_live(
        start_broker: Callable[..., Broker], page: Any, screenshots: Path) -> None:
    broker = start_broker(**FAST)
    push(broker, "emails", data={"to": "a@example.org"})
    page.goto(broker.url + "/#/")
    expect(page.get_by_test_id("count-waiting")).to_have_text("1")
    expect(page.get_by_test_id("live-status")).to_have_text("live")
    for n in range(4):
        push(broker, "emails", data={"n": n})
    # From a stats:snapshot frame: the page is not reloaded.
    expect(page.get_by_test_id("count-waiting")).to_have_text("5")
    for state in ("active", "delayed", "completed", "failed", "dlq"):
        expect(page.get_by_test_id(f"count-{state}")).to_have_text("0")
    expect(page.get_by_test_id("latency")).to_contain_text("push")
    expect(page.get_by_test_id("storage")).to_contain_text("memory")
    # A job failed for good while the page is open: failed and dlq follow, live.
    push(broker, "sms", maxAttempts=1)
    pulled = broker.call("POST", "/queues/sms/jobs/pull-batch", json={"count": 1,
                                                                     "owner": "w"})
    broker.call("POST", f"/jobs/{pulled['jobs'][0]['id']}/fail",
                json={"error": "boom", "token": pulled["tokens"][0]})
    expect(page.get_by_test_id("count-failed")).to_have_text("1")
    expect(page.get_by_test_id("count-dlq")).to_have_text("1")
    page.wait_for_selector("[data-testid=throughput-chart] canvas")
    page.screenshot(path=str(screenshots / "overview.png"))


def test_the_overview_counts_prioritized_jobs_once_before_any_live_frame(
        start_broker: Callable[..., Broker], page: Any) -> None:
    # No snapshot frame comes while the test runs: what the page shows is what it
    # loaded (Stats' waiting already holds the prioritized jobs).
    broker = start_broker(stats_snapshot_interval_s=60.0)
    for n in range(3):
        push(broker, "emails", data={"n": n})
    for n in range(2):
        push(broker, "emails", data={"n": n}, priority=5)
    stats = broker.call("GET", "/stats")["stats"]
    assert (stats["waiting"], stats["prioritized"]) == (5, 2)
    page.goto(broker.url + "/#/")
    expect(page.get_by_test_id("count-delayed")).to_have_text("0")
    expect(page.get_by_test_id("count-waiting")).to_have_text("5")


def test_a_pushed_queue_appears_and_its_count_changes_live(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    push(broker, "emails")
    page.goto(broker.url + "/#/queues")
    expect(page.get_by_test_id("queue-row-emails")).to_be_visible()
    expect(page.get_by_test_id("waiting-emails")).to_have_text("1")
    expect(page.get_by_test_id("live-status")).to_have_text("live")
    push(broker, "emails")
    push(broker, "emails")
    expect(page.get_by_test_id("waiting-emails")).to_have_text("3")
    # A queue created while the page is open joins the table without a reload.
    push(broker, "sms")
    expect(page.get_by_test_id("queue-row-sms")).to_be_visible()


def test_pausing_a_queue_from_the_page_shows_the_flag(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    push(broker, "emails")
    page.goto(broker.url + "/#/queues")
    expect(page.get_by_test_id("paused-emails")).to_have_text("no")
    page.get_by_test_id("action-pause-emails").click()
    expect(page.get_by_test_id("paused-emails")).to_have_text("yes")
    assert broker.call("GET", "/queues/emails/paused")["paused"] is True
    page.get_by_test_id("action-resume-emails").click()
    expect(page.get_by_test_id("paused-emails")).to_have_text("no")


def test_the_queues_table_shows_rate_and_concurrency_limits(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    push(broker, "emails")
    push(broker, "sms")
    broker.call("PUT", "/queues/emails/rate-limit", json={"limit": 10, "duration": 1000})
    broker.call("PUT", "/queues/emails/concurrency", json={"concurrency": 3})
    page.goto(broker.url + "/#/queues")
    expect(page.get_by_test_id("rate-emails")).to_have_text("10 / 1,000 ms")
    expect(page.get_by_test_id("concurrency-emails")).to_have_text("3")
    expect(page.get_by_test_id("rate-sms")).to_have_text("—")
    expect(page.get_by_test_id("concurrency-sms")).to_have_text("—")


def test_a_destructive_action_asks_first(start_broker: Callable[..., Broker],
                                         page: Any) -> None:
    broker = start_broker()
    push(broker, "emails")
    page.goto(broker.url + "/#/queues")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_test_id("action-drain-emails").click()
    # Declined: the click handler returned without calling the broker.
    assert broker.call("GET", "/queues/emails/counts")["counts"]["waiting"] == 1
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("action-drain-emails").click()
    expect(page.get_by_test_id("waiting-emails")).to_have_text("0")


def test_a_queue_lists_jobs_by_state_and_finds_one_by_custom_id(
        start_broker: Callable[..., Broker], page: Any, screenshots: Path) -> None:
    broker = start_broker()
    waiting = push(broker, "emails", name="send", data={"to": "b@example.org"})
    push(broker, "emails", name="later", delay=60_000)
    push(broker, "emails", name="keyed", jobId="order-42")
    page.goto(broker.url + "/#/queues/emails")
    expect(page.get_by_test_id(f"job-row-{waiting}")).to_be_visible()
    expect(page.get_by_test_id("qcount-waiting")).to_have_text("2")
    expect(page.get_by_test_id("qcount-delayed")).to_have_text("1")
    page.get_by_test_id("tab-delayed").click()
    expect(page.get_by_test_id("jobs-table")).to_contain_text("later")
    expect(page.get_by_test_id("jobs-table")).not_to_contain_text("send")
    page.get_by_test_id("tab-waiting").click()
    expect(page.get_by_test_id(f"job-row-{waiting}")).to_be_visible()
    expect(page.get_by_test_id("jobs-table")).not_to_contain_text("later")
    page.screenshot(path=str(screenshots / "queue.png"))
    page.get_by_test_id("job-search").fill("order-42")
    page.get_by_test_id("job-search-go").click()
    expect(page.get_by_test_id("job-id")).to_have_text("order-42")


def test_a_job_shows_its_logs_and_follows_it_live_to_its_error(
        start_broker: Callable[..., Broker], page: Any, screenshots: Path) -> None:
    broker = start_broker()
    job_id = push(broker, "emails", name="send", data={"to": "c@example.org"}, priority=2)
    broker.call("POST", f"/jobs/{job_id}/logs", json={"message": "connecting to smtp"})
    page.goto(broker.url + f"/#/jobs/{job_id}")
    expect(page.get_by_test_id("job-logs")).to_contain_text("connecting to smtp")
    expect(page.get_by_test_id("job-state")).to_have_text("prioritized")
    expect(page.get_by_test_id("job-data")).to_contain_text("c@example.org")
    expect(page.get_by_test_id("live-status")).to_have_text("live")
    # Pulled and failed over REST while the page is open: job events reload it.
    pulled = broker.call("GET", "/queues/emails/jobs", params={"timeout": 0})
    assert pulled["job"]["id"] == job_id
    expect(page.get_by_test_id("job-state")).to_have_text("active")
    broker.call("POST", f"/jobs/{job_id}/logs", json={"message": "smtp said no"})
    broker.call("POST", f"/jobs/{job_id}/fail",
                json={"error": "smtp refused", "stack": ["Traceback:", "  send()"]})
    expect(page.get_by_test_id("job-error")).to_have_text("smtp refused")
    expect(page.get_by_test_id("job-stack")).to_contain_text("send()")
    expect(page.get_by_test_id("job-logs")).to_contain_text("smtp said no")
    page.screenshot(path=str(screenshots / "job.png"), full_page=True)


def test_job_actions_change_priority_promote_and_remove(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker()
    open_job(broker, page, delay=60_000)
    expect(page.get_by_test_id("job-state")).to_have_text("delayed")
    set_priority(page, "9")
    expect(page.get_by_test_id("job-options")).to_contain_text('"priority": 9')
    page.get_by_test_id("job-action-promote").click()
    expect(page.get_by_test_id("job-state")).not_to_have_text("delayed")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("job-action-remove").click()
    expect(page.get_by_test_id("error")).to_contain_text("not found")


def test_a_priority_the_broker_refuses_is_refused_in_its_words(
        start_broker: Callable[..., Broker], page: Any) -> None:
    """The priority box is judged by the broker's validator: an emptied box is not a
    silent priority 0 but the broker's refusal, shown by the button; the job keeps 5."""
    broker = start_broker()
    job_id = open_job(broker, page, priority=5)
    expect(page.get_by_test_id("job-options")).to_contain_text('"priority": 5')
    set_priority(page, "")
    expect(page.locator(".action .error")).to_have_text("priority must be a number")
    assert broker.call("GET", f"/jobs/{job_id}")["job"]["priority"] == 5


def test_with_auth_on_the_page_asks_for_the_token_then_works(
        start_broker: Callable[..., Broker], page: Any) -> None:
    broker = start_broker(auth_tokens=["s3cret-token"], **FAST)
    push(broker, "emails")
    assert httpx.get(broker.url + "/stats").status_code == 401
    page.goto(broker.url + "/#/queues")
    page.get_by_test_id("token-input").fill("wrong")
    page.get_by_test_id("token-save").click()
    expect(page.get_by_test_id("token-input")).to_be_visible()
    page.get_by_test_id("token-input").fill("s3cret-token")
    page.get_by_test_id("token-save").click()
    expect(page.get_by_test_id("queue-row-emails")).to_be_visible()
    expect(page.get_by_test_id("live-status")).to_have_text("live")
    push(broker, "emails")
    expect(page.get_by_test_id("waiting-emails")).to_have_text("2")
    assert "s3cret" not in page.url
    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("token-input")).to_be_visible()
