"""The recovery sequence (core.recovery.rebuild): the order in which it settles things.

Jobs active at a crash are charged an attempt in creation order (createdAt, then id),
after the outcomes the crash cut off from their notices have settled. The order only
shows when two outcomes conflict at one parent: a ``failParentOnFailure`` child buries
a waiting parent, a ``continueParentOnFailure`` child releases it, and whichever the
parent hears of first wins.
"""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.job import ACTIVE, FAILED, QUEUED, WAITING_CHILDREN
from trioqueue.core.options import parse_job_input
from trioqueue.core.queue import SETTLED, QueueState
from trioqueue.core.recovery import in_charge_order, in_restore_order, rebuild
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.reads import direct_view
from trioqueue.testing.queue import DictIndex, QueueHarness

T0 = 1_764_000_000_000
CONTINUE = "continueParentOnFailure"
FAIL = "failParentOnFailure"


def push(h: QueueHarness, job_id: str, deps: tuple[str, ...] = (), policy: str | None = None,
         now: int = T0) -> None:
    fields: dict[str, Any] = {"data": None, "jobId": job_id, "maxAttempts": 1}
    if deps:
        fields["dependsOn"] = list(deps)
    if policy:
        fields[policy] = True
    spec = parse_job_input(fields, custom_id_key="jobId")
    h.q.check_push_dependencies([spec], now, batch=False)
    h.call("push", [spec], now)


def pull(h: QueueHarness, count: int, now: int = T0) -> list[str]:
    jobs, _ = h.call("pull", now, count=count, owner=None, lock_ttl=30_000, conn=None)
    return [job["id"] for job in jobs]


def state(h: QueueHarness, job_id: str) -> str:
    live = h.q.jobs.get(job_id)
    if live is not None:
        return live.state
    record = h.storage.get_finished(job_id)
    assert record is not None, f"{job_id} is gone"
    return str(record["state"])


def test_a_job_readmitted_after_its_dependencies_is_charged_in_creation_order() -> None:
    """The case the dependency model found (../shared/design/repro_restart_order.py).

    j4 (continue) and j5 (fail) are both active at the crash and j6 waits for both.
    j4 was pushed first but re-admitted later, when its own dependencies resolved, so
    by admission order (seq) j5 came first and buried j6. By creation order j4 comes
    first: j6 is released, and j5's failure finds it no longer waiting.
    """
    h = QueueHarness()
    push(h, "j1")
    push(h, "j2", policy=CONTINUE)
    push(h, "j3", ("j1",))
    push(h, "j4", ("j1", "j2"), CONTINUE)
    push(h, "j5", policy=FAIL)
    assert pull(h, 3) == ["j1", "j2", "j5"]
    h.call("cancel", "j3", T0)
    h.deliver_notices(T0)
    h.call("fail", "j2", T0, error="e-j2")
    h.deliver_notices(T0)  # j4 released by j2's continueParentOnFailure
    push(h, "j6", ("j4", "j5"))
    assert pull(h, 1) == ["j4"]
    assert h.q.jobs["j4"].seq > h.q.jobs["j5"].seq  # re-admitted after j5: the old trap

    h.restart(T0)

    assert state(h, "j4") == state(h, "j5") == FAILED
    assert state(h, "j6") == QUEUED
    assert not h.q.jobs["j6"].pending


@pytest.mark.parametrize(("older", "younger", "parent_ends"), [
    (CONTINUE, FAIL, QUEUED),  # the older child releases the parent first
    (FAIL, CONTINUE, FAILED),  # the older child buries it first
])
def test_created_at_orders_before_the_id(older: str, younger: str, parent_ends: str) -> None:
    """"b" is created a millisecond before "a": it is charged first, whatever its name."""
    h = QueueHarness()
    push(h, "b", policy=older)
    push(h, "a", policy=younger, now=T0 + 1)
    push(h, "parent", ("a", "b"), now=T0 + 1)
    assert sorted(pull(h, 2, T0 + 1)) == ["a", "b"]

    h.restart(T0 + 2)

    assert state(h, "parent") == parent_ends


def test_outcomes_cut_off_by_the_crash_settle_before_interrupted_jobs_are_charged() -> None:
    """c failed (its row committed, its notice lost with the process): that buries p,
    and p's failure buries g. x, active at the crash, would release g, but its failure
    comes after: the outcome recorded before the crash is settled to the end first."""
    h = QueueHarness()
    push(h, "x", policy=CONTINUE)
    push(h, "c", policy=FAIL)
    push(h, "p", ("c",), FAIL)
    push(h, "g", ("p", "x"))
    assert sorted(pull(h, 2)) == ["c", "x"]
    h.call("fail", "c", T0, error="e-c")
    h.q.take_notices()  # lost with the process

    h.restart(T0)

    assert state(h, "p") == state(h, "g") == FAILED
    assert state(h, "x") == FAILED


def test_charge_order_is_global_across_queues() -> None:
    """A broker restart rebuilds every queue at once: the children live in two queues,
    the parent in a third, and the order is still createdAt then id across them."""
    storage = MemoryStorage()
    index = DictIndex()

    def fresh(name: str) -> QueueState:
        return QueueState(name, index, direct_view(storage, name))

    states = {name: fresh(name) for name in ("fail", "cont", "parents")}

    def run(name: str, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(states[name], method)(*args, **kwargs)
        storage.apply([states[name].take_writes()])
        return result

    def spec(job_id: str, **fields: Any) -> dict[str, Any]:
        return parse_job_input({"data": None, "jobId": job_id, "maxAttempts": 1, **fields},
                               custom_id_key="jobId")

    # The continue child is created first but lives in a queue whose name sorts last.
    run("cont", "push", [spec("z-cont", continueParentOnFailure=True)], T0)
    run("fail", "push", [spec("a-fail", failParentOnFailure=True)], T0 + 1)
    run("parents", "push", [spec("parent", dependsOn=["a-fail", "z-cont"])], T0 + 1)
    for name in ("fail", "cont"):
        run(name, "pull", T0 + 1, count=1, owner=None, lock_ttl=30_000, conn=None)

    index.clear()
    index.dependents.clear()
    states = {name: fresh(name) for name in states}
    left = rebuild(storage.load(), T0 + 2, state_for=states.get, locate=index.locate,
                   dependents=index.dependents)

    assert left == []
    parent = states["parents"].jobs["parent"]
    assert parent.state == QUEUED and not parent.pending


def test_a_queue_not_rebuilt_gets_its_notices_back() -> None:
    """A queue actor's restart rebuilds its own queue only: what recovery tells a job of
    another queue is returned for the caller to post, not applied or dropped.

    c failed in queue "a" with its notice lost; replaying its row buries p (also in
    "a"), whose failure must reach g in queue "b", which is not being rebuilt.
    """
    storage = MemoryStorage()
    index = DictIndex()
    a = QueueState("a", index, direct_view(storage, "a"))
    b = QueueState("b", index, direct_view(storage, "b"))

    def run(q: QueueState, method: str, *args: Any, **kwargs: Any) -> Any:
        result = getattr(q, method)(*args, **kwargs)
        storage.apply([q.take_writes()])
        return result

    def spec(job_id: str, **fields: Any) -> dict[str, Any]:
        return parse_job_input({"data": None, "jobId": job_id, "maxAttempts": 1, **fields},
                               custom_id_key="jobId")

    run(a, "push", [spec("c", failParentOnFailure=True)], T0)
    run(a, "push", [spec("p", dependsOn=["c"], failParentOnFailure=True)], T0)
    run(b, "push", [spec("g", dependsOn=["p"])], T0)
    run(a, "pull", T0, count=1, owner=None, lock_ttl=30_000, conn=None)
    run(a, "fail", "c", T0, token=None, error="e-c")
    a.take_notices()  # lost with the actor

    index.remove("p")  # what the router forgets of queue "a" before the rebuild
    rebuilt = QueueState("a", index, direct_view(storage, "a"))
    left = rebuild(storage.load(), T0, state_for={"a": rebuilt}.get, locate=index.locate,
                   dependents=index.dependents, charge_active=False)

    assert "p" not in rebuilt.jobs  # buried by the replayed row
    assert [(job_id, notice[0], notice[2]) for job_id, notice in left] == [
        ("g", SETTLED, "p")]
    b.apply_notice(left[0][1], T0)
    assert "g" not in b.jobs  # p's failParentOnFailure reached it


def test_an_actor_restart_keeps_active_jobs_active() -> None:
    h = QueueHarness()
    push(h, "a", policy=FAIL)
    push(h, "parent", ("a",))
    assert pull(h, 1) == ["a"]

    h.restart(T0, charge_active=False)

    assert state(h, "a") == ACTIVE
    assert state(h, "parent") == WAITING_CHILDREN


def test_the_two_orders() -> None:
    records = [
        {"id": "b", "seq": 1, "createdAt": 5.0},
        {"id": "a", "seq": 3, "createdAt": 5.0},
        {"id": "c", "seq": 2, "createdAt": 4.0},
    ]
    assert [r["id"] for r in in_restore_order(records)] == ["b", "c", "a"]
    assert [r["id"] for r in in_charge_order(records)] == ["c", "a", "b"]


def _pull_locked(h: QueueHarness, count: int, now: int, ttl: int = 5_000
                 ) -> list[tuple[str, str]]:
    jobs, tokens = h.call("pull", now, count=count, owner="w1", lock_ttl=ttl, conn=None)
    return [(job["id"], token) for job, token in zip(jobs, tokens, strict=True)]


def test_a_rebuild_that_keeps_active_jobs_keeps_their_locks_and_tokens() -> None:
    """A takeover (or an actor's restart): the worker's token still renews and
    acknowledges the job; a wrong or missing token is refused as before."""
    h = QueueHarness()
    push(h, "a")
    push(h, "b")
    (a, token_a), (b, token_b) = _pull_locked(h, 2, T0)

    h.restart(T0 + 1_000, charge_active=False)

    assert h.call("heartbeat", a, T0 + 2_000, token=token_a, duration=None)
    assert not h.call("heartbeat", a, T0 + 2_000, token="not-it", duration=None)
    with pytest.raises(Refused, match="Lock token required"):
        h.call("ack", b, T0 + 2_000)
    h.call("ack", b, T0 + 2_000, token=token_b)
    assert state(h, "b") == "completed"


def test_a_kept_lock_runs_out_a_ttl_after_the_rebuild_not_before() -> None:
    """Renewals are not stored: the lock ends a whole ttl after the rebuild (the
    holder may have renewed it just before), and then the job is re-leased at once,
    long before the stall interval; never before."""
    h = QueueHarness()
    h.call("push", [parse_job_input({"data": None, "jobId": "a", "maxAttempts": 3},
                                    custom_id_key="jobId")], T0)
    [(a, _)] = _pull_locked(h, 1, T0, ttl=5_000)
    rebuilt_at = T0 + 3_000

    h.restart(rebuilt_at, charge_active=False)

    h.q.tick(rebuilt_at + 5_000)
    h.commit()
    assert state(h, a) == ACTIVE
    assert h.q.next_deadline() == rebuilt_at + 5_001
    h.q.tick(rebuilt_at + 5_001)
    h.commit()
    assert state(h, a) == QUEUED
    assert [j for j, _ in _pull_locked(h, 1, rebuilt_at + 5_002)] == [a]


def test_a_kept_lock_keeps_the_longest_renewal_granted() -> None:
    """An ExtendLock longer than the pull's ttl is stored (it is a longer promise),
    so the rebuilt lock lasts at least that long after the rebuild."""
    h = QueueHarness()
    push(h, "a")
    [(a, token)] = _pull_locked(h, 1, T0, ttl=5_000)
    assert h.call("extend_lock", a, T0 + 100, token=token, duration=60_000)

    h.restart(T0 + 1_000, charge_active=False)

    h.q.tick(T0 + 1_000 + 59_000)
    h.commit()
    assert state(h, a) == ACTIVE
    assert h.q.leases.locks[a].expires_at == T0 + 1_000 + 60_001


def test_a_restart_of_the_broker_still_charges_active_jobs() -> None:
    """A broker restart (its workers' connections are gone) charges the attempt, as
    before: the stored lock does not keep the job active."""
    h = QueueHarness()
    push(h, "a")
    _pull_locked(h, 1, T0)
    h.restart(T0 + 1_000)
    assert "a" not in h.q.leases.locks and state(h, "a") == FAILED  # (maxAttempts 1)
