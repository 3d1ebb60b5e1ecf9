"""Dependencies and flows: the pure parts (outcome records, PUSHF validation, keys).

How dependencies work, end to end (the queue state machine and the router do the rest):

- A job whose ``dependsOn`` names jobs that have not completed waits in
  ``waiting-children``; the ids still awaited are its ``pending`` list (persisted), and
  the router keeps the reverse map (child -> waiting parents) so that whichever queue
  finishes a child finds the parents at once, synchronously.
- When a child settles for its parents (completes, fails for good under a failure
  policy, or is removed or detached), its queue writes an **outcome row** per parent
  (:func:`completed_outcome`, :func:`failed_outcome`, :data:`DETACHED`) in the SAME
  commit as the child's own change, and posts a notice to each parent's queue. The
  parent's queue applies the notice (:meth:`QueueState.apply_outcome`). A crash between
  the two loses nothing: a restart replays the rows of every waiting parent.
- Outcome rows stay as long as the parent's record: they are where ``GetChildrenValues``
  and the failure queries read from, also after the parent finished.
- A child that fails for good without a policy settles nothing: its parents keep
  waiting, as in BullMQ (a retry from the DLQ may still complete it). A job that comes
  to depend on a child already dead-lettered under a policy (``dependsOn``,
  ``UpdateParent``) takes that outcome when the edge is made, as bunqueue applies it
  at the link: the order of the failure and the link does not matter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import fields
from .errors import Refused
from .job import QUEUED, WAITING_CHILDREN, JobRecord, new_timeline
from .options import MAX_DATA_CHARS, parse_job_input
from .split_dict import SplitDict

# Outcome kinds, as stored in an outcome row.
COMPLETED = "completed"
FAILED = "failed"
DETACHED_KIND = "detached"

# Failure policies, as stored in a failed outcome (the child's option that chose it).
FAIL_PARENT = "fail"
CONTINUE_PARENT = "continue"
IGNORE_DEPENDENCY = "ignore"
REMOVE_DEPENDENCY = "remove"

DETACHED: dict[str, Any] = {"kind": DETACHED_KIND}
# RemoveChildDependency's outcome: the parent stops waiting and also forgets the child
# (its childrenIds and dependsOn, as bunqueue), so a later link is a new edge.
UNLINKED: dict[str, Any] = {"kind": DETACHED_KIND, "unlink": True}
# A parent waits for the child again (linked anew after a detach): the pair's earlier
# row no longer stands. It settles nothing, and a restart's replay passes over it.
WAITING_KIND = "waiting"
WAITING: dict[str, Any] = {"kind": WAITING_KIND}

# Keys of job data that flow producers (and UpdateParent) own; Update keeps them.
FLOW_DATA_KEYS = ("__parentId", "__parentQueue", "__childrenIds", "__flowParentId",
                  "__flowParentIds")

# bunqueue also caps a flow's data at 64 MB: our frame cap (max_frame_bytes, 64 MiB by
# default) bounds the whole PUSHF already, so no second count is made here.
MAX_FLOW_JOBS = 10_000


def completed_outcome(queue: str | None, has_result: bool, result: Any) -> dict[str, Any]:
    outcome: dict[str, Any] = {"kind": COMPLETED, "queue": queue}
    if has_result:
        outcome["result"] = result
    return outcome


def failed_outcome(queue: str, error: str | None, policy: str) -> dict[str, Any]:
    return {"kind": FAILED, "queue": queue, "error": error, "policy": policy}


# The child-failure options in the order they act: (record key, attribute, policy).
_POLICIES = (
    ("failParentOnFailure", "fail_parent_on_failure", FAIL_PARENT),
    ("continueParentOnFailure", "continue_parent_on_failure", CONTINUE_PARENT),
    ("ignoreDependencyOnFailure", "ignore_dependency_on_failure", IGNORE_DEPENDENCY),
    ("removeDependencyOnFailure", "remove_dependency_on_failure", REMOVE_DEPENDENCY),
)


def failure_policy(job: Any) -> str | None:
    """The one child-failure policy that acts for a job, which may carry several.

    bunqueue accepts the four options together and lets the first of this order act:
    failing the parent, then continuing it, then ignoring the edge (its error kept),
    then removing it. Once one has acted the others find nothing left to do (a parent
    already dead-lettered or released), so one policy stands for them all.
    """
    for _, attr, policy in _POLICIES:
        if getattr(job, attr):
            return policy
    return None


def record_failure_policy(record: Mapping[str, Any]) -> str | None:
    """:func:`failure_policy` of a stored record (a job that already finished)."""
    for key, _, policy in _POLICIES:
        if record.get(key):
            return policy
    return None


def child_key(queue: str | None, child_id: str) -> str:
    """bunqueue's key for a child in the value maps: ``<queue>:<id>``, or the bare id
    when the child no longer exists anywhere."""
    return f"{queue}:{child_id}" if queue is not None else child_id


def check_dependencies(job_id: str | None, depends_on: Sequence[str]) -> None:
    if job_id is not None and job_id in depends_on:
        raise Refused(f"Job cannot depend on itself: {job_id}")
    for dep in depends_on:
        fields.check_dependency_pair(job_id, dep)


def find_cycle(edges: Mapping[str, Sequence[str]]) -> list[str] | None:
    """A dependency cycle among ``edges`` (id -> ids it depends on), or None.

    Only ids that are keys of ``edges`` are followed: dependencies outside the graph
    exist already, so they cannot close a cycle through it. Iterative (a chain of
    10,000 jobs would overflow Python's recursion limit).
    """
    done: set[str] = set()
    for root in edges:
        if root in done:
            continue
        path: list[str] = [root]
        on_path = {root}
        stack = [iter(edges[root])]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                stack.pop()
                finished = path.pop()
                on_path.discard(finished)
                done.add(finished)
                continue
            if nxt not in edges or nxt in done:
                continue
            if nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            path.append(nxt)
            on_path.add(nxt)
            stack.append(iter(edges[nxt]))
    return None


class Dependents:
    """child id -> ids of the live jobs waiting for it: the reverse of every waiting
    job's ``pending`` list. The router keeps one for the broker (its JobIndex
    dependency methods answer from it), the test harness one for its queue."""

    __slots__ = ("_parents",)

    def __init__(self) -> None:
        # A SplitDict: one entry per child of a waiting parent, up to a million with
        # large flows, and a dict that size copies itself whole as it grows.
        self._parents: SplitDict[str, set[str]] = SplitDict()

    def add(self, child_id: str, parent_id: str) -> None:
        self._parents.setdefault(child_id, set()).add(parent_id)

    def drop(self, child_id: str, parent_id: str) -> None:
        parents = self._parents.get(child_id)
        if parents is not None:
            parents.discard(parent_id)
            if not parents:
                del self._parents[child_id]

    def take(self, child_id: str) -> list[str]:
        """Forget and return the parents of a child that settled (sorted: notices go
        out in a stable order)."""
        parents = self._parents.pop(child_id, None)
        return sorted(parents) if parents else []

    def parents_of(self, child_id: str) -> frozenset[str]:
        return frozenset(self._parents.get(child_id, ()))

    def __contains__(self, child_id: object) -> bool:
        return child_id in self._parents

    def __len__(self) -> int:
        return len(self._parents)

    def clear(self) -> None:
        self._parents.clear()

    def register(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Rebuild from stored jobs (their ``pending`` lists) before they are restored:
        a job buried during restore must find the parents waiting for it."""
        for record in records:
            for child_id in record.get("pending") or ():
                self.add(child_id, record["id"])


@dataclass(slots=True)
class FlowItem:
    """One validated PUSHF job: its pre-allocated id, queue and parsed input."""

    id: str
    queue: str
    spec: dict[str, Any]


_FLOW_REFUSED = (
    ("repeat", "repeat is not supported inside an atomic flow"),
    ("uniqueKey", "deduplication is not supported inside an atomic flow"),
    ("dedup", "deduplication is not supported inside an atomic flow"),
    ("debounceId", "debounce is not supported inside an atomic flow"),
    ("debounceTtl", "debounce is not supported inside an atomic flow"),
)
_POLICY_ATTRS = ("fail_parent_on_failure", "continue_parent_on_failure",
                 "ignore_dependency_on_failure", "remove_dependency_on_failure")


def parse_flow(msg: Mapping[str, Any], *, max_data_bytes: int = MAX_DATA_CHARS,
               frame_bytes: int | None = None, json_bound: int | None = None
               ) -> list[FlowItem]:
    """Validate a whole PUSHF graph before anything is written: all or nothing.

    Checks each job like a PUSHB item (plus the flow rules: pre-allocated ids without
    ``:``, data an object, no repeat/dedup/debounce, a failure policy only with a
    parent), then the topology: every ``parentId``, ``childrenIds`` and ``dependsOn``
    names a job of the same flow, parent and child agree on their link both ways, a
    parent depends on each of its children, and there is no cycle.

    ``frame_bytes`` and ``json_bound`` (the request's, as for a PUSHB) spare measuring
    each job's data as JSON text: data of a million small maps took over a second to
    measure, in one call.
    """
    sizes = (max_data_bytes, frame_bytes, json_bound)
    jobs = msg.get("jobs")
    if not isinstance(jobs, list):
        raise Refused("flow jobs must be an array")
    if not jobs:
        raise Refused("flow jobs must not be empty")
    if len(jobs) > MAX_FLOW_JOBS:
        raise Refused(f"flow exceeds the {MAX_FLOW_JOBS} job limit")
    items: list[FlowItem] = []
    by_id: dict[str, FlowItem] = {}
    for i, job in enumerate(jobs):
        item = _flow_item(i, job, by_id, sizes)
        items.append(item)
        by_id[item.id] = item
    _check_topology(items, by_id)
    return items


def _flow_item(i: int, job: Any, by_id: Mapping[str, FlowItem],
               sizes: tuple[int, int | None, int | None]) -> FlowItem:
    """Validate ``jobs[i]`` of a PUSHF on its own (``by_id``: the jobs before it)."""
    if not isinstance(job, dict):
        raise Refused(f"flow jobs[{i}] must be an object")
    job_id = fields.job_id(job.get("id"), "flow job id")
    if ":" in job_id:
        raise Refused(f"flow job id cannot contain a colon: {job_id}")
    if job_id in by_id:
        raise Refused(f"duplicate flow job id: {job_id}")
    try:
        queue = fields.queue_name(job.get("queue"))
    except Refused as exc:
        raise Refused(f"invalid flow queue for {job_id}: {exc.message}") from None
    fields.check_id_fits_queue(queue, job_id)
    spec = _flow_spec(job_id, job.get("input"), sizes)
    return FlowItem(job_id, queue, spec)


def _flow_spec(job_id: str, raw: Any, sizes: tuple[int, int | None, int | None]
               ) -> dict[str, Any]:
    """A flow job's input parsed as a PUSHB item, with the flow's own rules first
    (the pre-allocated id, no repeat/dedup/debounce, data an object) and after (a
    failure policy only with a parent)."""
    if not isinstance(raw, dict):
        raise Refused(f"flow job input is invalid: {job_id}")
    custom = raw.get("customId")
    if custom is not None and custom != job_id:
        raise Refused(f"custom id does not match planned id: {job_id}")
    for key, error in _FLOW_REFUSED:
        if raw.get(key) is not None:
            raise Refused(f"{job_id}: {error}")
    if not isinstance(raw.get("data"), dict):
        raise Refused(f"{job_id}: flow job data must be an object")
    try:
        spec = parse_job_input(raw, custom_id_key="customId", max_data_bytes=sizes[0],
                               frame_bytes=sizes[1], json_bound=sizes[2])
    except Refused as exc:
        raise Refused(f"{job_id}: {exc.message}") from None
    spec["custom_id"] = job_id
    # A flow's jobs are admitted by the router, across queues, without the groups'
    # depths at hand: groupMaxSize is not applied to them (docs/protocol.md).
    spec.pop("group_max_size", None)
    if any(spec.get(attr) for attr in _POLICY_ATTRS) and not spec.get("parent_id"):
        raise Refused(f"{job_id}: a flow failure policy requires a parent")
    return spec


def _check_topology(items: list[FlowItem], by_id: dict[str, FlowItem]) -> None:
    for item in items:
        spec = item.spec
        deps = spec.get("depends_on") or []
        check_dependencies(item.id, deps)
        for dep in deps:
            if dep not in by_id:
                raise Refused(f"{item.id} depends on {dep}, which is not in the flow")
        parent = spec.get("parent_id")
        if parent is not None:
            owner = by_id.get(parent)
            if owner is None:
                raise Refused(f"parent {parent} of {item.id} is not in the flow")
            if item.id not in (owner.spec.get("children_ids") or []):
                raise Refused(f"parent {parent} does not list {item.id} as a child")
        for child in spec.get("children_ids") or []:
            member = by_id.get(child)
            if member is None:
                raise Refused(f"child {child} of {item.id} is not in the flow")
            if member.spec.get("parent_id") != item.id:
                raise Refused(f"child {child} does not name {item.id} as its parent")
            if child not in deps:
                raise Refused(f"{item.id} must depend on its child {child}")
    cycle = find_cycle({item.id: item.spec.get("depends_on") or [] for item in items})
    if cycle is not None:
        raise Refused(f"flow has a dependency cycle: {' -> '.join(cycle)}")


def new_flow_job(item: FlowItem, now: int) -> JobRecord:
    """The job a validated flow item becomes: every dependency of a flow job is a job
    of the same flow, new too, so any dependency means waiting for children."""
    spec = dict(item.spec)
    delay = spec.pop("delay", 0) or 0
    timestamp = spec.pop("timestamp", None)
    created = int(timestamp) if timestamp is not None else now
    run_at = int(created + delay)
    pending = list(dict.fromkeys(spec.get("depends_on") or ()))
    if pending:
        state, shown = WAITING_CHILDREN, WAITING_CHILDREN
    else:
        state, shown = QUEUED, "delayed" if run_at > now else "waiting"
    return JobRecord(id=item.id, queue=item.queue, created_at=created, run_at=run_at,
               last_heartbeat=created, state=state, pending=pending or None,
               timeline=new_timeline(shown, now), **spec)
