"""Dependencies and flows: parents waiting for children, the outcomes that settle them
and the notices that carry those outcomes between queues."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .. import fields, flows
from .. import states as st
from ..errors import JOB_NOT_FOUND, Refused
from ..job import COMPLETED, FAILED, QUEUED, WAITING_CHILDREN, JobRecord, new_timeline
from . import consuming, lifecycle, progress, waiters
from . import finished as fin

if TYPE_CHECKING:
    from .state import QueueState

# Notices between queues (see :meth:`QueueState.apply_notice`), as (kind, *args):
SETTLED = "settled"  # (parent id, child id, outcome): a dependency of the parent settled
SET_PARENT = "set_parent"  # (child id, parent id | None, parent queue): patch the marker
REMOVE_CHILD = "remove_child"  # (child id, parent id): remove it if it has not started
ADOPT = "adopt"  # (jobs,): jobs of an atomic flow, committed by the router


def drop_queued(q: QueueState, job: JobRecord, now: int) -> None:
    """Remove a job that never ran to the end (cancelled, expired, replaced, removed
    as an unprocessed child): its parents stop waiting for it, its waits end."""
    lifecycle.remove_live(q, job, now)
    q.logs.drop(job.id)
    q.writes.delete_job(job.id)
    settle_dependents(q, job.id, flows.DETACHED)
    waiters.settle_gone(q, job.id)


def settle_dependents(q: QueueState, child_id: str, outcome: dict[str, Any]) -> list[str]:
    """Tell every job waiting for ``child_id`` how it ended; returns their ids.

    The outcome row is written in this batch, with the child's own change, so a
    crash cannot separate them; the notice reaches the parent's queue after it.
    """
    parents = q.index.take_dependents(child_id)
    for parent_id in parents:
        q.writes.put_dep_outcome(parent_id, child_id, outcome)
        q.notices.append((parent_id, (SETTLED, parent_id, child_id, outcome)))
    return parents


def child_failed(q: QueueState, job: JobRecord, error: str | None) -> None:
    """A terminal failure settles the job's parents only under a failure policy;
    without one they keep waiting (a retry from the DLQ may still complete it)."""
    policy = flows.failure_policy(job)
    if policy is not None:
        settle_dependents(q, job.id, flows.failed_outcome(q.name, error, policy))


def dependency_exists(q: QueueState, dep_id: str, now: int) -> bool:
    """A job may depend on a live job, a completed one, a dead-lettered one (bunqueue
    finds it in its index: a retry may still complete it, and its failure policy
    applies at once) or one removed on completion whose result is still retained
    (bunqueue's completion proof)."""
    if q.index.locate(dep_id) is not None:
        return True
    record = q.finished.get_any(dep_id)
    if record is not None:
        return record["state"] in (COMPLETED, FAILED)
    return q.index.retained_result(dep_id, now) is not None


def push_reads(specs: Sequence[dict[str, Any]]) -> list[fin.Read]:
    """The finished-job reads admitting ``specs`` may make."""
    reads: list[fin.Read] = []
    for spec in specs:
        custom_id = spec.get("custom_id")
        if custom_id is not None:
            reads.append((fin.GET, custom_id))
        deps = spec.get("depends_on")
        if deps:
            reads.extend(fin.record_reads(deps))
    return reads


def check_push_dependencies(q: QueueState, specs: Sequence[dict[str, Any]], now: int,
                            *, batch: bool) -> None:
    """Refuse unknown or circular dependencies before anything is admitted.

    In a PUSHB, ``dependsOn`` may name any ``customId`` of the same batch, in any
    order; such references are not looked up (the jobs exist once admitted).
    """
    # Every read admission may make (custom ids a finished job holds, finished
    # dependencies and their results), asked for at once before anything changes.
    q.finished.want(push_reads(specs))
    batch_ids = {spec["custom_id"] for spec in specs if spec.get("custom_id")}
    edges: dict[str, list[str]] = {}
    for i, spec in enumerate(specs):
        deps = spec.get("depends_on")
        if not deps:
            continue
        prefix = f"jobs[{i}]: " if batch else ""
        try:
            flows.check_dependencies(spec.get("custom_id"), deps)
            for dep in deps:
                if dep not in batch_ids and not q.dependency_exists(dep, now):
                    raise Refused(f"Dependency job not found: {dep}")
        except Refused as exc:
            raise Refused(prefix + exc.message) from None
        if spec.get("custom_id"):
            edges[spec["custom_id"]] = deps
    cycle = flows.find_cycle(edges)
    if cycle is not None:
        raise Refused(f"Dependency cycle: {' -> '.join(cycle)}")


def open_dependencies(q: QueueState, job: JobRecord, deps: Iterable[str], now: int) -> list[str]:
    """Which of ``deps`` the job must wait for; completed ones are recorded now."""
    pending: list[str] = []
    for dep in dict.fromkeys(deps):
        if q.index.locate(dep) is None:
            record = q.finished.get_any(dep)
            if record is not None and record["state"] == COMPLETED:
                has_result, result = q.finished.result_any(dep)
                q.writes.put_dep_outcome(
                    job.id, dep, flows.completed_outcome(record["queue"], has_result,
                                                         result))
                job.children_completed += 1
                continue
            retained = q.index.retained_result(dep, now)
            if retained is not None:
                q.writes.put_dep_outcome(
                    job.id, dep, flows.completed_outcome(None, *retained))
                job.children_completed += 1
                continue
        # Live, or a job of the same PUSHB that is admitted after this one.
        pending.append(dep)
    return pending


def settle_failed_dependencies(q: QueueState, job_ids: Iterable[str], after_seq: int,
                               now: int) -> None:
    """After a PUSH or PUSHB: the jobs it admitted (admission number above
    ``after_seq``) that wait for a child already dead-lettered under a failure policy
    take that outcome now. Run once the whole batch is in: a later job of the batch may
    take the id of a dead-lettered one, and is then what its dependents wait for."""
    for job_id in job_ids:
        job = q.jobs.get(job_id)
        if job is not None and job.seq > after_seq and job.pending:
            settle_failed_children(q, job_id, list(job.pending), now)


def settle_failed_children(q: QueueState, parent_id: str, child_ids: Iterable[str],
                           now: int) -> None:
    """Of ``child_ids``, which the parent has just come to wait for, each that already
    failed for good under a failure policy settles it at once, as its failure would
    have had the link come first (bunqueue applies the policy when the edge is made):
    the parent is dead-lettered, released, or drops the edge."""
    for child_id in child_ids:
        outcome = _failed_outcome(q, child_id)
        if outcome is not None:
            q.writes.put_dep_outcome(parent_id, child_id, outcome)
            apply_outcome(q, parent_id, child_id, outcome, now)


def _failed_outcome(q: QueueState, child_id: str) -> dict[str, Any] | None:
    """The outcome of a child in the dead-letter queue that failed under a failure
    policy; None for a live child or one that failed without a policy (its parents
    wait: a retry from the DLQ may still complete it)."""
    if q.index.locate(child_id) is not None:
        return None
    record = q.finished.get_any(child_id)
    if record is None or record["state"] != FAILED:
        return None
    policy = flows.record_failure_policy(record)
    if policy is None:
        return None
    error = (record.get("dlq") or {}).get("error")
    return flows.failed_outcome(record["queue"], error, policy)


def park_new(q: QueueState, job: JobRecord, pending: list[str], now: int) -> None:
    lifecycle.move(q, job, st.LINK)  # admitted as QUEUED, never placed: it waits at once
    job.pending = pending
    job.timeline = new_timeline(WAITING_CHILDREN, now)
    for dep in pending:
        q.index.add_dependent(dep, job.id)
    q.c.waiting_children += 1
    q.persist(job)
    q.emit("pushed", job.id, now)
    q.emit("waiting-children", job.id, now)


def adopt(q: QueueState, job: JobRecord, now: int) -> None:
    """Take in a job of an atomic flow (PUSHF), already committed by the router.

    The router claimed the id, registered the dependencies and stored the job with
    an admission number from :meth:`reserve_seq`; the queue gives it its place.
    """
    q.jobs[job.id] = job
    q.c.pushed += 1  # (a flow's job: admitted by the router, not by push)
    if job.state == WAITING_CHILDREN:
        lifecycle.count(q, job, +1, now)
    else:
        lifecycle.enqueue(q, job, now, keep_seq=True)
    q.emit("pushed", job.id, now)
    if job.state == WAITING_CHILDREN:
        q.emit("waiting-children", job.id, now)
    elif job.run_at > now:
        q.emit("delayed", job.id, now, delay=float(job.run_at - now))


def apply_notice(q: QueueState, notice: tuple[Any, ...], now: int) -> None:
    """A message from another job's queue (or the router), see :data:`SETTLED`..."""
    kind = notice[0]
    if kind == SETTLED:
        q.apply_outcome(notice[1], notice[2], notice[3], now)
    elif kind == SET_PARENT:
        set_parent(q, notice[1], notice[2], notice[3])
    elif kind == REMOVE_CHILD:
        job = q.jobs.get(notice[1])
        if job is not None and job.state in (QUEUED, WAITING_CHILDREN):
            drop_queued(q, job, now)
            q.emit("removed", job.id, now, prev="waiting")
    elif kind == ADOPT:
        for job in notice[1]:
            q.adopt(job, now)
    else:
        raise ValueError(f"unknown notice {kind!r}")


def apply_outcome(q: QueueState, parent_id: str, child_id: str, outcome: dict[str, Any],
                  now: int) -> None:
    """One dependency of ``parent_id`` settled: the rules of the four policies.

    Ignored when the parent no longer waits for that child (it left, or a
    ``continueParentOnFailure`` already released it): notices are at-least-once
    across a restart, which replays the outcome rows.
    """
    job = q.jobs.get(parent_id)
    if job is None or not job.pending or child_id not in job.pending:
        return
    if outcome.get("kind") == flows.WAITING_KIND:
        return  # (a row that settles nothing: the parent waits for the child again)
    # The child's queue took this registration already, except when a restart
    # replays the row: the map was rebuilt from the stored pending list then.
    q.index.drop_dependent(child_id, parent_id)
    kind = outcome.get("kind")
    if kind == flows.FAILED:
        policy = outcome.get("policy")
        if policy == flows.FAIL_PARENT and job.state == WAITING_CHILDREN:
            consuming.bury(q, job, now, "unknown",
                       f"Child job {child_id} failed: {outcome.get('error')}")
            q.announce("flow:failed", now, parentJobId=job.id, failedChildId=child_id,
                        error=outcome.get("error") or "Child job failed")
            return
        if policy == flows.CONTINUE_PARENT:
            for other in job.pending:
                if other != child_id:
                    q.index.drop_dependent(other, parent_id)
            job.pending.clear()
        else:
            job.pending.remove(child_id)
    else:
        job.pending.remove(child_id)
        if kind == flows.COMPLETED:
            job.children_completed += 1
        elif outcome.get("unlink"):
            _forget_child(job, child_id)
    if not job.pending:
        job.pending = None
        if job.state == WAITING_CHILDREN:
            lifecycle.count(q, job, -1, now)
            lifecycle.move(q, job, st.RESOLVE)
            job.add_timeline("waiting", now)
            lifecycle.enqueue(q, job, now)
            q.persist(job)
            q.emit("waiting", job.id, now, prev="waiting-children")
            q.announce("job:dependencies-resolved", now, jobId=job.id)
            children = len(job.children_ids)
            if children and job.children_completed >= children:
                q.announce("flow:completed", now, parentJobId=job.id,
                            childrenCount=children)
            return
    q.persist(job)


def _forget_child(job: JobRecord, child_id: str) -> None:
    """A detached child leaves its parent's lists (bunqueue): a later link is a new
    edge, which the parent waits for again."""
    job.children_ids = [c for c in job.children_ids if c != child_id]
    job.depends_on = [d for d in job.depends_on if d != child_id]
    if isinstance(job.data, dict) and "__childrenIds" in job.data:
        data = dict(job.data)
        if job.children_ids:
            data["__childrenIds"] = list(job.children_ids)
        else:
            del data["__childrenIds"]
        job.data = data


def replay_outcomes(q: QueueState, now: int) -> None:
    """After a restart: apply the outcome rows written after a parent last changed
    (the notice was lost with the process), exactly as the notice would have."""
    for job in [j for j in q.jobs.values() if j.pending]:
        rows = q.finished.dep_outcomes(job.id)
        for child_id in list(job.pending or ()):
            outcome = rows.get(child_id)
            if outcome is not None:
                q.apply_outcome(job.id, child_id, outcome, now)


def move_to_waiting_children(q: QueueState, job_id: str, now: int, token: str | None) -> bool:
    """Active -> waiting-children while it has dependencies left (BullMQ's rule:
    False, and the job stays active, when there is nothing to wait for)."""
    job = progress.active_for_progress(q, job_id, now)
    q.leases.check(job, token)
    if not job.pending:
        return False
    q.leases.release(job.id)
    lifecycle.transition(q, job, st.PARK, now)
    job.started_at = None
    job.add_timeline(WAITING_CHILDREN, now)
    q.persist(job)
    q.emit("waiting-children", job.id, now)
    return True


def update_parent(q: QueueState, child_id: str, parent_id: str, now: int) -> None:
    """bunqueue's legacy flow linking, run in the parent's queue.

    A parent that already lists the child (in any state) only has the child's
    parent marker patched. A new edge needs a live parent that has not finished:
    it then waits for the child unless the child already completed. A parent that
    depends on the child since its admission (``dependsOn``) has that edge already,
    waiting or settled: the child joins its children and no second edge is made,
    which the child's one outcome would leave waiting for ever. A child detached
    (RemoveChildDependency) left the parent's lists, so linking it again is a new edge.
    """
    if child_id == parent_id:
        raise Refused("A job cannot be its own parent")
    fields.check_dependency_pair(parent_id, child_id)
    # Every read this may make, before anything changes (see core/queue/finished.py).
    q.finished.want([(fin.GET, parent_id), *fin.record_reads([child_id])])
    parent = q.jobs.get(parent_id)
    if parent is None:
        record = q.finished.get(parent_id)
        if record is None:
            raise Refused(f"Parent job {parent_id} not found")
        if child_id not in (record.get("childrenIds") or ()):
            raise Refused(
                f"Parent job {parent_id} is {record['state']} and cannot take children")
        q.notices.append((child_id, (SET_PARENT, child_id, parent_id, q.name)))
        return
    if child_id not in parent.children_ids:
        new_edge = child_id not in parent.depends_on
        wait = _child_to_wait_for(q, child_id, now) if new_edge else False
        parent.children_ids = [*parent.children_ids, child_id]
        if isinstance(parent.data, dict):
            parent.data = {**parent.data, "__childrenIds": list(parent.children_ids)}
        if new_edge:
            parent.depends_on = [*parent.depends_on, child_id]
        if wait:
            parent.pending = [*(parent.pending or ()), child_id]
            q.index.add_dependent(child_id, parent_id)
            # (an outcome row of an earlier link, since detached, no longer stands)
            q.writes.put_dep_outcome(parent_id, child_id, flows.WAITING)
            if parent.state == QUEUED:
                lifecycle.transition(q, parent, st.LINK, now)
                parent.add_timeline(WAITING_CHILDREN, now)
                q.emit("waiting-children", parent_id, now)
        elif new_edge:
            # Already completed: record its outcome, as admission does.
            open_dependencies(q, parent, (child_id,), now)
        q.persist(parent)
        if wait:
            settle_failed_children(q, parent_id, (child_id,), now)
    q.notices.append((child_id, (SET_PARENT, child_id, parent_id, q.name)))


def _child_to_wait_for(q: QueueState, child_id: str, now: int) -> bool:
    """Whether a parent newly linked to ``child_id`` waits for it: yes while it lives
    or failed (a retry from the DLQ may still complete it; a failure policy it carries
    then settles the parent at once), no once it completed; refused when no such job
    exists."""
    if q.index.locate(child_id) is not None:
        return True
    record = q.finished.get_any(child_id)
    if record is not None and record["state"] == FAILED:
        return True
    if not q.dependency_exists(child_id, now):
        raise Refused(f"Child job {child_id} not found")
    return False


def set_parent(q: QueueState, child_id: str, parent_id: str | None, parent_queue: str) -> None:
    job = q.jobs.get(child_id)
    if job is None or job.parent_id == parent_id:
        return
    job.parent_id = parent_id
    if isinstance(job.data, dict):
        data = {k: v for k, v in job.data.items()
                if k not in ("__parentId", "__parentQueue")}
        if parent_id is not None:
            data["__parentId"] = parent_id
            data["__parentQueue"] = parent_queue
        job.data = data
    q.persist(job)


def remove_child_dependency(q: QueueState, child_id: str, now: int) -> bool:
    """Detach a job from the parents waiting for it, which also drop it from their
    ``childrenIds`` and ``dependsOn`` (bunqueue); True when there was a link."""
    job = q.jobs.get(child_id)
    if job is None:
        if q.finished.get(child_id) is None:
            raise Refused(JOB_NOT_FOUND)
        return False
    parents = settle_dependents(q, child_id, flows.UNLINKED)
    had_parent = job.parent_id is not None
    if had_parent:
        set_parent(q, child_id, None, q.name)
    return bool(parents) or had_parent


def remove_unprocessed_children(q: QueueState, parent_id: str) -> frozenset[str]:
    """Remove the children the parent still waits for that have not started; returns
    the other queues asked to (their removals settle the parent by notice)."""
    job = q.jobs.get(parent_id)
    if job is None:
        if q.finished.get(parent_id) is None:
            raise Refused(JOB_NOT_FOUND)
        return frozenset()
    queues: set[str] = set()
    for child_id in job.pending or ():
        q.notices.append((child_id, (REMOVE_CHILD, child_id, parent_id)))
        queue = q.index.locate(child_id)
        if queue is not None and queue != q.name:
            queues.add(queue)
    return frozenset(queues)


def child_queue(q: QueueState, child_id: str) -> str | None:
    queue = q.index.locate(child_id)
    if queue is None:
        record = q.finished.get_any(child_id)
        queue = record["queue"] if record is not None else None
    return queue


def want_children(q: QueueState, child_ids: Iterable[str]) -> None:
    """The finished records :meth:`child_queue` will read, asked for at once."""
    q.finished.want([(fin.GET, c) for c in child_ids if q.index.locate(c) is None])


def children_outcomes(q: QueueState, parent_id: str, kind: str,
                      policy: str | None = None) -> dict[str, Any]:
    """Children's results (``kind`` completed) or errors (failed, by policy), keyed
    ``<queue>:<id>`` while the child exists and by bare id once it is gone."""
    out: dict[str, Any] = {}
    rows = q.finished.dep_outcomes(parent_id)
    want_children(q, rows)
    for child_id, outcome in rows.items():
        if outcome.get("kind") != kind:
            continue
        key = flows.child_key(child_queue(q, child_id), child_id)
        if kind == flows.COMPLETED:
            out[key] = outcome.get("result")
        elif outcome.get("policy") == policy:
            out[key] = outcome.get("error")
    return out


def dependencies(q: QueueState, parent_id: str) -> dict[str, Any]:
    """All four lists of BullMQ's ``getDependencies`` for a job (``Job not found``
    for an id this queue does not know)."""
    job = q.jobs.get(parent_id)
    if job is None and q.finished.get(parent_id) is None:
        raise Refused(JOB_NOT_FOUND)
    pending = (job.pending or []) if job is not None else []
    want_children(q, pending)
    return {
        "processed": q.children_outcomes(parent_id, flows.COMPLETED),
        "unprocessed": [flows.child_key(child_queue(q, c), c) for c in pending],
        "failed": q.children_outcomes(parent_id, flows.FAILED, flows.CONTINUE_PARENT),
        "ignored": q.children_outcomes(parent_id, flows.FAILED,
                                          flows.IGNORE_DEPENDENCY),
    }

