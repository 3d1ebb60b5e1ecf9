"""The history checker finds each kind of violation, and passes a clean history."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.testing.history import ACK, ADD, PULL, History, check


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
