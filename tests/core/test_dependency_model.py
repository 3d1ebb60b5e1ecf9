"""QueueState's dependency rules against a reference model (hypothesis, stateful).

One queue, jobs that depend on random earlier jobs (live, completed or dead-lettered)
and carry random child-failure policies. Rules pull, complete or fail (terminally) any
active job, cancel jobs, detach children, link a live job to an earlier one
(UpdateParent), and restart the queue from storage, sometimes
between a child's commit and the delivery of its notices (a crash in the window the
outcome rows close). After every step the implementation must agree with the model on
every job's place (waiting for children, ready, active, completed, failed, gone), on
what each waiting job still waits for, and on the children values it has collected.

Where the order of simultaneous outcomes decides (a parent with one child that fails it
and one that releases it), the model follows the broker's documented orders: the
parents of a settled job hear of it in id order, and recovery charges the jobs active
at a crash in creation order, ``createdAt`` then id (``core.recovery.in_charge_order``),
after the outcomes the crash cut off from their notices have settled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from trioqueue.core.job import ACTIVE, QUEUED, WAITING_CHILDREN
from trioqueue.core.options import parse_job_input
from trioqueue.testing.queue import QueueHarness

T0 = 1_764_000_000_000
POLICIES = (None, "failParentOnFailure", "continueParentOnFailure",
            "ignoreDependencyOnFailure", "removeDependencyOnFailure")
WAITING = "waiting-children"
READY = "ready"
GONE = "gone"


@dataclass
class MJob:
    id: str
    policy: str | None
    state: str  # WAITING, READY, "active", "completed", "failed", GONE
    pending: set[str] = field(default_factory=set)
    linked: set[str] = field(default_factory=set)  # its dependsOn and childrenIds
    values: dict[str, Any] = field(default_factory=dict)  # child id -> result


class DependencyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.h = QueueHarness()
        self.h.call("set_stall_config", {"enabled": False})
        self.jobs: dict[str, MJob] = {}
        self.n = 0

    # --- model transitions

    def _settle(self, child: MJob, kind: str, result: Any = None) -> None:
        self._settle_all([(child, kind, result)])

    def _settle_all(self, todo: list[tuple[MJob, str, Any]]) -> None:
        """What the model expects when jobs complete, fail for good or leave.

        Breadth first, as the broker's notices go: every job waiting on a settled job
        hears of it before a parent it failed passes its own failure on; the parents
        of one job in id order, as the broker sends them their notices.
        """
        while todo:
            child, kind, result = todo.pop(0)
            for parent in sorted(self.jobs.values(), key=lambda j: j.id):
                if child.id not in parent.pending or parent.state not in (WAITING, "active"):
                    continue
                if kind == "completed":
                    parent.pending.discard(child.id)
                    parent.values[child.id] = result
                elif kind == "removed":
                    parent.pending.discard(child.id)
                elif child.policy == "failParentOnFailure":
                    if parent.state == WAITING:
                        parent.state = "failed"
                        parent.pending.clear()
                        todo.append((parent, "failed", None))
                        continue
                    parent.pending.discard(child.id)
                elif child.policy == "continueParentOnFailure":
                    parent.pending.clear()
                elif child.policy is not None:
                    parent.pending.discard(child.id)
                else:
                    continue  # no policy: the parent keeps waiting
                if not parent.pending and parent.state == WAITING:
                    parent.state = READY

    # --- rules

    @rule(data=st.data(), policy=st.sampled_from(POLICIES))
    def push(self, data: st.DataObject, policy: str | None) -> None:
        candidates = sorted(j.id for j in self.jobs.values()
                            if j.state in (WAITING, READY, "active", "completed", "failed"))
        deps = data.draw(st.lists(st.sampled_from(candidates), max_size=3, unique=True)
                         if candidates else st.just([]))
        self.n += 1
        job_id = f"j{self.n}"
        fields: dict[str, Any] = {"data": None, "jobId": job_id, "maxAttempts": 1}
        if deps:
            fields["dependsOn"] = deps
        if policy is not None:
            fields[policy] = True
        spec = parse_job_input(fields, custom_id_key="jobId")
        self.h.q.check_push_dependencies([spec], T0, batch=False)
        self.h.call("push", [spec], T0)
        pending = {d for d in deps if self.jobs[d].state != "completed"}
        job = MJob(job_id, policy, WAITING if pending else READY, pending, linked=set(deps))
        for dep in deps:
            if self.jobs[dep].state == "completed":
                job.values[dep] = f"r-{dep}"
        self.jobs[job_id] = job
        # a dead-lettered dependency's policy acts at once, in the order of dependsOn
        self._settle_all([(self.jobs[d], "failed", None) for d in deps
                          if self.jobs[d].state == "failed"])

    @rule(count=st.integers(1, 4))
    def pull(self, count: int) -> None:
        jobs, _ = self.h.call("pull", T0, count=count, owner=None, lock_ttl=30_000,
                              conn=None)
        ready = sum(1 for j in self.jobs.values() if j.state == READY)
        assert len(jobs) == min(count, ready)
        for wire in jobs:
            job = self.jobs[wire["id"]]
            assert job.state == READY, f"{job.id} was pulled while {job.state}"
            job.state = "active"

    @precondition(lambda self: any(j.state == "active" for j in self.jobs.values()))
    @rule(data=st.data(), fail=st.booleans(), deliver=st.booleans())
    def finish(self, data: st.DataObject, fail: bool, deliver: bool) -> None:
        """Complete or fail (for good) an active job; without ``deliver`` the broker
        dies right after the commit, before the notices reach the parents."""
        job = data.draw(st.sampled_from(sorted(
            (j for j in self.jobs.values() if j.state == "active"), key=lambda j: j.id)))
        job.pending.clear()  # (a linked active job may still wait: it stops)
        if fail:
            self.h.call("fail", job.id, T0, error=f"e-{job.id}")
            job.state = "failed"
            self._settle(job, "failed")
        else:
            self.h.call("ack", job.id, T0, has_result=True, result=f"r-{job.id}")
            job.state = "completed"
            self._settle(job, "completed", f"r-{job.id}")
        if deliver:
            self.h.deliver_notices(T0)
        else:
            self.h.q.take_notices()  # lost with the process
            self._restart()

    @precondition(lambda self: any(j.state in (WAITING, READY) for j in self.jobs.values()))
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(sorted(
            (j for j in self.jobs.values() if j.state in (WAITING, READY)),
            key=lambda j: j.id)))
        self.h.call("cancel", job.id, T0)
        self.h.deliver_notices(T0)
        job.state = GONE
        job.pending.clear()
        self._settle(job, "removed")

    @precondition(lambda self: any(j.state in (WAITING, READY) for j in self.jobs.values()))
    @rule(data=st.data())
    def detach(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(sorted(
            (j for j in self.jobs.values() if j.state in (WAITING, READY)),
            key=lambda j: j.id)))
        self.h.call("remove_child_dependency", job.id, T0)
        self.h.deliver_notices(T0)
        for parent in self.jobs.values():
            if job.id in parent.pending:
                parent.linked.discard(job.id)  # the waiting parents forget it
        self._settle(job, "removed")

    @precondition(lambda self: any(j.state in (WAITING, READY, "active")
                                   for j in self.jobs.values()))
    @rule(data=st.data())
    def link(self, data: st.DataObject) -> None:
        """UpdateParent of an earlier job (no cycle) to a live one: a new edge waits
        unless the child completed, and takes a dead-lettered child's policy at once."""
        parent = data.draw(st.sampled_from(sorted(
            (j for j in self.jobs.values() if j.state in (WAITING, READY, "active")),
            key=lambda j: j.id)))
        children = sorted(j.id for j in self.jobs.values()
                          if j.state != GONE and int(j.id[1:]) < int(parent.id[1:]))
        if not children:
            return
        child = self.jobs[data.draw(st.sampled_from(children))]
        self.h.call("update_parent", child.id, parent.id, T0)
        self.h.deliver_notices(T0)
        if child.id in parent.linked:
            return  # already listed: only the child's marker changes
        parent.linked.add(child.id)
        if child.state == "completed":
            parent.values[child.id] = f"r-{child.id}"
            return
        parent.pending.add(child.id)
        if parent.state == READY:
            parent.state = WAITING
        if child.state == "failed":
            self._settle(child, "failed")

    def _restart(self) -> None:
        self.h.restart(T0)
        # An active job is charged its (only) attempt by startup recovery: buried. In
        # creation order, createdAt then id; every job here is created at T0.
        buried = sorted((job for job in self.jobs.values() if job.state == "active"),
                        key=lambda job: (T0, job.id))
        for job in buried:
            job.state = "failed"
            job.pending.clear()
        self._settle_all([(job, "failed", None) for job in buried])

    @rule()
    def restart(self) -> None:
        self._restart()

    # --- invariants

    @invariant()
    def places_agree(self) -> None:
        q = self.h.q
        for job in self.jobs.values():
            live = q.jobs.get(job.id)
            if job.state in (WAITING, READY, "active"):
                assert live is not None, f"{job.id} should be {job.state}"
                expected = {WAITING: WAITING_CHILDREN, READY: QUEUED, "active": ACTIVE}
                assert live.state == expected[job.state], (job.id, live.state, job.state)
                assert set(live.pending or ()) == job.pending, (job.id, live.pending)
            else:
                assert live is None, f"{job.id} should be {job.state}, is {live.state}"
                record = self.h.storage.get_finished(job.id)
                if job.state == GONE:
                    assert record is None
                else:
                    assert record is not None and record["state"] == job.state, job.id

    @invariant()
    def children_values_agree(self) -> None:
        for job in self.jobs.values():
            if job.state == GONE:
                continue
            values = self.h.q.children_outcomes(job.id, "completed")
            assert values == {f"q:{c}": v for c, v in job.values.items()}, job.id

    @invariant()
    def reverse_map_agrees(self) -> None:
        dependents = self.h.index.dependents
        for child in self.jobs:
            expected = {j.id for j in self.jobs.values() if child in j.pending}
            assert dependents.parents_of(child) == expected, child


# TRIOQUEUE_MODEL_SCALE=10 runs the machine ten times as many examples (README).
MODEL_SCALE = int(os.environ.get("TRIOQUEUE_MODEL_SCALE", "1"))
DependencyMachine.TestCase.settings = settings(
    max_examples=300 * MODEL_SCALE, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestDependencyModel = DependencyMachine.TestCase
