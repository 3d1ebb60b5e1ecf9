"""QueueState's dependency rules, driven through the harness (one queue, storage in
memory): waiting for children, the failure policies, and the crash window between a
child's commit and its parent's update, which a restart closes by replaying rows."""

from __future__ import annotations

from typing import Any

import pytest

from trioqueue.core.errors import Refused
from trioqueue.core.job import QUEUED, WAITING_CHILDREN
from trioqueue.core.options import parse_job_input
from trioqueue.testing.queue import QueueHarness

T0 = 1_764_000_000_000


def push(h: QueueHarness, **fields: Any) -> str:
    spec = parse_job_input({"data": None, **fields}, custom_id_key="jobId")
    h.q.check_push_dependencies([spec], T0, batch=False)
    ids: list[str] = h.call("push", [spec], T0)
    return ids[0]


def run(h: QueueHarness, job_id: str, *, result: Any = None, error: str | None = None
        ) -> None:
    jobs, _ = h.call("pull", T0, count=1, owner=None, lock_ttl=30_000, conn=None)
    assert jobs[0]["id"] == job_id
    if error is None:
        h.call("ack", job_id, T0, has_result=True, result=result)
    else:
        h.call("fail", job_id, T0, error=error)


def parent_waiting_for(h: QueueHarness, **child_opts: Any) -> tuple[str, str]:
    child = push(h, jobId="child", maxAttempts=1, **child_opts)
    parent = push(h, jobId="parent", dependsOn=[child])
    assert h.q.jobs[parent].state == WAITING_CHILDREN
    return parent, child


def test_the_parent_is_released_by_its_last_dependency() -> None:
    h = QueueHarness()
    a = push(h, jobId="a")
    b = push(h, jobId="b")
    parent = push(h, jobId="p", dependsOn=[a, b, a])  # a duplicate is awaited once
    assert h.q.jobs[parent].pending == [a, b]
    run(h, a, result=1)
    h.deliver_notices(T0)
    assert h.q.jobs[parent].pending == [b]
    run(h, b, result=2)
    h.deliver_notices(T0)
    job = h.q.jobs[parent]
    assert job.state == QUEUED and job.pending is None and job.children_completed == 2
    assert h.q.children_outcomes(parent, "completed") == {"q:a": 1, "q:b": 2}


def test_a_cancelled_waiting_parent_is_forgotten_by_its_children() -> None:
    h = QueueHarness()
    parent, child = parent_waiting_for(h)
    h.call("cancel", parent, T0)
    assert len(h.index.dependents) == 0
    run(h, child, result=1)
    assert h.q.take_notices() == []  # nobody to tell
    assert h.storage.dep_outcomes(parent) == {}


def test_a_restart_replays_a_completion_the_parent_never_heard_of() -> None:
    h = QueueHarness()
    parent, child = parent_waiting_for(h)
    run(h, child, result=42)
    # the broker dies before the notice reaches the parent: only the outcome row exists
    assert h.q.take_notices() and h.q.jobs[parent].state == WAITING_CHILDREN
    h.restart(T0 + 1)
    assert h.q.jobs[parent].state == QUEUED and h.q.jobs[parent].pending is None
    # the child's record is still there, so its key names its queue
    assert h.q.children_outcomes(parent, "completed") == {f"q:{child}": 42}


def test_a_restart_replays_a_fail_parent_policy() -> None:
    h = QueueHarness()
    parent, child = parent_waiting_for(h, failParentOnFailure=True)
    run(h, child, error="boom")
    h.q.take_notices()
    h.restart(T0 + 1)
    assert parent not in h.q.jobs
    record = h.storage.get_finished(parent)
    assert record is not None and record["dlq"]["error"] == f"Child job {child} failed: boom"


def test_a_child_buried_by_startup_recovery_fails_its_parent() -> None:
    h = QueueHarness()
    parent, child = parent_waiting_for(h, failParentOnFailure=True)
    h.call("pull", T0, count=1, owner=None, lock_ttl=30_000, conn=None)
    h.restart(T0 + 1)  # the child was active: its last attempt is charged, it is buried
    child_record = h.storage.get_finished(child)
    parent_record = h.storage.get_finished(parent)
    assert child_record is not None and child_record["state"] == "failed"
    assert parent_record is not None and parent_record["state"] == "failed"


def test_a_removed_on_complete_child_is_keyed_by_its_bare_id() -> None:
    h = QueueHarness()
    parent, child = parent_waiting_for(h, removeOnComplete=True)
    run(h, child, result="kept")
    h.deliver_notices(T0)
    assert h.q.children_outcomes(parent, "completed") == {child: "kept"}
    later = push(h, jobId="later", dependsOn=[child])  # its completion proof counts
    assert h.q.jobs[later].state == QUEUED


def test_replacing_a_dedup_owner_that_others_depend_on_is_refused() -> None:
    h = QueueHarness()
    owner = push(h, uniqueKey="k")
    push(h, jobId="dependent", dependsOn=[owner])
    spec = parse_job_input({"data": None, "uniqueKey": "k", "dedup": {"replace": True}},
                           custom_id_key="jobId")
    with pytest.raises(Refused) as refused:
        h.call("push", [spec], T0)
    assert refused.value.message == (
        f"Cannot replace deduplicated job {owner} because live jobs depend on it")
    assert owner in h.q.jobs
