"""Cron schedules in the sans-IO core: validation, slots, decisions, restart."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.repeating import crons as cr
from trioqueue.core.repeating.expressions import parse_cron

NOW = 1_700_000_000_000


def make(now: int = NOW, existing: cr.CronDef | None = None, **msg: Any) -> cr.CronDef:
    msg.setdefault("name", "c")
    msg.setdefault("queue", "q")
    if "schedule" not in msg:
        msg.setdefault("repeatEvery", 1000)
    return cr.parse_cron_command(msg, now, existing)


@pytest.mark.parametrize("msg, error", [
    ({"name": None}, "Cron name is required"),
    ({"name": "x" * 300}, "Cron name too long (max 256 characters)"),
    ({"queue": "bad name"}, "Queue name contains invalid characters"),
    ({"repeatEvery": None}, "Cron needs a schedule or repeatEvery"),
    ({"repeatEvery": 0}, "repeatEvery must be at least 1"),
    ({"repeatEvery": "100"}, "repeatEvery must be a number"),
    ({"schedule": "* *"}, "Invalid cron expression: * *"),
    ({"schedule": "* * * * *", "timezone": "Nowhere/Land"}, "Invalid timezone: Nowhere/Land"),
    ({"jobOptions": {"maxAttempts": "x"}}, "jobOptions.maxAttempts must be a number"),
    ({"jobOptions": {"backoff": -1}}, "jobOptions.backoff must be at least 0"),
    ({"jobOptions": 5}, "jobOptions must be an object"),
])
def test_refusals(msg: dict[str, Any], error: str) -> None:
    with pytest.raises(Refused) as info:
        make(**msg)
    assert info.value.message == error


def test_repeat_every_slots_are_anchored_to_the_schedule() -> None:
    defn = make(repeatEvery=1000)
    assert defn.next_run == NOW + 1000
    # fired 300 ms late: the next slot is still NOW + 2000, not 1300 ms later
    cr.advance(defn, NOW + 1300, fired=True)
    assert defn.next_run == NOW + 2000 and defn.executions == 1


def test_immediately_fires_at_creation_only() -> None:
    first = make(immediately=True)
    assert first.next_run == NOW
    cr.advance(first, NOW, fired=True)
    assert first.next_run == NOW + 1000
    again = make(NOW + 5000, existing=first, immediately=True)  # an upsert: not again
    assert again.next_run > NOW + 5000 and again.executions == 1


def test_job_message_from_the_template_and_overlap_key() -> None:
    defn = make(data={"a": 1}, jobName="job", priority=3, jobOptions={
        "maxAttempts": 2, "delay": 50, "tags": ["ignored"], "removeOnComplete": True})
    assert defn.job_message() == {
        "queue": "q", "name": "job", "data": {"a": 1}, "priority": 3, "maxAttempts": 2,
        "delay": 50, "removeOnComplete": True, "uniqueKey": "cron:c"}
    own = make(preventOverlap=False)
    assert "uniqueKey" not in own.job_message()
    keyed = make(uniqueKey="k", dedup={"ttl": 5})
    assert (keyed.job_message()["uniqueKey"], keyed.job_message()["dedup"]) == ("k", {"ttl": 5})


def test_decisions_max_limit_worker_and_overlap() -> None:
    defn = make(maxLimit=2, skipIfNoWorker=True)
    assert cr.decide(defn, NOW + 1000, has_worker=False) == (cr.SKIP, "no-worker")
    assert cr.decide(defn, NOW + 1000, has_worker=True) == (cr.FIRE, None)
    cr.advance(defn, NOW + 1000, fired=True)
    # the next slot comes 1000 ms later; one due 100 ms after a firing overlaps it
    assert cr.decide(defn, NOW + 1100, has_worker=True) == (cr.SKIP, "overlap")
    cr.advance(defn, NOW + 2000, fired=True)
    assert cr.decide(defn, NOW + 3000, has_worker=True) == (cr.EXHAUSTED, None)


def test_a_skip_moves_past_now_without_counting() -> None:
    defn = make()
    cr.advance(defn, NOW + 5500, fired=False)  # slots 1000..5000 are past: skipped
    assert defn.next_run == NOW + 6000 and defn.executions == 0


def test_restored_skips_missed_runs_when_asked() -> None:
    skipping = cr.CronDef.from_record(make().to_record())
    assert cr.restored(skipping, NOW + 10_500).next_run == NOW + 11_000
    catching = cr.CronDef.from_record(make(skipMissedOnRestart=False).to_record())
    assert cr.restored(catching, NOW + 10_500).next_run == NOW + 1000  # due at once


def test_registry_due_order_and_stale_entries() -> None:
    reg = cr.CronRegistry()
    for i in range(10_000):
        reg.put(make(name=f"c{i}", repeatEvery=1000 + i))
    assert reg.next_due() == NOW + 1000
    first = reg.by_name["c0"]
    reg.delete("c1")
    due = [d.name for d in reg.due(NOW + 1002)]
    assert due == ["c0", "c2"]  # c1 deleted: its heap entry is skipped
    cr.advance(first, NOW + 1000, fired=True)
    reg.put(first)
    assert reg.next_due() == NOW + 1003
    assert len(reg) == 9_999


# ------------------------------------------------------------- a cron's overlap jobs

def _overlap_job(h: Any) -> str:
    from .test_queue import NOW as Q_NOW
    return str(h.push(Q_NOW, uniqueKey="cron:nightly"))


def test_overlap_jobs_are_deleted_not_requeued_when_their_worker_is_lost() -> None:
    from .test_queue import NOW as Q_NOW
    from .test_queue import Harness

    # lock expiry
    h = Harness()
    job = _overlap_job(h)
    plain = h.push(Q_NOW)
    h.pull(Q_NOW, 2, owner="w", lock_ttl=1000)
    h.tick(Q_NOW + 2000)  # the lease ran out
    assert h.state(job, Q_NOW + 2000) == "unknown"
    assert h.state(plain, Q_NOW + 2000) == "waiting"  # an ordinary job goes back
    assert h.q.dedup_owner("cron:nightly", Q_NOW + 2000) is None  # the key is free

    # a closed connection
    h = Harness()
    job = _overlap_job(h)
    conn = object()
    h.pull(Q_NOW, 1, conn=conn)
    h.call("release_connection", conn, Q_NOW)
    assert h.state(job, Q_NOW) == "unknown"

    # a restart that finds it active
    h = Harness()
    job = _overlap_job(h)
    h.pull(Q_NOW, 1, owner="w")
    h.restart(Q_NOW + 10)
    assert h.state(job, Q_NOW + 10) == "unknown" and h.live() == {}


def test_overlap_jobs_are_deleted_by_the_stall_detector() -> None:
    from .test_queue import NOW as Q_NOW
    from .test_queue import Harness

    h = Harness()
    job = _overlap_job(h)
    h.pull(Q_NOW, 1)
    for step in range(1, 20):  # sweeps every 5 s; stalled after 30 s on two sweeps
        h.tick(Q_NOW + step * 5000)
    assert h.state(job, Q_NOW + 100_000) == "unknown"


def test_a_schedule_put_twice_at_one_time_is_due_once() -> None:
    """A firing undone to the time of its next slot put the schedule back at the time
    it already had: two live heap entries, and two firings of one slot in one pass."""
    registry = cr.CronRegistry()
    defn = make()
    registry.put(defn)
    registry.put(defn)
    assert [d.name for d in registry.due(defn.next_run)] == ["c"]
    assert registry.next_due() is None


@pytest.mark.parametrize(("expression", "seconds"), [
    ("* * * * * *", 1), ("*/5 * * * * *", 5), ("10,50 * * * * *", 20),
    ("10,50 0 * * * *", 40), ("0 0,59 * * * *", 60), ("* * * * *", 60),
    ("*/15 * * * *", 900), ("@hourly", 3600), ("0 0 0,23 * * *", 3600),
    ("0 3 * * *", 86_400), ("@yearly", 86_400)])
def test_the_shortest_gap_of_a_cron_expression(expression: str, seconds: int) -> None:
    assert cr.shortest_gap_ms(parse_cron(expression)) == seconds * 1000
