"""The history checker finds each kind of violation, and passes a clean history."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.testing.history import (
    ACK,
    ADD,
    HEARTBEAT,
    LOST,
    NACK,
    PULL,
    History,
    Op,
    check,
    refused_live_holders,
    stale_tokens,
    two_live_holders,
)


def job(state: str = "completed", attempts: int = 0, stalls: int = 0) -> dict[str, Any]:
    return {"state": state, "attempts": attempts, "stallCount": stalls}


def add(history: History, job_id: str, status: str = "ok") -> None:
    op = history.invoke("p", ADD, job_id)
    getattr(history, status)(op, *(() if status == "ok" else ("boom",)))


def deliver(history: History, job_id: str, attempts: int = 0, stalls: int = 0) -> None:
    history.ok(history.invoke("w", PULL, job_id), job_id, attempts=attempts,
               stallCount=stalls)


def complete(history: History, job_id: str) -> None:
    history.ok(history.invoke("w", ACK, job_id))


def test_a_clean_history_passes() -> None:
    history = History()
    add(history, "a")
    add(history, "b", "unknown")  # may or may not exist: either is fine
    deliver(history, "a")
    complete(history, "a")
    result = check(history, {"a": job(), "b": None})
    assert result.valid, result.report()
    assert result.stats["adds acknowledged"] == 1 and result.stats["adds unknown"] == 1
    result.assert_valid()


@pytest.mark.parametrize(("final", "expected"), [
    ({"a": None}, "lost: a was acknowledged by its add but is gone"),
    ({"a": job(), "x": job()}, "unexpected: x exists but no add could have made it"),
    ({"a": job("waiting")}, "not terminal: a is waiting after the drain"),
])
def test_adds_and_final_states(final: dict[str, Any], expected: str) -> None:
    history = History()
    add(history, "a")
    result = check(history, final)
    assert expected in result.problems
    with pytest.raises(AssertionError, match="problem"):
        result.assert_valid()


def test_a_failed_add_must_not_exist_but_needs_no_job() -> None:
    history = History()
    add(history, "a", "fail")
    assert check(history, {"a": None}).valid
    assert check(history, {"a": job()}).problems == [
        "unexpected: a exists but no add could have made it"]


def test_completed_twice_without_a_redelivery() -> None:
    history = History()
    add(history, "a")
    deliver(history, "a")
    complete(history, "a")
    complete(history, "a")
    problems = check(history, {"a": job()}).problems
    assert any(p.startswith("completed twice: a") for p in problems)


def test_redelivery_after_an_acknowledged_completion() -> None:
    history = History()
    add(history, "a")
    deliver(history, "a")
    complete(history, "a")
    deliver(history, "a", attempts=1)
    problems = check(history, {"a": job(attempts=1)}).problems
    assert any(p.startswith("redelivered after ACK: a") for p in problems)


def test_a_second_completion_after_a_lease_expiry_redelivery_is_allowed() -> None:
    history = History()
    add(history, "a")
    deliver(history, "a")
    deliver(history, "a", attempts=1, stalls=1)  # the first lease expired
    complete(history, "a")
    assert check(history, {"a": job(attempts=1, stalls=1)}).valid


def test_counters_never_go_back() -> None:
    history = History()
    add(history, "a")
    deliver(history, "a", attempts=2, stalls=1)
    deliver(history, "a", attempts=1, stalls=1)
    problems = check(history, {"a": job(attempts=0, stalls=1)}).problems
    assert any("delivered with attempts/stalls (1, 1) after (2, 1)" in p for p in problems)
    assert any("ended with attempts/stalls (0, 1)" in p for p in problems)


def test_pending_operations_become_unknown_and_ops_end_once() -> None:
    history = History()
    op = history.invoke("p", ADD, "a")
    history.pending_as_unknown("killed")
    assert op.status == "unknown" and op.error == "killed"
    with pytest.raises(ValueError, match="already ended"):
        history.ok(op)
    assert check(history, {"a": None}).valid  # an unknown add may be lost


# ---------------------------------------------------------------- tokens, heartbeats, leases

TTL_MS = 1000


def timed(op: Op, invoked: float, completed: float | None = None) -> Op:
    """Set an operation's times by hand (seconds), as a test's own clock."""
    op.invoked_at = invoked
    if completed is not None:
        op.completed_at = completed
    return op


def delivery(history: History, process: str, job_id: str, token: str, sent: float,
             got: float, attempts: int = 0, stalls: int = 0) -> Op:
    op = history.invoke(process, PULL, job_id)
    history.ok(op, attempts=attempts, stallCount=stalls, token=token)
    return timed(op, sent, got)


def renew(history: History, kind: str, process: str, job_id: str, token: str, sent: float,
          got: float, status: str = "ok", error: str = "") -> Op:
    op = history.invoke(process, kind, job_id, token=token)
    if status == "ok":
        history.ok(op)
    else:
        getattr(history, status)(op, error)
    return timed(op, sent, got)


def added(history: History, job_id: str = "a") -> None:
    timed(history.invoke("p", ADD, job_id), 0.0, 0.001).status = "ok"


def lease_problems(history: History, final: dict[str, Any] | None = None) -> list[str]:
    return check(history, final or {"a": job(attempts=1, stalls=1)},
                 lock_ttl_ms=TTL_MS).problems


@pytest.mark.parametrize("kind", [ACK, NACK, HEARTBEAT])
def test_a_superseded_token_accepted_is_a_stale_token_applied(kind: str) -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    delivery(history, "w2", "a", "t2", 3.0, 3.01, attempts=1, stalls=1)  # w1's lock ran out
    renew(history, kind, "w1", "a", "t1", 3.5, 3.51)  # accepted with w1's old token
    renew(history, ACK, "w2", "a", "t2", 3.6, 3.61)
    problems = stale_tokens(history)
    assert len(problems) == 1 and problems[0].startswith(
        f"stale token applied: {kind} of a by w1"), problems
    assert problems[0] in lease_problems(history)


def test_the_new_holders_token_and_a_refused_old_one_are_fine() -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    delivery(history, "w2", "a", "t2", 3.0, 3.01, attempts=1, stalls=1)
    renew(history, ACK, "w1", "a", "t1", 3.5, 3.51, "fail", "Invalid or expired lock token")
    renew(history, HEARTBEAT, "w2", "a", "t2", 3.55, 3.56)
    renew(history, ACK, "w2", "a", "t2", 3.6, 3.61)
    assert lease_problems(history) == []


def test_an_old_token_used_before_the_new_delivery_arrived_is_not_judged_stale() -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    renew(history, NACK, "w1", "a", "t1", 1.5, 1.6)  # failed: the job goes back at once
    delivery(history, "w2", "a", "t2", 1.55, 1.62, attempts=1)  # its reply came later
    renew(history, ACK, "w2", "a", "t2", 1.7, 1.71)
    assert stale_tokens(history) == []


def test_a_delivery_while_the_holder_renewed_is_two_live_holders() -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    renew(history, HEARTBEAT, "w1", "a", "t1", 1.8, 1.81)  # lease until 2.8 at least
    delivery(history, "w2", "a", "t2", 2.5, 2.51, attempts=1, stalls=1)
    problems = two_live_holders(history, TTL_MS)
    assert problems == ["two live holders: a delivered to w2 (op 3) while w1 still held "
                        "it (op 1)"], problems
    assert problems[0] in lease_problems(history)


@pytest.mark.parametrize("after", ["no renewal", "refused renewal", "settled", "lost"])
def test_a_delivery_after_the_lease_ended_is_one_live_holder(after: str) -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    if after == "refused renewal":
        renew(history, HEARTBEAT, "w1", "a", "t1", 1.8, 1.81, "fail", "invalid token")
    elif after == "settled":
        renew(history, NACK, "w1", "a", "t1", 1.5, 1.51)
    elif after == "lost":
        timed(history.invoke("w1", LOST), 1.5, 1.5).status = "ok"
    delivery(history, "w2", "a", "t2", 2.5, 2.51, attempts=1, stalls=1)
    assert two_live_holders(history, TTL_MS) == []


def test_two_live_holders_needs_both_orders_when_the_pulls_overlap() -> None:
    history = History()
    added(history)
    # both pulls in flight at once: either could have been handed out first
    delivery(history, "w1", "a", "t1", 1.0, 1.3)
    delivery(history, "w2", "a", "t2", 1.1, 1.2)
    assert len(two_live_holders(history, TTL_MS)) == 1  # each within the other's lease
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 2.3)  # w1's reply only after w2's lease ended
    delivery(history, "w2", "a", "t2", 1.1, 1.2)
    renew(history, ACK, "w2", "a", "t2", 1.25, 1.26)  # w2 let go before w1's reply
    assert two_live_holders(history, TTL_MS) == []


def test_a_refused_renewal_of_a_live_lease_is_a_live_holder_refused() -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    renew(history, HEARTBEAT, "w1", "a", "t1", 1.5, 1.51)
    renew(history, HEARTBEAT, "w1", "a", "t1", 2.2, 2.21, "fail",
          "Job not found or not active (or invalid token)")  # lease ran to 2.5 at least
    renew(history, ACK, "w1", "a", "t1", 2.3, 2.31)
    problems = refused_live_holders(history, TTL_MS)
    assert len(problems) == 1 and problems[0].startswith(
        "live holder refused: heartbeat of a by w1 (op 3)"), problems
    assert problems[0] in lease_problems(history, {"a": job()})


@pytest.mark.parametrize("case", ["retry later", "lease over", "superseded"])
def test_refusals_that_take_no_live_lease_are_fine(case: str) -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    error, sent = "Job not found or not active (or invalid token)", 1.5
    if case == "retry later":
        error = "Queue q is moving between brokers; retry"
    elif case == "lease over":
        sent = 2.5
    else:
        delivery(history, "w2", "a", "t2", 1.2, 1.3, attempts=1, stalls=1)
    renew(history, HEARTBEAT, "w1", "a", "t1", sent, sent + 0.01, "fail", error)
    assert refused_live_holders(history, TTL_MS) == []


def test_two_acknowledged_completions_with_one_token_are_completed_twice() -> None:
    history = History()
    added(history)
    delivery(history, "w1", "a", "t1", 1.0, 1.01)
    renew(history, ACK, "w1", "a", "t1", 1.1, 1.11)
    delivery(history, "w2", "a", "t2", 1.05, 1.2)  # overlapping: no redelivery after
    renew(history, ACK, "w1", "a", "t1", 1.3, 1.31)
    problems = check(history, {"a": job()}).problems
    assert any(p.startswith("completed twice: a (ops 2 and 4)") for p in problems), problems


def test_counters_are_compared_only_between_deliveries_in_a_known_order() -> None:
    history = History()
    added(history)
    # a parked pull sent first, answered after a later pull's FAIL and redelivery
    delivery(history, "w1", "a", "t1", 1.0, 1.5, attempts=1)
    delivery(history, "w2", "a", "t0", 1.1, 1.2, attempts=0)
    assert check(history, {"a": job(attempts=1)}).valid
    delivery(history, "w3", "a", "t3", 2.0, 2.1, attempts=0)  # surely after: went back
    problems = check(history, {"a": job(attempts=1)}).problems
    assert any("delivered with attempts/stalls (0, 0) after (1, 0)" in p for p in problems)
