"""FlowProducer: trees of jobs across queues, admitted all or nothing in one ``PUSHF``.

A flow is BullMQ's tree: a parent job that waits (``waiting-children``) until every
child has completed, children that may have children of their own, in any queues::

    flow = FlowProducer(conn)
    node = await flow.add({
        "name": "render", "queue_name": "videos", "data": {"id": 7},
        "children": [
            {"name": "frame", "queue_name": "frames", "data": {"n": 1}},
            {"name": "frame", "queue_name": "frames", "data": {"n": 2}},
        ],
    })
    ...  # workers process the frames; then the parent becomes ready and
    values = await node.job.get_children_values()  # {"frames:<id>": result, ...}

How it is done, and why:

- **Planned locally, by pure functions** (:func:`plan_flow`, :func:`plan_flows`,
  :func:`plan_chain`, :func:`plan_bulk_then`; no I/O). Every id is chosen here (uuid4
  hex, or the node's ``opts["job_id"]``), so the whole graph - each parent's
  ``childrenIds``/``dependsOn``, each child's ``parentId``, the reserved data keys
  ``__childrenIds``, ``__parentId``, ``__parentQueue`` - is known before anything is
  sent, and everything the broker would refuse that can be seen here is refused here,
  with :class:`~trioqueue.client.errors.ValidationError`, before anything is sent.
- **One command**: the plan goes out as ONE ``PUSHF``, which the broker validates again
  and writes in one commit, or not at all. There is never a half-written tree to clean
  up, so the client has no compensation logic. Jobs are listed children first (a
  post-order walk), which keeps siblings of one queue in the order they were given.
- **An ambiguous outcome**: if the connection breaks after ``PUSHF`` was sent
  (:class:`~trioqueue.client.errors.ConnectionLost`), the flow may or may not have
  been admitted. Give the nodes ``job_id``s to retry safely: a retry of an admitted
  flow is refused with ``Job <id> already exists`` (a
  :class:`~trioqueue.client.errors.CommandError`), which tells that the first attempt
  went through; :meth:`FlowProducer.get_flow` then reads it back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio

from ..core import fields
from ..core.errors import Refused
from .errors import CommandError, JobNotFound, TrioqueueError, ValidationError
from .job import Job
from .options import job_options
from .queue import Queue

if TYPE_CHECKING:
    from .connection import Connection

MAX_DEPTH = 100
"""Levels below the root a tree may have (bunqueue's limit)."""

MAX_FLOW_JOBS = 10_000
"""Jobs one ``PUSHF`` may carry (the broker's limit: one commit, one reply frame)."""

NODE_KEYS = frozenset({"name", "queue_name", "data", "opts", "children"})

# Options the broker refuses inside an atomic flow, and those the planner owns (the
# topology): giving them is a mistake the caller should hear about, not a silent drop.
_REFUSED_OPTIONS: dict[str, str] = {
    "repeat": "repeat is not supported inside an atomic flow",
    "deduplication": "deduplication is not supported inside an atomic flow",
    "unique_key": "deduplication is not supported inside an atomic flow",
    "debounce_id": "debounce is not supported inside an atomic flow",
    "debounce_ttl": "debounce is not supported inside an atomic flow",
    "parent": "a flow's topology is planned by the FlowProducer: parent is not an option",
    "parent_id": "a flow's topology is planned by the FlowProducer: parent_id is not an "
                 "option",
    "depends_on": "a flow's topology is planned by the FlowProducer: depends_on is not an "
                  "option",
    "children_ids": "a flow's topology is planned by the FlowProducer: children_ids is "
                    "not an option",
}
_POLICY_OPTIONS = ("fail_parent_on_failure", "continue_parent_on_failure",
                   "ignore_dependency_on_failure", "remove_dependency_on_failure")
_GET_FLOW_CONCURRENCY = 64


def new_job_id() -> str:
    """A fresh id for a flow job: uuid4 hex (32 characters, no ``:``)."""
    return uuid.uuid4().hex


# ---------------------------------------------------------------------------- results


J = TypeVar("J")  # the job type: Job here, trioqueue.sync's SyncJob there


@dataclass(slots=True)
class FlowNode(Generic[J]):
    """One job of a flow and its children, as admitted (``job.state`` is set)."""

    job: J
    children: list[FlowNode[J]] = field(default_factory=list)

    def walk(self) -> Iterable[FlowNode[J]]:
        """This node and every node below it, parents before their children."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))


# ---------------------------------------------------------------------------- the planner


@dataclass(frozen=True, slots=True)
class PlannedJob:
    """One ``PUSHF`` item: ``{"id", "queue", "input"}`` on the wire."""

    id: str
    queue: str
    input: dict[str, Any]

    def wire(self) -> dict[str, Any]:
        return {"id": self.id, "queue": self.queue, "input": self.input}


@dataclass(slots=True)
class PlanNode:
    """The shape of a planned tree, by id: what the reply is put back into."""

    id: str
    children: list[PlanNode] = field(default_factory=list)


@dataclass(slots=True)
class FlowPlan:
    """A whole ``PUSHF``: ``jobs`` in sending order (every child before its parent),
    ``roots`` the planned trees (one per tree given)."""

    jobs: list[PlannedJob]
    roots: list[PlanNode]

    def wire(self) -> list[dict[str, Any]]:
        return [job.wire() for job in self.jobs]


class _Planner:
    """Plans jobs into one ``PUSHF``: ids unique across it, at most MAX_FLOW_JOBS."""

    def __init__(self, new_id: Callable[[], str]) -> None:
        self.new_id = new_id
        self.jobs: list[PlannedJob] = []
        self.ids: set[str] = set()
        self.count = 0

    def tree(self, node: Any, depth: int, parent: tuple[str, str] | None, where: str
             ) -> PlanNode:
        """Plan ``node`` and its subtree; ``parent`` is (id, queue) for a child.

        Recursive, but only to MAX_DEPTH + 1 frames: a deeper tree is refused when the
        walk reaches level MAX_DEPTH + 1, before it goes any further.
        """
        if depth > MAX_DEPTH:
            raise ValidationError(f"{where}: flow is deeper than {MAX_DEPTH} levels")
        node = _node_mapping(node, where)
        children = node.get("children")
        if children is None:
            children = []
        elif not isinstance(children, (list, tuple)):
            raise ValidationError(f"{where}: children must be a list")
        job_id, queue, name, data, opts = self.job_fields(node, where)
        if parent is None and any(opts.get(p) for p in _POLICY_OPTIONS):
            raise ValidationError(f"{where}: a flow failure policy requires a parent")
        planned = PlanNode(job_id)
        for i, child in enumerate(children):
            planned.children.append(
                self.tree(child, depth + 1, (job_id, queue), f"{where}.children[{i}]"))
        child_ids = [c.id for c in planned.children]
        links: dict[str, Any] = {}
        if parent is not None:
            data["__parentId"], data["__parentQueue"] = parent
            links["parentId"] = parent[0]
        if child_ids:
            data["__childrenIds"] = list(child_ids)
            links["childrenIds"] = list(child_ids)
            links["dependsOn"] = list(child_ids)
        self.append(job_id, queue, name, data, opts, links)
        return planned

    def job_fields(self, node: Mapping[str, Any], where: str
                   ) -> tuple[str, str, str, dict[str, Any], dict[str, Any]]:
        """A node's id, queue, name, data (a fresh dict) and options (without job_id),
        each checked."""
        queue = node.get("queue_name")
        try:
            queue = fields.queue_name(queue)
        except Refused as exc:
            raise ValidationError(f"{where}: {exc.message}") from None
        name = node.get("name", "default")
        if not isinstance(name, str) or not name:
            raise ValidationError(f"{where}: name must be a non-empty string")
        data = node.get("data")
        if data is None:
            data = {}
        elif not isinstance(data, Mapping):
            raise ValidationError(f"{where}: flow job data must be a dict (a map), "
                                  f"not {type(data).__name__}")
        for key in data:
            if isinstance(key, str) and key.startswith("__"):
                raise ValidationError(f"{where}: data key {key!r} is reserved (keys "
                                      f"starting with '__' belong to flows)")
        opts = node.get("opts")
        if opts is None:
            opts = {}
        elif not isinstance(opts, Mapping):
            raise ValidationError(f"{where}: opts must be a dict")
        opts = dict(opts)
        for key, error in _REFUSED_OPTIONS.items():
            if opts.get(key) is not None:
                raise ValidationError(f"{where}: {error}")
        job_id = opts.pop("job_id", None)
        job_id = self.new_id() if job_id is None else job_id
        self.claim(job_id, queue, where)
        return job_id, queue, name, dict(data), opts

    def claim(self, job_id: Any, queue: str, where: str) -> None:
        if not isinstance(job_id, str) or not job_id:
            raise ValidationError(f"{where}: job_id must be a non-empty string")
        if ":" in job_id:
            raise ValidationError(f"{where}: flow job id cannot contain a colon: {job_id}")
        try:
            fields.check_job_id_length(job_id)
            fields.check_id_fits_queue(queue, job_id)
        except Refused as exc:
            raise ValidationError(f"{where}: {exc.message}") from None
        if job_id in self.ids:
            raise ValidationError(f"{where}: duplicate flow job id: {job_id}")
        self.count += 1
        if self.count > MAX_FLOW_JOBS:
            raise ValidationError(f"flow exceeds the {MAX_FLOW_JOBS} job limit")
        self.ids.add(job_id)

    def append(self, job_id: str, queue: str, name: str, data: dict[str, Any],
               opts: Mapping[str, Any], links: Mapping[str, Any]) -> None:
        wire = job_options(opts, custom_id_key="customId")  # refuses unknown options
        self.jobs.append(PlannedJob(job_id, queue,
                                    {"name": name, "data": data, **wire, **links}))

    def step(self, node: Any, where: str, *, depends_on: Sequence[str] = (),
             data_links: Mapping[str, Any] | None = None) -> str:
        """Plan one job of a chain or fan-in: no children, no parent."""
        node = _node_mapping(node, where)
        if node.get("children"):
            raise ValidationError(f"{where}: a chain or fan-in step cannot have children "
                                  "(use add for trees)")
        job_id, queue, name, data, opts = self.job_fields(node, where)
        if any(opts.get(p) for p in _POLICY_OPTIONS):
            raise ValidationError(f"{where}: a flow failure policy requires a parent")
        data.update(data_links or {})
        links = {"dependsOn": list(depends_on)} if depends_on else {}
        self.append(job_id, queue, name, data, opts, links)
        return job_id


def _node_mapping(node: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(node, Mapping):
        raise ValidationError(f"{where}: a flow node must be a dict")
    unknown = set(node) - NODE_KEYS
    if unknown:
        raise ValidationError(f"{where}: unknown flow node key: {sorted(map(str, unknown))[0]}"
                              f" (known: {', '.join(sorted(NODE_KEYS))})")
    return node


def plan_flows(trees: Iterable[Mapping[str, Any]], *,
               new_id: Callable[[], str] = new_job_id) -> FlowPlan:
    """Plan several trees into one ``PUSHF`` (pure: no I/O, ids from ``new_id``).

    Raises :class:`ValidationError` for anything the broker would refuse that can be
    seen here: a node that is not a dict or has an unknown key, a bad queue name, an
    id with ``:`` or given twice, data that is not a dict (None is ``{}``) or that
    uses a key starting with ``__``, an option refused inside flows (repeat,
    deduplication, debounce) or owned by the planner (parent, parent_id, depends_on,
    children_ids), an unknown option, a failure policy on a root, a tree deeper than
    MAX_DEPTH levels below its root, more than MAX_FLOW_JOBS jobs in all.
    """
    planner = _Planner(new_id)
    roots = [planner.tree(tree, 0, None, f"flows[{i}]") for i, tree in enumerate(trees)]
    return FlowPlan(planner.jobs, roots)


def plan_flow(tree: Mapping[str, Any], *,
              new_id: Callable[[], str] = new_job_id) -> FlowPlan:
    """Plan one tree (see :func:`plan_flows`)."""
    planner = _Planner(new_id)
    return FlowPlan(planner.jobs, [planner.tree(tree, 0, None, "flow")])


def plan_chain(steps: Iterable[Mapping[str, Any]], *,
               new_id: Callable[[], str] = new_job_id) -> FlowPlan:
    """Plan a chain: each step depends on the one before it (``dependsOn``) and its
    data carries that step's id as ``__flowParentId``. ``roots`` are the steps, in order,
    without children."""
    planner = _Planner(new_id)
    roots: list[PlanNode] = []
    for i, step in enumerate(steps):
        previous = roots[-1].id if roots else None
        roots.append(PlanNode(planner.step(
            step, f"steps[{i}]", depends_on=[previous] if previous else [],
            data_links={"__flowParentId": previous} if previous else None)))
    return FlowPlan(planner.jobs, roots)


def plan_bulk_then(parallel: Iterable[Mapping[str, Any]], final: Mapping[str, Any], *,
                   new_id: Callable[[], str] = new_job_id) -> FlowPlan:
    """Plan a fan-in: the ``parallel`` jobs run independently, ``final`` depends on all
    of them and its data carries their ids as ``__flowParentIds``. ``roots`` are the
    parallel jobs, then the final one."""
    planner = _Planner(new_id)
    roots = [PlanNode(planner.step(step, f"parallel[{i}]"))
             for i, step in enumerate(parallel)]
    if not roots:
        raise ValidationError("add_bulk_then needs at least one parallel job")
    ids = [node.id for node in roots]
    roots.append(PlanNode(planner.step(final, "final", depends_on=ids,
                                       data_links={"__flowParentIds": list(ids)})))
    return FlowPlan(planner.jobs, roots)


# ---------------------------------------------------------------------------- the producer


class FlowProducer:
    """Adds flows (trees, chains, fan-ins) on a :class:`Connection`, and reads them back.

    Holds no resources of its own: everything goes through the connection, so there is
    nothing to close.
    """

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self._queues: dict[str, Queue] = {}

    def queue(self, name: str) -> Queue:
        """The :class:`Queue` the flow's jobs of ``name`` are bound to."""
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = Queue(name, self.connection)
        return queue

    async def add(self, tree: Mapping[str, Any]) -> FlowNode[Job]:
        """Add one tree ``{"name", "queue_name", "data", "opts", "children"}`` (options
        in Python names, as :meth:`Queue.add` takes them); its :class:`FlowNode`s as
        admitted. Leaves are ready at once; every parent waits for its children."""
        plan = plan_flow(tree)
        return (await self._push(plan))[0]

    async def add_bulk(self, trees: Iterable[Mapping[str, Any]]) -> list[FlowNode[Job]]:
        """Add several trees in ONE ``PUSHF``: all of them, or none."""
        plan = plan_flows(trees)
        if not plan.jobs:
            return []
        return await self._push(plan)

    async def add_chain(self, steps: Iterable[Mapping[str, Any]]) -> list[Job]:
        """Add jobs that run one after the other (each waits for the previous one to
        complete; its result is in ``get_children_values``), in one ``PUSHF``. Steps are
        nodes without children. Returns the jobs in step order."""
        plan = plan_chain(steps)
        if not plan.jobs:
            return []
        return [node.job for node in await self._push(plan)]

    async def add_bulk_then(self, parallel: Iterable[Mapping[str, Any]],
                            final: Mapping[str, Any]) -> tuple[list[Job], Job]:
        """Add ``parallel`` jobs and a ``final`` one that waits for all of them, in one
        ``PUSHF``. Returns ``(parallel_jobs, final_job)``."""
        nodes = await self._push(plan_bulk_then(parallel, final))
        return [node.job for node in nodes[:-1]], nodes[-1].job

    async def _push(self, plan: FlowPlan) -> list[FlowNode[Job]]:
        reply = await self.connection.call("PUSHF", jobs=plan.wire())
        snapshots = reply.get("data", {}).get("jobs")
        # The broker answers in input order; anything else means the reply and the plan
        # disagree, and no tree built from it could be trusted.
        if not isinstance(snapshots, list) or [s.get("id") for s in snapshots] != [
                job.id for job in plan.jobs]:
            raise CommandError("PUSHF reply does not match the planned jobs", "PUSHF")
        by_id = {s["id"]: s for s in snapshots}
        return [self._build(root, by_id) for root in plan.roots]

    def _build(self, planned: PlanNode, by_id: Mapping[str, dict[str, Any]]) -> FlowNode[Job]:
        raw = by_id[planned.id]
        return FlowNode(self._job(raw), [self._build(c, by_id) for c in planned.children])

    def _job(self, raw: dict[str, Any]) -> Job:
        return Job(self.queue(str(raw["queue"])), raw)

    # ------------------------------------------------------------------ reading back

    async def get_flow(self, job_id: str, depth: int | None = None,
                       max_children: int | None = None) -> FlowNode[Job] | None:
        """The tree under ``job_id`` as it is now (each job with its current state);
        None when that job does not exist.

        ``depth`` limits the levels read below it (BullMQ's meaning: 0 is the job alone,
        1 adds its children; None: all), ``max_children`` the children read per job.
        Children that no longer exist are skipped. Each level is read with concurrent
        ``GetJob``s (at most 64 at a time).
        """
        if depth is not None and depth < 0:
            raise ValidationError("depth must be at least 0")
        if max_children is not None and max_children < 0:
            raise ValidationError("max_children must be at least 0")
        raw = (await self._get_jobs([job_id])).get(job_id)
        if raw is None:
            return None
        root = FlowNode(self._job(raw))
        seen = {root.job.id}
        level = [root]
        remaining = depth
        while level and (remaining is None or remaining > 0):
            wanted: list[tuple[FlowNode[Job], list[str]]] = []
            for node in level:
                ids = node.job.children_ids
                if max_children is not None:
                    ids = ids[:max_children]
                fresh = [i for i in dict.fromkeys(ids) if i not in seen]
                seen.update(fresh)
                wanted.append((node, fresh))
            found = await self._get_jobs([i for _, ids in wanted for i in ids])
            level = []
            for node, ids in wanted:
                for child_id in ids:
                    child_raw = found.get(child_id)
                    if child_raw is not None:
                        child = FlowNode(self._job(child_raw))
                        node.children.append(child)
                        level.append(child)
            if remaining is not None:
                remaining -= 1
        return root

    async def _get_jobs(self, ids: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``GetJob`` for each id, concurrently; ids not found are left out.

        The first other failure (a lost connection, say) cancels the rest and is raised
        as itself, not inside an exception group, so callers see the client's typed
        errors whatever the number of ids.
        """
        found: dict[str, dict[str, Any]] = {}
        errors: list[TrioqueueError] = []
        limiter = anyio.CapacityLimiter(_GET_FLOW_CONCURRENCY)

        async def get(job_id: str, cancel_scope: anyio.CancelScope) -> None:
            async with limiter:
                try:
                    reply = await self.connection.call("GetJob", id=job_id)
                except JobNotFound:
                    return
                except TrioqueueError as exc:
                    errors.append(exc)
                    cancel_scope.cancel()
                    return
            found[job_id] = reply["job"]

        async with anyio.create_task_group() as nursery:
            for job_id in ids:
                nursery.start_soon(get, job_id, nursery.cancel_scope)
        if errors:
            raise errors[0]
        return found
