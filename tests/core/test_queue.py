"""QueueState, the sans-IO core of one queue: observable behaviour, command by command.

Every test drives a :class:`QueueState` through :class:`Harness`, which does what the
queue actor does around each command: the core records storage writes, the harness
applies them to a real :class:`MemoryStorage` right after the command (also after a
refused command, as the actor does; a crashing command's writes are dropped), so finished
jobs are read back from storage exactly as in the broker. Time is explicit (``now``, epoch
ms); no trio.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from trioqueue.core import queue as queue_mod
from trioqueue.core.commands import jobs as handlers
from trioqueue.core.errors import Refused
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import PullWaiter, normalise_progress
from trioqueue.core.queue import progress as progress_mod
from trioqueue.testing.queue import QueueHarness

NOW = 1_700_000_000_000
ALL_STATES = ["waiting", "prioritized", "delayed", "active", "completed", "failed",
              "waiting-children", "paused"]


# ----------------------------------------------------------------------------- harness


class Harness(QueueHarness):
    """The shared harness plus one helper per command, with test-friendly returns."""

    # --- commands

    def spec(self, **fields: Any) -> dict[str, Any]:
        fields.setdefault("data", None)
        return parse_job_input(fields, custom_id_key="jobId")

    def push(self, now: int, **fields: Any) -> str:
        ids: list[str] = self.call("push", [self.spec(**fields)], now)
        return ids[0]

    def pushb(self, now: int, *items: dict[str, Any]) -> list[str]:
        specs = [parse_job_input({"data": None, **i}, custom_id_key="customId") for i in items]
        ids: list[str] = self.call("push", specs, now)
        return ids

    def pull(self, now: int, count: int = 1, *, owner: str | None = None,
             lock_ttl: float = 30_000, conn: Any = None,
             detach: bool = False) -> tuple[list[str], list[str]]:
        jobs, tokens = self.call("pull", now, count=count, owner=owner, lock_ttl=lock_ttl,
                                 conn=conn, detach=detach)
        return [j["id"] for j in jobs], tokens

    def pull_one(self, now: int, **kwargs: Any) -> tuple[str | None, str | None]:
        ids, tokens = self.pull(now, 1, **kwargs)
        return (ids[0], tokens[0]) if ids else (None, None)

    def take(self, now: int, **kwargs: Any) -> tuple[str, str]:
        """Pull one job that must be there; returns (id, token)."""
        job_id, token = self.pull_one(now, **kwargs)
        assert job_id is not None and token is not None
        return job_id, token

    def drain_order(self, now: int) -> list[str]:
        order: list[str] = []
        while True:
            job_id, _ = self.pull_one(now)
            if job_id is None:
                return order
            order.append(job_id)

    def ack(self, job_id: str, now: int, **kwargs: Any) -> None:
        self.call("ack", job_id, now, **kwargs)

    def fail(self, job_id: str, now: int, **kwargs: Any) -> None:
        self.call("fail", job_id, now, **kwargs)

    def tick(self, now: int) -> list[queue_mod.WaiterAnswer]:
        deliveries: list[queue_mod.WaiterAnswer] = self.call("tick", now)
        return deliveries

    # --- reads

    def counts(self, now: int) -> dict[str, int]:
        counts: dict[str, int] = self.call("counts", now)
        return counts

    def state(self, job_id: str, now: int) -> str:
        return self.q.state_of(job_id, now)

    def live(self) -> dict[str, dict[str, Any]]:
        return {r["id"]: r for r in self.storage.load().live_jobs}

    def finished(self, job_id: str) -> dict[str, Any] | None:
        return self.storage.get_finished(job_id)

    def done(self, job_id: str) -> dict[str, Any]:
        """The finished record of a job that must be finished."""
        record = self.storage.get_finished(job_id)
        assert record is not None, f"{job_id} is not finished"
        return record


def counts_of(**nonzero: int) -> dict[str, int]:
    base = dict.fromkeys(ALL_STATES, 0)
    for key, value in nonzero.items():
        base[key.replace("_", "-")] = value
    return base


def error_of(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(Refused) as info:
        fn(*args, **kwargs)
    return info.value.message


@pytest.fixture
def h() -> Harness:
    return Harness()


# ----------------------------------------------------------------------------- ordering


def test_priority_desc_then_lifo_then_fifo(h: Harness) -> None:
    low = h.push(NOW, priority=1)
    high_fifo = h.push(NOW, priority=5)
    fifo0 = h.push(NOW)
    lifo0_old = h.push(NOW, lifo=True)
    lifo0_new = h.push(NOW, lifo=True)
    high_lifo = h.push(NOW, priority=5, lifo=True)
    negative = h.push(NOW, priority=-2)
    assert h.drain_order(NOW) == [high_lifo, high_fifo, low, lifo0_new, lifo0_old, fifo0,
                                  negative]


def test_pullb_returns_jobs_in_queue_order(h: Harness) -> None:
    a = h.push(NOW)
    b = h.push(NOW, priority=3)
    c = h.push(NOW, lifo=True)
    ids, tokens = h.pull(NOW, 10)
    assert ids == [b, c, a]
    assert tokens == ["", "", ""]  # no owner: no locks


def test_fifo_by_run_at_then_admission_not_id(h: Harness) -> None:
    z = h.push(NOW, jobId="z")  # runAt NOW
    y = h.push(NOW, jobId="y", timestamp=NOW - 50)  # runAt NOW-50
    x = h.push(NOW, jobId="x", delay=-100)  # runAt NOW-100
    b = h.push(NOW, jobId="b")
    a = h.push(NOW, jobId="a")  # same runAt as b, admitted later
    assert h.drain_order(NOW) == [x, y, z, b, a]


def test_negative_delay_is_ready_and_sorts_ahead(h: Harness) -> None:
    first = h.push(NOW)
    early = h.push(NOW + 10, delay=-100)
    assert h.q.jobs[early].run_at == NOW - 90
    assert h.state(early, NOW + 10) == "waiting"
    assert h.counts(NOW + 10) == counts_of(waiting=2)
    assert h.drain_order(NOW + 10) == [early, first]


def test_delayed_job_becomes_ready_exactly_at_run_at(h: Harness) -> None:
    job = h.push(NOW, delay=100)
    prio = h.push(NOW, delay=100, priority=2)
    assert h.state(job, NOW + 99) == "delayed"
    assert h.counts(NOW + 99) == counts_of(delayed=2)
    assert h.pull(NOW + 99, 5) == ([], [])
    assert h.state(job, NOW + 100) == "waiting"
    assert h.state(prio, NOW + 100) == "prioritized"
    assert h.counts(NOW + 100) == counts_of(waiting=1, prioritized=1)
    assert h.drain_order(NOW + 100) == [prio, job]


def test_order_of_promoted_delayed_jobs(h: Harness) -> None:
    lifo_old = h.push(NOW, lifo=True, delay=100)
    lifo_new = h.push(NOW, lifo=True, delay=100)
    fifo_late = h.push(NOW, delay=100)
    fifo_early = h.push(NOW, delay=50)
    high = h.push(NOW, delay=80, priority=1)
    assert h.drain_order(NOW + 100) == [high, lifo_new, lifo_old, fifo_early, fifo_late]


def test_delayed_high_priority_does_not_block_ready_jobs(h: Harness) -> None:
    delayed = h.push(NOW, delay=1000, priority=10)
    ready = h.push(NOW)
    assert h.drain_order(NOW) == [ready]
    assert h.drain_order(NOW + 1000) == [delayed]


# ----------------------------------------------------------------------------- ttl


def test_ttl_expired_job_is_dropped_silently_at_pull(h: Harness) -> None:
    expired = h.push(NOW, ttl=50, uniqueKey="k", jobId="exp")
    other = h.push(NOW)
    assert h.pull_one(NOW + 51) == (other, "")
    assert expired not in h.q.jobs and expired not in h.index
    assert expired not in h.live() and h.finished(expired) is None
    assert h.state(expired, NOW + 51) == "unknown"
    assert h.counts(NOW + 51) == counts_of(active=1)
    # the unique key and the custom id are free again
    again = h.push(NOW + 52, uniqueKey="k")
    assert again != expired
    assert h.push(NOW + 52, jobId="exp") == "exp"
    assert h.state("exp", NOW + 52) == "waiting"


def test_ttl_boundary_and_active_jobs_unaffected(h: Harness) -> None:
    job = h.push(NOW, ttl=50)
    assert h.pull_one(NOW + 50) == (job, "")  # not expired until now > createdAt + ttl
    h.tick(NOW + 10_000)
    assert h.state(job, NOW + 10_000) == "active"


def test_ttl_drop_only_touches_jobs_pull_reaches(h: Harness) -> None:
    head = h.push(NOW, priority=5)
    tail = h.push(NOW, ttl=10)
    assert h.pull_one(NOW + 100) == (head, "")
    assert tail in h.q.jobs  # not reached yet: still counted as waiting
    assert h.counts(NOW + 100) == counts_of(waiting=1, active=1)
    assert h.pull_one(NOW + 100) == (None, None)
    assert h.counts(NOW + 100) == counts_of(active=1)


# ----------------------------------------------------------------------------- pause


def test_paused_queue_pulls_nothing_and_counts_rebucket(h: Harness) -> None:
    running = h.push(NOW)
    assert h.pull_one(NOW)[0] == running
    h.call("set_paused", True, NOW)
    assert h.storage.load().queue_meta["q"]["paused"] is True
    h.push(NOW)
    h.push(NOW, priority=3)
    h.push(NOW, delay=500)
    assert h.pull(NOW, 10) == ([], [])
    assert h.counts(NOW) == counts_of(paused=2, delayed=1, active=1)
    h.ack(running, NOW)  # active jobs go on while paused
    assert h.counts(NOW + 500) == counts_of(paused=3, completed=1)
    # the flag survives a restart
    h.restart(NOW + 500)
    assert h.q.paused
    assert h.pull(NOW + 500, 10) == ([], [])
    h.call("set_paused", False, NOW + 500)
    assert h.counts(NOW + 500) == counts_of(waiting=2, prioritized=1, completed=1)
    assert len(h.pull(NOW + 500, 10)[0]) == 3


# ----------------------------------------------------------------------------- custom ids


def test_custom_id_is_idempotent_while_live(h: Harness) -> None:
    assert h.push(NOW, jobId="x", data=1) == "x"
    assert h.push(NOW + 1, jobId="x", data=2) == "x"
    assert len(h.q.jobs) == 1 and h.q.jobs["x"].data == 1
    assert h.live()["x"]["data"] == 1
    assert h.pull_one(NOW + 2)[0] == "x"
    assert h.push(NOW + 3, jobId="x", data=3) == "x"  # active generation wins too
    assert h.state("x", NOW + 3) == "active" and h.q.jobs["x"].data == 1
    assert h.pushb(NOW + 4, {"customId": "y"}, {"customId": "y", "data": 9}) == ["y", "y"]
    assert h.counts(NOW + 4) == counts_of(waiting=1, active=1)


def test_custom_id_replaces_completed_generation(h: Harness) -> None:
    h.push(NOW, jobId="x", data=1)
    h.pull(NOW)
    h.ack("x", NOW, has_result=True, result={"r": 1})
    h.call("add_log", "x", NOW, "old generation", "info")
    assert h.q.finished.result("x") == (True, {"r": 1})
    assert h.counts(NOW) == counts_of(completed=1)
    assert h.push(NOW + 5, jobId="x", data=2) == "x"
    assert h.finished("x") is None
    assert h.q.finished.result("x") == (False, None)
    assert h.q.get_logs("x", None, None) == {"logs": [], "count": 0}
    job = h.q.jobs["x"]
    assert (job.data, job.attempts, job.created_at) == (2, 0, NOW + 5)
    assert h.live()["x"]["state"] == "queued"
    assert h.counts(NOW + 5) == counts_of(waiting=1)


def test_custom_id_replaces_dead_lettered_generation(h: Harness) -> None:
    h.push(NOW, jobId="x")
    h.pull(NOW)
    h.fail("x", NOW, unrecoverable=True)
    assert h.done("x")["state"] == "failed"
    assert h.push(NOW + 1, jobId="x") == "x"
    assert h.finished("x") is None
    assert h.counts(NOW + 1) == counts_of(waiting=1)


def test_suppressed_push_keeps_finished_custom_id_generation(h: Harness) -> None:
    h.push(NOW, jobId="x")
    h.pull(NOW)
    h.ack("x", NOW, has_result=True, result=42)
    owner = h.push(NOW + 1, uniqueKey="k")
    assert h.push(NOW + 2, jobId="x", uniqueKey="k") == owner  # suppressed: owner's id
    assert h.finished("x") is not None
    assert h.q.finished.result("x") == (True, 42)
    assert h.counts(NOW + 2) == counts_of(waiting=1, completed=1)


# ----------------------------------------------------------------------------- dedup


def test_unique_key_default_rejects_while_owner_live(h: Harness) -> None:
    h.q.events_enabled = True
    a = h.push(NOW, uniqueKey="k")
    assert h.push(NOW, uniqueKey="k", data="dup") == a
    assert {"eventType": "duplicated", "queue": "q", "jobId": a,
            "timestamp": float(NOW)} in h.q.take_events()
    h.pull(NOW)
    assert h.push(NOW, uniqueKey="k") == a  # an active owner still holds the key
    assert h.push(NOW, uniqueKey="other") != a  # keys are independent
    h.ack(a, NOW)
    b = h.push(NOW + 1, uniqueKey="k")
    assert b != a


def test_unique_key_released_on_terminal_fail_not_on_retry(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k", maxAttempts=2, backoff=0)
    h.pull(NOW)
    h.fail(a, NOW)  # retry: still the owner
    assert h.push(NOW, uniqueKey="k") == a
    h.pull(NOW)
    h.fail(a, NOW)  # terminal
    b = h.push(NOW, uniqueKey="k")
    assert b != a
    h.pull(NOW)
    h.fail(b, NOW, unrecoverable=True, remove_on_fail=True)
    assert h.push(NOW, uniqueKey="k") not in (a, b)


def test_released_key_is_not_inherited_through_a_reused_custom_id(h: Harness) -> None:
    h.push(NOW, jobId="x", uniqueKey="k")
    h.pull(NOW)
    h.ack("x", NOW)
    assert h.push(NOW + 1, jobId="x") == "x"  # a new generation, without the key
    other = h.push(NOW + 2, uniqueKey="k")
    assert other != "x"


def test_unique_key_ttl_expires(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k", dedup={"ttl": 100})
    assert h.push(NOW + 99, uniqueKey="k") == a
    b = h.push(NOW + 100, uniqueKey="k")
    assert b != a
    assert h.q.dedup.holders["k"].owner == b
    assert h.counts(NOW + 100) == counts_of(waiting=2)


def test_unique_key_extend_pushes_expiry(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k", dedup={"ttl": 100, "extend": True})
    assert h.push(NOW + 60, uniqueKey="k", dedup={"ttl": 100, "extend": True}) == a
    assert h.push(NOW + 150, uniqueKey="k") == a  # would have expired at NOW+100
    assert h.push(NOW + 160, uniqueKey="k") != a
    # extend without ttl behaves like reject
    c = h.push(NOW, uniqueKey="k2")
    assert h.push(NOW + 1, uniqueKey="k2", dedup={"extend": True}) == c


def test_unique_key_replace_queued_owner(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k", data=1)
    b = h.push(NOW + 1, uniqueKey="k", data=2, dedup={"replace": True})
    assert b != a
    assert a not in h.q.jobs and a not in h.index and a not in h.live()
    assert h.state(a, NOW + 1) == "unknown"
    assert h.counts(NOW + 1) == counts_of(waiting=1)
    assert h.drain_order(NOW + 1) == [b]


def test_unique_key_replace_active_owner_transfers_key(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k")
    h.pull(NOW)
    b = h.push(NOW + 1, uniqueKey="k", dedup={"replace": True})
    assert b != a
    assert h.state(a, NOW + 1) == "active" and h.state(b, NOW + 1) == "waiting"
    assert h.q.dedup.holders["k"].owner == b
    h.ack(a, NOW + 2)  # the old owner's outcome must not release the new owner's key
    assert h.push(NOW + 3, uniqueKey="k") == b


def test_unique_key_replace_of_due_delayed_owner_keeps_counts(h: Harness) -> None:
    h.push(NOW, uniqueKey="k", delay=50)
    h.push(NOW + 100, uniqueKey="k", dedup={"replace": True})
    assert h.counts(NOW + 100) == counts_of(waiting=1)


# ----------------------------------------------------------------------------- tokens


def test_locked_job_needs_its_exact_token(h: Harness) -> None:
    job = h.push(NOW)
    got, token = h.pull_one(NOW, owner="w1")
    assert got == job and token
    assert error_of(h.ack, job, NOW) == f"Lock token required for job {job}"
    assert error_of(h.ack, job, NOW, token="nope") == f"Invalid or expired lock token for job {job}"
    assert error_of(h.fail, job, NOW) == f"Lock token required for job {job}"
    assert error_of(h.fail, job, NOW, token="nope") == (
        f"Invalid or expired lock token for job {job}")
    # refused commands changed nothing
    assert h.q.jobs[job].attempts == 0
    assert h.live()[job]["state"] == "active"
    h.ack(job, NOW, token=token)
    assert h.done(job)["state"] == "completed"


def test_unlocked_job_is_acked_administratively(h: Harness) -> None:
    a = h.push(NOW)
    b = h.push(NOW)
    h.pull(NOW, 2)  # no owner: no lock, no token check
    h.ack(a, NOW, token="anything")
    h.fail(b, NOW, unrecoverable=True)
    assert h.counts(NOW) == counts_of(completed=1, failed=1)


def test_ack_or_fail_of_job_not_in_processing(h: Harness) -> None:
    queued = h.push(NOW)
    for fn in (h.ack, h.fail):
        assert error_of(fn, queued, NOW) == (
            f"Job not found or not in processing state: {queued}")
        assert error_of(fn, "missing", NOW) == (
            "Job not found or not in processing state: missing")
    h.pull(NOW)
    h.ack(queued, NOW)
    assert error_of(h.ack, queued, NOW) == f"Job not found or not in processing state: {queued}"


def test_ackb_checks_every_token_before_changing_anything(h: Harness) -> None:
    a = h.push(NOW)
    b = h.push(NOW)
    _, (ta, tb) = h.pull(NOW, 2, owner="w")
    with pytest.raises(Refused):
        h.call("ackb", [a, b], NOW, tokens=[ta, "bad"], results=None, removes=None)
    assert h.counts(NOW) == counts_of(active=2)
    ignored = h.call("ackb", [a, "ghost", b], NOW, tokens=[ta, None, tb],
                     results=[1, 2, 3], removes=None)
    assert ignored == [1]
    assert h.q.finished.result(b) == (True, 3)
    assert h.counts(NOW) == counts_of(completed=2)


def test_ackb_with_duplicate_ids_does_not_crash(h: Harness) -> None:
    job = h.push(NOW)
    h.pull(NOW)
    ignored = h.call("ackb", [job, job], NOW, tokens=None, results=None, removes=None)
    assert ignored in ([], [1])
    assert h.counts(NOW) == counts_of(completed=1)


def test_ack_remove_on_complete_deletes_the_job(h: Harness) -> None:
    a = h.push(NOW)
    b = h.push(NOW, removeOnComplete=True)
    h.pull(NOW, 2)
    h.ack(a, NOW, remove=True, has_result=True, result=1)
    h.ack(b, NOW)
    for job in (a, b):
        assert h.finished(job) is None and job not in h.live()
        assert h.state(job, NOW) == "unknown"
    assert h.counts(NOW) == counts_of()


# ----------------------------------------------------------------------------- fail


def test_fail_retries_with_exponential_backoff(h: Harness) -> None:
    job = h.push(NOW)  # backoff 1000, maxAttempts 3
    h.pull(NOW)
    h.fail(job, NOW, error="boom", stack=["  at a  ", "", "at b"])
    j = h.q.jobs[job]
    assert j.attempts == 1 and j.started_at is None
    assert j.stacktrace == ["at a", "at b"]
    assert 1000 <= j.run_at - NOW <= 3000  # 1000 * 2^1 * U(0.5, 1.5)
    assert h.state(job, NOW) == "delayed"
    assert h.live()[job]["state"] == "queued" and h.live()[job]["attempts"] == 1
    assert h.counts(NOW) == counts_of(delayed=1)
    first_retry = j.run_at
    h.pull(first_retry)
    h.fail(job, first_retry)
    assert 2000 <= h.q.jobs[job].run_at - first_retry <= 6000
    assert h.q.jobs[job].attempts == 2


def test_fail_fixed_and_zero_backoff(h: Harness) -> None:
    fixed = h.push(NOW, backoff={"type": "fixed", "delay": 100})
    zero = h.push(NOW, backoff=0)
    h.pull(NOW, 2)
    h.fail(fixed, NOW)
    h.fail(zero, NOW)
    assert 80 <= h.q.jobs[fixed].run_at - NOW <= 120
    assert h.q.jobs[zero].run_at == NOW
    assert h.state(zero, NOW) == "waiting"
    assert h.pull_one(NOW)[0] == zero


def test_fail_terminal_at_max_attempts_goes_to_dlq(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=2, backoff=0)
    h.pull(NOW)
    h.fail(job, NOW, error="one")
    h.pull(NOW)
    h.fail(job, NOW, error="two")
    record = h.done(job)
    assert record["state"] == "failed" and record["attempts"] == 2
    assert record["dlq"]["reason"] == "max_attempts_exceeded"
    assert record["dlq"]["error"] == "two"
    assert job not in h.q.jobs and job not in h.index and job not in h.live()
    assert h.state(job, NOW) == "failed"
    assert h.counts(NOW) == counts_of(failed=1)


def test_fail_unrecoverable_is_terminal_at_once(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=5)
    h.pull(NOW)
    h.fail(job, NOW, unrecoverable=True)
    assert h.done(job)["attempts"] == 1
    assert h.counts(NOW) == counts_of(failed=1)


def test_remove_on_fail_deletes_instead_of_dlq(h: Harness) -> None:
    flagged = h.push(NOW, maxAttempts=1, removeOnFail=True)
    per_call = h.push(NOW, maxAttempts=1)
    retried = h.push(NOW, maxAttempts=2, backoff=0)
    h.pull(NOW, 3)
    h.fail(flagged, NOW)
    h.fail(per_call, NOW, remove_on_fail=True)
    h.fail(retried, NOW, remove_on_fail=True)  # not terminal: the flag does nothing yet
    for job in (flagged, per_call):
        assert h.finished(job) is None and job not in h.live()
        assert h.state(job, NOW) == "unknown"
    assert h.state(retried, NOW) == "waiting"
    assert h.counts(NOW) == counts_of(waiting=1)


# ----------------------------------------------------------------------------- lock expiry


def test_lock_expiry_requeues_then_buries_at_max_stalls(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=10)
    t = NOW
    for stall in (1, 2):
        got, _ = h.pull_one(t, owner="w", lock_ttl=1000)
        assert got == job
        h.tick(t + 1000)  # the lease may have begun at t + 0.9: not over yet
        assert h.state(job, t + 1000) == "active"
        h.tick(t + 1001)
        j = h.q.jobs[job]
        assert (j.attempts, j.stall_count) == (stall, stall)
        assert j.run_at == NOW and j.started_at is None  # runAt unchanged: no backoff
        assert job not in h.q.leases.locks
        assert h.live()[job]["state"] == "queued"
        assert h.state(job, t + 1001) == "waiting"
        t += 1001
    h.pull_one(t, owner="w", lock_ttl=1000)
    h.tick(t + 1001)
    record = h.done(job)
    assert record["dlq"]["reason"] == "stalled"
    assert record["dlq"]["error"] == "Lock expired after 0 renewals"
    assert (record["attempts"], record["stallCount"]) == (3, 3)
    assert h.counts(t + 1001) == counts_of(failed=1)


def test_lock_expiry_buries_at_max_attempts(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=2)
    h.pull_one(NOW, owner="w", lock_ttl=100)
    h.tick(NOW + 101)
    assert h.state(job, NOW + 101) == "waiting"
    _, token = h.pull_one(NOW + 101, owner="w", lock_ttl=100)
    assert h.call("extend_lock", job, NOW + 150, token=token, duration=100)
    h.tick(NOW + 250)
    assert h.state(job, NOW + 250) == "active"
    h.tick(NOW + 251)
    record = h.done(job)
    assert record["dlq"]["reason"] == "max_attempts_exceeded"
    assert record["dlq"]["error"] == "Lock expired at max attempts (2)"


def test_lock_expiry_error_counts_renewals(h: Harness) -> None:
    h.call("set_stall_config", {"maxStalls": 1})
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=100)
    assert h.call("heartbeat", job, NOW + 50, token=token, duration=None)
    assert h.call("heartbeat", job, NOW + 100, token=token, duration=100)
    h.tick(NOW + 201)
    assert h.done(job)["dlq"]["error"] == "Lock expired after 2 renewals"


def test_max_stalls_zero_means_unlimited(h: Harness) -> None:
    h.call("set_stall_config", {"maxStalls": 0})
    job = h.push(NOW, maxAttempts=100)
    for i in range(5):
        h.pull_one(NOW + i * 11, owner="w", lock_ttl=10)
        h.tick(NOW + i * 11 + 11)
    assert h.q.jobs[job].stall_count == 5
    assert h.state(job, NOW + 50) == "waiting"


def test_requeued_job_goes_ahead_of_later_pushes(h: Harness) -> None:
    first = h.push(NOW)
    h.pull_one(NOW, owner="w", lock_ttl=1000)
    later = h.push(NOW + 10)
    h.tick(NOW + 1001)
    assert h.drain_order(NOW + 1001) == [first, later]


def test_late_ack_after_lock_expiry_completes_queued_copy(h: Harness) -> None:
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=1000)
    h.tick(NOW + 1001)
    assert h.state(job, NOW + 1001) == "waiting"
    h.ack(job, NOW + 1001, token=token, has_result=True, result="done")
    assert h.done(job)["state"] == "completed"
    assert h.q.finished.result(job) == (True, "done")
    assert h.counts(NOW + 1001) == counts_of(completed=1)
    assert h.pull(NOW + 1001, 5) == ([], [])


def test_late_ackb_after_lock_expiry_completes_queued_copy(h: Harness) -> None:
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=1000)
    h.tick(NOW + 1001)
    assert h.call("ackb", [job], NOW + 1001, tokens=[token], results=None, removes=None) == []
    assert h.counts(NOW + 1001) == counts_of(completed=1)


def test_late_ack_with_old_token_refused_once_redelivered(h: Harness) -> None:
    job = h.push(NOW)
    _, old = h.pull_one(NOW, owner="w1", lock_ttl=1000)
    h.tick(NOW + 1001)
    _, new = h.pull_one(NOW + 1001, owner="w2")
    assert error_of(h.ack, job, NOW + 1001, token=old) == (
        f"Invalid or expired lock token for job {job}")
    h.ack(job, NOW + 1001, token=new)
    assert h.counts(NOW + 1001) == counts_of(completed=1)


def test_expired_lock_not_yet_swept_still_accepts_its_token(h: Harness) -> None:
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=100)
    h.ack(job, NOW + 5000, token=token)  # no tick yet: the #101 grace
    assert h.done(job)["state"] == "completed"
    h.tick(NOW + 5000)  # the stale heap entry is harmless
    assert h.counts(NOW + 5000) == counts_of(completed=1)


def test_late_ack_of_due_delayed_retry_keeps_counts(h: Harness) -> None:
    job = h.push(NOW, backoff=100)
    h.pull(NOW)
    h.fail(job, NOW)  # queued again, attempts 1, runAt NOW+100..300
    h.ack(job, NOW + 10_000)  # the late-ACK path; nothing promoted the job before
    assert h.counts(NOW + 10_000) == counts_of(completed=1)


def test_renewal_after_expiry_leaves_job_to_lock_expiry(h: Harness) -> None:
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=1000)
    assert not h.call("extend_lock", job, NOW + 1001, token=token, duration=1000)
    h.tick(NOW + 1001)
    h.tick(NOW + 60_000)
    assert h.state(job, NOW + 60_000) == "waiting"
    assert h.q.jobs[job].stall_count == 1


def test_late_fail_after_lock_expiry_is_already_finalized(h: Harness) -> None:
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=1000)
    h.tick(NOW + 1001)
    ctx = handlers.Ctx(NOW + 1001)
    reply = handlers.fail(h.q, {"id": job, "token": token, "error": "late"}, ctx)
    assert reply == {"data": {"applied": False, "reason": "already-finalized"}}
    assert h.q.jobs[job].attempts == 1


# ----------------------------------------------------------------------------- leases


def test_extend_lock_and_heartbeat_rules(h: Harness) -> None:
    job = h.push(NOW)
    _, token = h.pull_one(NOW, owner="w", lock_ttl=1000)
    assert not h.call("extend_lock", job, NOW + 10, token="bad", duration=5000)
    assert h.call("extend_lock", job, NOW + 10, token=None, duration=5000)  # administrative
    assert h.q.leases.locks[job].expires_at == NOW + 5011  # due 1 ms past its nominal end
    assert not h.call("heartbeat", job, NOW + 20, token="bad", duration=None)
    assert h.call("heartbeat", job, NOW + 20, token=None, duration=None)
    assert h.q.jobs[job].last_heartbeat == NOW + 20
    assert h.q.leases.locks[job].expires_at == NOW + 5011  # tokenless heartbeat: no renewal
    assert h.call("heartbeat", job, NOW + 30, token=token, duration=None)
    assert h.q.leases.locks[job].expires_at == NOW + 1031  # the lock's own ttl
    h.tick(NOW + 1030)  # the first expiry (NOW+1001) was superseded: nothing happens
    assert h.state(job, NOW + 1030) == "active"
    h.tick(NOW + 1031)
    assert h.state(job, NOW + 1031) == "waiting"
    h.tick(NOW + 5011)  # a stale later entry is harmless too
    assert h.q.jobs[job].stall_count == 1
    assert not h.call("extend_lock", "ghost", NOW, token=None, duration=10)
    assert not h.call("heartbeat", job, NOW + 5010, token=None, duration=None)  # not active


# ----------------------------------------------------------------------------- connections


def test_release_connection_requeues_unrenewed_jobs_only(h: Harness) -> None:
    conn, other = object(), object()
    jobs = [h.push(NOW) for _ in range(6)]
    plain, _ = h.take(NOW, conn=conn)
    locked, _ = h.take(NOW, conn=conn, owner="w")
    renewed, token = h.take(NOW, conn=conn, owner="w")
    detached, _ = h.take(NOW, conn=conn, detach=True)
    owner_detach, _ = h.take(NOW, conn=conn, owner="w", detach=True)  # detach ignored
    elsewhere, _ = h.take(NOW, conn=other)
    assert [plain, locked, renewed, detached, owner_detach, elsewhere] == jobs
    assert h.call("extend_lock", renewed, NOW + 1, token=token, duration=30_000)
    assert h.call("release_connection", conn, NOW + 2) == 3
    for job in (plain, locked, owner_detach):
        j = h.q.jobs[job]
        assert h.state(job, NOW + 2) == "waiting"
        assert (j.attempts, j.stall_count, j.started_at) == (0, 0, None)
        assert h.live()[job]["state"] == "queued"
        assert job not in h.q.leases.locks
    for job in (renewed, detached, elsewhere):
        assert h.state(job, NOW + 2) == "active"
    assert h.call("release_connection", conn, NOW + 3) == 0
    h.tick(NOW + 30_002)  # the renewed job is left to lock expiry
    assert h.state(renewed, NOW + 30_002) == "waiting"
    assert h.q.jobs[renewed].stall_count == 1


def test_a_connection_holding_many_jobs_is_released_in_slices(
    h: Harness, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RELEASE_CONNECTION of more than SLICE_JOBS jobs is long work: each step requeues
    at most SLICE_JOBS of them; renewed locks and other connections' jobs stay active,
    and the connection is forgotten at the end."""
    from trioqueue.core.commands.table import QUEUE_HANDLERS, RELEASE_CONNECTION
    from trioqueue.core.queue import Sliced, slices

    monkeypatch.setattr(slices, "SLICE_JOBS", 4)
    conn, other = object(), object()
    for _ in range(12):
        h.push(NOW)
    held = [h.take(NOW, conn=conn, owner="w") for _ in range(11)]
    elsewhere, _ = h.take(NOW, conn=other)
    renewed, token = held[5]
    assert h.call("extend_lock", renewed, NOW + 1, token=token, duration=30_000)
    work = QUEUE_HANDLERS[RELEASE_CONNECTION](h.q, {}, handlers.Ctx(NOW + 2, conn=conn))
    assert isinstance(work, Sliced)
    waiting = [h.counts(NOW + 2)["waiting"]]
    while not work.step():
        waiting.append(h.counts(NOW + 2)["waiting"])
        h.commit()
    waiting.append(h.counts(NOW + 2)["waiting"])
    steps = list(zip(waiting, waiting[1:], strict=False))
    assert len(steps) == 3 and all(0 <= b - a <= 4 for a, b in steps), waiting
    assert work.result == 10 and h.counts(NOW + 2)["waiting"] == 10
    assert h.state(renewed, NOW + 2) == h.state(elsewhere, NOW + 2) == "active"
    assert conn not in h.q.leases.conn_jobs and other in h.q.leases.conn_jobs
    # a few jobs: one plain step
    few = h.take(NOW + 3, conn=conn)[0]
    assert QUEUE_HANDLERS[RELEASE_CONNECTION](h.q, {}, handlers.Ctx(NOW + 3, conn=conn)) == {}
    assert h.state(few, NOW + 3) == "waiting"


def test_release_connection_drops_its_parked_pulls(h: Harness) -> None:
    conn = object()
    h.q.park(waiter("a", conn=conn, deadline=NOW + 1000))
    h.call("release_connection", conn, NOW)
    h.push(NOW)
    assert h.call("serve_waiters", NOW) == []
    assert h.counts(NOW) == counts_of(waiting=1)


# ----------------------------------------------------------------------------- long-poll


def waiter(handle: str, *, deadline: int, count: int = 1, batch: bool = False,
           owner: str | None = None, conn: Any = None) -> PullWaiter:
    return PullWaiter(handle=handle, count=count, batch=batch, owner=owner,
                      lock_ttl=30_000, conn=conn, detach=False, deadline_ms=deadline)


def test_waiters_served_in_arrival_order(h: Harness) -> None:
    h.q.park(waiter("w1", deadline=NOW + 1000))
    h.q.park(waiter("w2", deadline=NOW + 1000, count=2, batch=True, owner="o"))
    h.q.park(waiter("w3", deadline=NOW + 2000))
    assert h.call("serve_waiters", NOW) == []
    a, b, c = h.push(NOW + 1), h.push(NOW + 1), h.push(NOW + 1)
    out = h.tick(NOW + 1)
    assert [d.waiter.handle for d in out] == ["w1", "w2"]
    assert out[0].reply["job"]["id"] == a and "token" not in out[0].reply
    assert [j["id"] for j in out[1].reply["jobs"]] == [b, c]
    assert len(out[1].reply["tokens"]) == 2 and all(out[1].reply["tokens"])
    assert set(h.q.leases.locks) == {b, c}
    assert h.live()[a]["state"] == "active"  # a delivery is committed like a pull
    assert h.tick(NOW + 1999) == []
    out = h.tick(NOW + 2000)
    assert [(d.waiter.handle, d.reply) for d in out] == [("w3", {"job": None})]
    assert not h.q.waiters


def test_expired_waiter_behind_a_waiting_head_is_answered(h: Harness) -> None:
    h.q.park(waiter("head", deadline=NOW + 5000))
    h.q.park(waiter("behind", deadline=NOW + 100, batch=True, owner="o"))
    out = h.tick(NOW + 100)
    assert [(d.waiter.handle, d.reply) for d in out] == [
        ("behind", {"jobs": [], "tokens": []})]
    assert [w.handle for w in h.q.waiters if not w.done] == ["head"]  # still parked


def test_waiters_keep_waiting_while_paused(h: Harness) -> None:
    h.call("set_paused", True, NOW)
    h.q.park(waiter("w", deadline=NOW + 1000))
    job = h.push(NOW)
    assert h.tick(NOW + 1) == []
    h.call("set_paused", False, NOW + 2)
    out = h.tick(NOW + 2)
    assert out[0].reply["job"]["id"] == job


def test_waiter_served_when_delayed_job_is_due(h: Harness) -> None:
    job = h.push(NOW, delay=300)
    h.q.park(waiter("w", deadline=NOW + 1000))
    assert h.q.next_deadline() == NOW + 300
    assert h.tick(NOW + 299) == []
    out = h.tick(NOW + 300)
    assert out[0].reply["job"]["id"] == job


def test_next_deadline(h: Harness) -> None:
    assert h.q.next_deadline() is None
    h.push(NOW, delay=100)
    assert h.q.next_deadline() is None  # a delayed job alone wakes nobody
    h.push(NOW)
    h.pull_one(NOW, owner="w", lock_ttl=500)
    assert h.q.next_deadline() == NOW + 501
    h.q.park(waiter("w", deadline=NOW + 50))
    assert h.q.next_deadline() == NOW + 50


# ----------------------------------------------------------------------------- queries


def test_counts_per_priority(h: Harness) -> None:
    for priority in (0, 0, 1, 2.5, -1):
        h.push(NOW, priority=priority)
    h.push(NOW, priority=1, delay=1000)  # delayed jobs are in the heap too
    h.push(NOW, priority=7)
    h.pull(NOW)  # the priority-7 job leaves the queue
    per = h.q.counts_per_priority()
    assert per == {"-1": 1, "0": 2, "1": 2, "2.5": 1}
    assert list(per) == ["-1", "0", "1", "2.5"]
    assert h.q.queued_count(NOW) == 6


def _list(h: Harness, states: list[str], now: int, asc: bool = True, offset: int = 0,
          limit: int = 100) -> list[tuple[str, str]]:
    rows = h.q.list_jobs(states, now, asc=asc, offset=offset, limit=limit)
    return [(r["id"], r["state"]) for r in rows]


def test_list_jobs_order_pagination_and_paused(h: Harness) -> None:
    x1 = h.push(NOW)
    h.pull(NOW)
    h.ack(x1, NOW)
    x2 = h.push(NOW + 1)
    h.pull(NOW + 1)
    h.fail(x2, NOW + 1, unrecoverable=True)
    x3 = h.push(NOW + 2)
    h.pull(NOW + 2)
    x4 = h.push(NOW + 3)
    x5 = h.push(NOW + 4, priority=3)
    x6 = h.push(NOW + 5, delay=10_000)
    now = NOW + 10
    everything = [(x1, "completed"), (x2, "failed"), (x3, "active"), (x4, "waiting"),
                  (x5, "prioritized"), (x6, "delayed")]
    assert _list(h, ALL_STATES, now) == everything
    assert _list(h, ALL_STATES, now, asc=False) == everything[::-1]
    assert _list(h, ALL_STATES, now, offset=1, limit=2) == everything[1:3]
    assert _list(h, ALL_STATES, now, asc=False, offset=1, limit=2) == [everything[4],
                                                                      everything[3]]
    assert _list(h, ALL_STATES, now, offset=5, limit=10) == everything[5:]
    assert _list(h, ["waiting"], now) == [(x4, "waiting")]
    assert _list(h, ["completed", "delayed"], now) == [(x1, "completed"), (x6, "delayed")]
    assert _list(h, ["paused"], now) == []
    h.call("set_paused", True, now)
    assert _list(h, ["waiting"], now) == []
    assert _list(h, ["prioritized"], now) == []
    assert _list(h, ["paused"], now) == [(x4, "paused"), (x5, "paused")]
    assert _list(h, ALL_STATES, now) == [everything[0], everything[1], everything[2],
                                        (x4, "paused"), (x5, "paused"), everything[5]]


def test_list_jobs_ties_broken_by_id(h: Harness) -> None:
    h.push(NOW, jobId="b")
    h.push(NOW, jobId="a")
    assert _list(h, ["waiting"], NOW) == [("a", "waiting"), ("b", "waiting")]
    assert _list(h, ["waiting"], NOW, asc=False) == [("b", "waiting"), ("a", "waiting")]


def test_job_wire_and_state_of(h: Harness) -> None:
    job = h.push(NOW, data={"k": 1}, priority=2)
    wire = h.q.job_wire(job, NOW)
    assert wire is not None
    assert wire["state"] == "prioritized" and wire["data"] == {"k": 1}
    assert isinstance(wire["createdAt"], float)
    h.pull(NOW)
    h.ack(job, NOW)
    wire = h.q.job_wire(job, NOW)
    assert wire is not None and wire["state"] == "completed"
    assert h.q.job_wire("ghost", NOW) is None
    assert h.state("ghost", NOW) == "unknown"


# ----------------------------------------------------------------------------- progress


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (50, (50, None)),
        (150, (100, None)),
        (-5, (0, None)),
        (12.5, (12.5, None)),
        (math.nan, (0, None)),
        (math.inf, (100, None)),
        (True, (1, None)),
        (False, (0, None)),
        (None, (0, None)),
        ("42", (42, None)),
        (" 7.5 ", (7.5, None)),
        ("", (0, None)),
        ("250", (100, None)),
        ("-3", (0, None)),
        ("half way", (0, "half way")),
    ],
)
def test_normalise_progress(value: Any, expected: tuple[Any, Any]) -> None:
    assert normalise_progress(value) == expected


def test_normalise_progress_object_becomes_json_message() -> None:
    value, message = normalise_progress({"step": 2})
    assert value == 0 and message is not None and json.loads(message) == {"step": 2}


@pytest.mark.parametrize(("value", "text"), [({"a": 1}, '{"a":1}'), (["é"], '["é"]')])
def test_normalise_progress_object_json_is_compact(value: Any, text: str) -> None:
    assert normalise_progress(value) == (0, text)


@pytest.mark.parametrize("text", ["1_000", "inf"])
def test_normalise_progress_non_js_numeric_text_is_message(text: str) -> None:
    assert normalise_progress(text) == (0, text)


@pytest.mark.parametrize("text", ["\u0663", "1\u0660"])  # Arabic-Indic 3 and 10
def test_normalise_progress_non_ascii_digits_are_text(text: str) -> None:
    assert normalise_progress(text) == (0, text)


@pytest.mark.parametrize(("text", "number"), [("0x10", 16), ("0b101", 5), ("0o17", 15)])
def test_normalise_progress_js_integer_literals(text: str, number: int) -> None:
    assert normalise_progress(text) == (number, None)


def test_set_progress_on_active_job(h: Harness) -> None:
    job = h.push(NOW)
    h.pull(NOW)
    h.call("set_progress", job, NOW + 1, 30, "step one", True)
    assert h.q.get_progress(job, NOW) == {"progress": 30, "message": "step one"}
    h.call("set_progress", job, NOW + 2, "55", None, False)  # no message: keep the old one
    assert h.q.get_progress(job, NOW) == {"progress": 55, "message": "step one"}
    h.call("set_progress", job, NOW + 3, "working", None, False)
    assert h.q.get_progress(job, NOW) == {"progress": 0, "message": "working"}
    h.call("set_progress", job, NOW + 4, 80, None, True)  # explicit nil message
    assert h.q.get_progress(job, NOW) == {"progress": 80, "message": None}
    assert h.q.jobs[job].last_heartbeat == NOW + 4
    assert h.live()[job]["progress"] == 80


def test_progress_on_jobs_not_active(h: Harness) -> None:
    waiting = h.push(NOW)
    delayed = h.push(NOW, delay=100)
    assert error_of(h.q.set_progress, waiting, NOW, 1, None, False) == (
        "Job is not active (current state: waiting)")
    assert error_of(h.q.get_progress, delayed, NOW) == (
        "Job is not active (current state: delayed)")
    assert error_of(h.q.get_progress, "ghost", NOW) == "Job not found"
    h.pull(NOW)
    h.ack(waiting, NOW)
    assert error_of(h.q.get_progress, waiting, NOW) == (
        "Job is not active (current state: completed)")


def test_progress_on_failed_job_names_failed(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=1)
    h.pull(NOW)
    h.fail(job, NOW)
    assert error_of(h.q.get_progress, job, NOW) == "Job is not active (current state: failed)"


# ----------------------------------------------------------------------------- logs


def test_logs_keep_the_newest_100_per_job(h: Harness) -> None:
    job = h.push(NOW)
    for i in range(105):
        h.call("add_log", job, NOW + i, f"line {i}", "info")
    logs = h.q.get_logs(job, None, None)
    assert logs["count"] == 100
    assert [entry["message"] for entry in logs["logs"]][:2] == ["line 5", "line 6"]
    assert logs["logs"][-1] == {"timestamp": float(NOW + 104), "level": "info",
                                "message": "line 104"}
    tail = h.q.get_logs(job, -3, None)
    assert [e["message"] for e in tail["logs"]] == ["line 102", "line 103", "line 104"]
    assert tail["count"] == 100
    window = h.q.get_logs(job, 10, 12)
    assert [e["message"] for e in window["logs"]] == ["line 15", "line 16", "line 17"]
    h.call("clear_logs", job, 2)
    assert [e["message"] for e in h.q.get_logs(job, None, None)["logs"]] == [
        "line 103", "line 104"]
    h.call("clear_logs", job, 0)
    assert h.q.get_logs(job, None, None) == {"logs": [], "count": 0}


def test_logs_need_a_known_job(h: Harness) -> None:
    assert error_of(h.q.add_log, "ghost", NOW, "x", "info") == "Job not found"
    assert h.q.get_logs("ghost", None, None) == {"logs": [], "count": 0}
    job = h.push(NOW)
    h.pull(NOW)
    h.ack(job, NOW)
    h.call("add_log", job, NOW, "after completion", "warn")  # finished jobs are known
    assert h.q.get_logs(job, None, None)["count"] == 1


def test_logs_bounded_number_of_jobs(h: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(progress_mod, "MAX_JOBS_WITH_LOGS", 3)
    jobs = [h.push(NOW) for _ in range(4)]
    for job in jobs:
        h.call("add_log", job, NOW, "x", "info")
    assert h.q.get_logs(jobs[0], None, None)["count"] == 0
    assert all(h.q.get_logs(job, None, None)["count"] == 1 for job in jobs[1:])


# ----------------------------------------------------------------------------- restore


def test_restore_charges_interrupted_active_job_and_retries(h: Harness) -> None:
    job = h.push(NOW)
    h.pull_one(NOW, owner="w")
    h.restart(NOW + 100)
    j = h.q.jobs[job]
    assert (j.attempts, j.stall_count, j.started_at) == (1, 1, None)
    assert 1000 <= j.run_at - (NOW + 100) <= 3000  # backoff 1000 * 2^1 * U(0.5, 1.5)
    assert h.state(job, NOW + 100) == "delayed"
    assert not h.q.leases.locks
    record = h.live()[job]
    assert (record["state"], record["attempts"], record["stallCount"]) == ("queued", 1, 1)
    assert h.counts(NOW + 100) == counts_of(delayed=1)
    assert h.drain_order(j.run_at) == [job]


def test_restore_buries_at_max_attempts(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=1)
    h.pull(NOW)
    h.restart(NOW + 100)
    record = h.done(job)
    assert record["state"] == "failed" and record["attempts"] == 1
    assert record["dlq"]["reason"] == "max_attempts_exceeded"
    assert record["dlq"]["error"] == "Job reached max attempts (1) during startup recovery"
    assert job not in h.q.jobs and job not in h.index and job not in h.live()
    assert h.counts(NOW + 100) == counts_of(failed=1)


def test_restore_buries_at_max_stalls(h: Harness) -> None:
    job = h.push(NOW, maxAttempts=10, uniqueKey="k")
    for i in range(2):
        h.pull_one(NOW + i * 11, owner="w", lock_ttl=10)
        h.tick(NOW + i * 11 + 11)
    h.pull(NOW + 22)
    h.restart(NOW + 30)
    record = h.done(job)
    assert (record["attempts"], record["stallCount"]) == (3, 3)
    assert record["dlq"]["reason"] == "stalled"
    assert record["dlq"]["error"] == "Job stalled during startup recovery"
    assert h.push(NOW + 31, uniqueKey="k") != job  # its key went with it


def test_restore_without_charge_keeps_active(h: Harness) -> None:
    job = h.push(NOW)
    queued = h.push(NOW, delay=500)
    _, token = h.pull_one(NOW, owner="w")
    before = h.live()
    h.restart(NOW + 100, charge_active=False)
    assert h.live() == before  # nothing to write
    j = h.q.jobs[job]
    assert (j.state, j.attempts, j.stall_count) == ("active", 0, 0)
    assert h.counts(NOW + 100) == counts_of(active=1, delayed=1)
    # the lock is kept, with its token (a worker that holds the job lives on)
    assert [(k, lock.token) for k, lock in h.q.leases.locks.items()] == [(job, token)]
    with pytest.raises(Refused, match="Lock token required"):
        h.ack(job, NOW + 101)
    h.ack(job, NOW + 101, token=token)
    assert h.state(queued, NOW + 500) == "waiting"


def test_restore_keeps_queued_jobs_dedup_and_custom_ids(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k")
    h.push(NOW, jobId="x")
    done = h.push(NOW)
    h.pull(NOW)
    h.ack(a, NOW)
    b = h.push(NOW, uniqueKey="k", delay=1000)
    h.restart(NOW + 10)
    assert h.push(NOW + 11, uniqueKey="k") == b
    assert h.push(NOW + 11, jobId="x") == "x"
    assert h.counts(NOW + 11) == counts_of(waiting=2, delayed=1, completed=1)
    assert h.state(b, NOW + 11) == "delayed"
    assert h.state(done, NOW + 11) == "waiting"


def test_restore_keeps_admission_order(h: Harness) -> None:
    h.push(NOW, jobId="b")
    h.push(NOW, jobId="a")
    h.restart(NOW)
    assert h.drain_order(NOW) == ["b", "a"]


def test_restore_keeps_dedup_key_with_replacing_job(h: Harness) -> None:
    h.push(NOW, jobId="z-old", uniqueKey="k", maxAttempts=1)
    h.pull(NOW)
    new = h.push(NOW + 1, jobId="a-new", uniqueKey="k", dedup={"replace": True})
    h.restart(NOW + 2)  # the active old owner is buried by startup recovery
    assert h.state("z-old", NOW + 2) == "failed"
    assert h.push(NOW + 3, uniqueKey="k") == new


def test_restore_keeps_dedup_key_after_old_owner_requeued(h: Harness) -> None:
    old = h.push(NOW, uniqueKey="k")
    h.pull_one(NOW, owner="w", lock_ttl=100)
    new = h.push(NOW + 1, uniqueKey="k", dedup={"replace": True})
    h.tick(NOW + 101)  # the old owner is queued again, after the new one
    assert h.state(old, NOW + 101) == "waiting"
    h.restart(NOW + 200)
    assert h.push(NOW + 201, uniqueKey="k") == new
    h.pull(NOW + 201, 2)
    h.ack(old, NOW + 202)  # the old job's outcome does not release the new owner's key
    assert h.push(NOW + 203, uniqueKey="k") == new


def test_restore_keeps_extended_dedup_ttl(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k", dedup={"ttl": 1000, "extend": True})
    assert h.push(NOW + 900, uniqueKey="k", dedup={"ttl": 1000, "extend": True}) == a
    h.restart(NOW + 950)  # the key now runs until NOW + 1900
    assert h.push(NOW + 1500, uniqueKey="k") == a


def test_restore_keeps_dedup_ttl_of_backdated_job(h: Harness) -> None:
    a = h.push(NOW, uniqueKey="k", dedup={"ttl": 1000}, timestamp=NOW - 5000)
    assert h.push(NOW + 500, uniqueKey="k") == a  # held until NOW + 1000
    h.restart(NOW + 600)
    assert h.push(NOW + 700, uniqueKey="k") == a
