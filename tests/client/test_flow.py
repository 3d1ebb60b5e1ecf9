"""FlowProducer over every mode (TCP and embedded, LMDB and memory), and its pure planner."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from trioqueue.client import (
    CommandError,
    Connection,
    FlowNode,
    FlowProducer,
    Queue,
    ValidationError,
)
from trioqueue.client.flow import MAX_DEPTH, MAX_FLOW_JOBS, plan_flow, plan_flows

pytestmark = pytest.mark.anyio


async def work(conn: Connection, queue: str, result: Any = None) -> str:
    """Pull one job of ``queue`` and complete it with ``result``; its id."""
    job = (await conn.call("PULL", queue=queue))["job"]
    assert job is not None, f"nothing to pull in {queue}"
    await conn.call("ACK", id=job["id"], result=result)
    return str(job["id"])


async def state(conn: Connection, job_id: str) -> str:
    return str((await conn.call("GetState", id=job_id))["state"])


def counter(prefix: str = "j") -> Any:
    numbers = itertools.count(1)
    return lambda: f"{prefix}{next(numbers)}"


class SpyConnection:
    """Forwards to a real connection and records every command sent."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.sent: list[str] = []

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        self.sent.append(cmd)
        return await self.conn.call(cmd, **fields)


# ---------------------------------------------------------------------------- the planner


def test_the_plan_links_both_ways_and_lists_children_first() -> None:
    plan = plan_flow({
        "name": "render", "queue_name": "videos", "data": {"v": 1}, "opts": {"priority": 3},
        "children": [
            {"name": "frame", "queue_name": "frames", "data": {"n": 1},
             "children": [{"name": "tile", "queue_name": "tiles"}]},
            {"name": "frame", "queue_name": "frames", "opts": {"job_id": "f2",
                                                                 "attempts": 1}},
        ]}, new_id=counter())
    assert plan.wire() == [
        {"id": "j3", "queue": "tiles", "input": {
            "name": "tile", "data": {"__parentId": "j2", "__parentQueue": "frames"},
            "parentId": "j2"}},
        {"id": "j2", "queue": "frames", "input": {
            "name": "frame",
            "data": {"n": 1, "__parentId": "j1", "__parentQueue": "videos",
                     "__childrenIds": ["j3"]},
            "parentId": "j1", "childrenIds": ["j3"], "dependsOn": ["j3"]}},
        {"id": "f2", "queue": "frames", "input": {
            "name": "frame", "data": {"__parentId": "j1", "__parentQueue": "videos"},
            "maxAttempts": 1, "parentId": "j1"}},
        {"id": "j1", "queue": "videos", "input": {
            "name": "render", "data": {"v": 1, "__childrenIds": ["j2", "f2"]},
            "priority": 3, "childrenIds": ["j2", "f2"], "dependsOn": ["j2", "f2"]}},
    ]
    assert plan.roots[0].id == "j1"
    assert [c.id for c in plan.roots[0].children] == ["j2", "f2"]


def test_the_planner_does_not_touch_the_callers_data() -> None:
    data = {"k": 1}
    plan_flow({"queue_name": "q", "data": data, "children": [{"queue_name": "q",
                                                              "data": data}]})
    assert data == {"k": 1}


def test_generated_ids_are_uuid4_hex() -> None:
    plan = plan_flows([{"queue_name": "q"}, {"queue_name": "q"}])
    ids = [job.id for job in plan.jobs]
    assert len(set(ids)) == 2
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)


def deep_tree(levels: int) -> dict[str, Any]:
    """A chain of ``levels`` nodes below a root."""
    tree: dict[str, Any] = {"queue_name": "deep"}
    for _ in range(levels):
        tree = {"queue_name": "deep", "children": [tree]}
    return tree


def test_depth_limit() -> None:
    assert len(plan_flow(deep_tree(MAX_DEPTH)).jobs) == MAX_DEPTH + 1
    with pytest.raises(ValidationError, match="deeper than 100 levels"):
        plan_flow(deep_tree(MAX_DEPTH + 1))


REFUSED: list[tuple[str, dict[str, Any], str]] = [
    ("colon", {"queue_name": "fr", "opts": {"job_id": "a:b"}}, "cannot contain a colon"),
    ("reserved key", {"queue_name": "fr", "data": {"__parentId": "x"}}, "reserved"),
    ("list data", {"queue_name": "fr", "data": [1, 2]}, "must be a dict"),
    ("text data", {"queue_name": "fr", "data": "hi"}, "must be a dict"),
    ("repeat", {"queue_name": "fr", "opts": {"repeat": {"every": 1000}}}, "repeat"),
    ("dedup", {"queue_name": "fr", "opts": {"deduplication": {"id": "d"}}},
     "deduplication"),
    ("unique key", {"queue_name": "fr", "opts": {"unique_key": "u"}}, "deduplication"),
    ("debounce", {"queue_name": "fr", "opts": {"debounce_id": "d"}}, "debounce"),
    ("parent_id", {"queue_name": "fr", "opts": {"parent_id": "p"}}, "parent_id"),
    ("depends_on", {"queue_name": "fr", "opts": {"depends_on": ["p"]}}, "depends_on"),
    ("children_ids", {"queue_name": "fr", "opts": {"children_ids": ["c"]}}, "children_ids"),
    ("parent", {"queue_name": "fr", "opts": {"parent": {"id": "p"}}}, "parent"),
    ("unknown option", {"queue_name": "fr", "opts": {"atempts": 3}}, "unknown job option"),
    ("unknown key", {"queueName": "fr"}, "unknown flow node key: queueName"),
    ("bad queue", {"queue_name": "f r"}, "Queue name"),
    ("no queue", {"name": "x"}, "Queue name is required"),
    ("policy on a root", {"queue_name": "fr", "opts": {"fail_parent_on_failure": True}},
     "requires a parent"),
    ("duplicate id", {"queue_name": "fr", "opts": {"job_id": "same"},
                      "children": [{"queue_name": "fr", "opts": {"job_id": "same"}}]},
     "duplicate flow job id: same"),
    ("children not a list", {"queue_name": "fr", "children": {"queue_name": "fr"}},
     "children must be a list"),
    ("a bad grandchild", {"queue_name": "fr", "opts": {"job_id": "ok-root"}, "children": [
        {"queue_name": "fr", "opts": {"job_id": "ok-kid"},
         "children": [{"queue_name": "fr", "data": 5}]}]},
     r"flow\.children\[0\]\.children\[0\]: flow job data must be a dict"),
    ("too deep", deep_tree(MAX_DEPTH + 1), "deeper than"),
    ("too many", {"queue_name": "fr",
                  "children": [{"queue_name": "fr"}] * MAX_FLOW_JOBS},
     "exceeds the 10000 job limit"),
]


@pytest.mark.parametrize(("case", "tree", "error"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_planner_refuses(case: str, tree: dict[str, Any], error: str) -> None:
    with pytest.raises(ValidationError, match=error):
        plan_flow(tree)


# ---------------------------------------------------------------------------- over the wire


async def test_a_tree_across_two_queues_is_admitted_at_once(conn: Connection) -> None:
    flow = FlowProducer(conn)
    node = await flow.add({
        "name": "report", "queue_name": "fl-parents", "data": {"month": 7},
        "opts": {"job_id": "rep-7"},
        "children": [
            {"name": "sum", "queue_name": "fl-kids", "data": {"part": 1}},
            {"name": "sum", "queue_name": "fl-kids", "data": {"part": 2},
             "opts": {"job_id": "part-2"}},
        ]})
    assert isinstance(node, FlowNode)
    parent, kids = node.job, [child.job for child in node.children]
    assert parent.id == "rep-7" and parent.queue_name == "fl-parents"
    assert parent.state == "waiting-children"
    assert [k.state for k in kids] == ["waiting", "waiting"]
    assert kids[1].id == "part-2" and [c.children for c in node.children] == [[], []]
    assert parent.children_ids == [k.id for k in kids] == parent.depends_on
    assert all(k.parent_id == "rep-7" and k.queue_name == "fl-kids" for k in kids)
    assert parent.data == {"month": 7, "__childrenIds": [k.id for k in kids]}
    assert kids[0].data == {"part": 1, "__parentId": "rep-7", "__parentQueue": "fl-parents"}
    # What the broker stored, read back independently of the reply.
    assert await state(conn, "rep-7") == "waiting-children"
    assert (await conn.call("PULL", queue="fl-parents"))["job"] is None
    assert (await Queue("fl-kids", conn).get_job_counts())["waiting"] == 2

    first = await work(conn, "fl-kids", {"total": 10})
    assert first == kids[0].id  # siblings keep their order
    assert await parent.get_state() == "waiting-children"
    await work(conn, "fl-kids", {"total": 32})
    assert await parent.get_state() == "waiting"
    assert await parent.get_children_values() == {
        f"fl-kids:{kids[0].id}": {"total": 10}, "fl-kids:part-2": {"total": 32}}
    assert await work(conn, "fl-parents", "done") == "rep-7"


async def test_a_deeper_tree_runs_children_before_parents(conn: Connection) -> None:
    flow = FlowProducer(conn)
    node = await flow.add({"queue_name": "fl-deep", "opts": {"job_id": "top"}, "children": [
        {"queue_name": "fl-deep", "opts": {"job_id": "mid"}, "children": [
            {"queue_name": "fl-deep", "opts": {"job_id": "leaf"}}]}]})
    assert [n.job.id for n in node.walk()] == ["top", "mid", "leaf"]
    assert [n.job.state for n in node.walk()] == ["waiting-children"] * 2 + ["waiting"]
    assert await work(conn, "fl-deep", 1) == "leaf"
    assert await work(conn, "fl-deep", 2) == "mid"
    assert await work(conn, "fl-deep", 3) == "top"
    assert await node.job.get_children_values() == {"fl-deep:mid": 2}


async def test_a_child_failure_policy_reaches_the_broker(conn: Connection) -> None:
    node = await FlowProducer(conn).add({"queue_name": "fl-pol", "opts": {"job_id": "pp"},
                                         "children": [{"queue_name": "fl-pol-k", "opts": {
                                             "job_id": "kk", "attempts": 1,
                                             "fail_parent_on_failure": True}}]})
    job = (await conn.call("PULL", queue="fl-pol-k"))["job"]
    assert job["id"] == "kk"
    await conn.call("FAIL", id="kk", error="boom")
    assert await node.job.get_state() == "failed"


async def test_add_bulk_is_one_pushf_for_every_tree(conn: Connection) -> None:
    spy = SpyConnection(conn)
    flow = FlowProducer(spy)  # type: ignore[arg-type]
    nodes = await flow.add_bulk([
        {"queue_name": "fl-b1", "children": [{"queue_name": "fl-b2"}]},
        {"queue_name": "fl-b2", "opts": {"job_id": "solo"}},
    ])
    assert spy.sent == ["PUSHF"]
    assert [n.job.state for n in nodes] == ["waiting-children", "waiting"]
    assert nodes[1].job.id == "solo" and len(nodes[0].children) == 1
    assert await flow.add_bulk([]) == [] and spy.sent == ["PUSHF"]
    # One bad tree refuses them all, before anything is sent.
    with pytest.raises(ValidationError, match=r"flows\[1\]"):
        await flow.add_bulk([{"queue_name": "fl-b3", "opts": {"job_id": "b-ok"}},
                             {"queue_name": "fl-b3", "data": {"__x": 1}}])
    assert spy.sent == ["PUSHF"]
    assert await state(conn, "b-ok") == "unknown"


async def test_refusals_send_nothing_and_create_nothing(conn: Connection) -> None:
    spy = SpyConnection(conn)
    flow = FlowProducer(spy)  # type: ignore[arg-type]
    for case, tree, error in REFUSED:
        with pytest.raises(ValidationError, match=error):
            await flow.add(tree)
        assert spy.sent == [], f"{case}: a refusal reached the broker"
    for queue in ("fr", "deep"):
        counts = await Queue(queue, conn).get_job_counts()
        assert sum(counts.values()) == 0, (queue, counts)
    assert await state(conn, "ok-root") == "unknown"
    assert await state(conn, "ok-kid") == "unknown"


async def test_an_id_collision_leaves_nothing_written(conn: Connection) -> None:
    await Queue("fl-x", conn).add("n", {}, job_id="taken")
    flow = FlowProducer(conn)
    with pytest.raises(CommandError, match="Job taken already exists"):
        await flow.add({"queue_name": "fl-x", "opts": {"job_id": "px"}, "children": [
            {"queue_name": "fl-y", "opts": {"job_id": "fresh"}},
            {"queue_name": "fl-x", "opts": {"job_id": "taken"}}]})
    assert await state(conn, "px") == "unknown" and await state(conn, "fresh") == "unknown"
    assert (await Queue("fl-y", conn).get_job_counts())["waiting"] == 0
    assert await Queue("fl-x", conn).count() == 1  # only the job that was there


async def test_retrying_an_admitted_flow_is_refused_and_readable(conn: Connection) -> None:
    flow = FlowProducer(conn)
    tree = {"queue_name": "fl-r", "opts": {"job_id": "once"},
            "children": [{"queue_name": "fl-r", "opts": {"job_id": "once-k"}}]}
    await flow.add(tree)
    with pytest.raises(CommandError, match="already exists"):
        await flow.add(tree)  # e.g. after a ConnectionLost: the first one went through
    again = await flow.get_flow("once")
    assert again is not None and [n.job.id for n in again.walk()] == ["once", "once-k"]
    assert await Queue("fl-r", conn).get_job_counts() == {
        **{k: 0 for k in ("prioritized", "delayed", "active", "completed", "failed",
                          "paused")},
        "waiting": 1, "waiting-children": 1}


async def test_get_flow_reads_the_tree_as_it_is_now(conn: Connection) -> None:
    flow = FlowProducer(conn)
    await flow.add({"queue_name": "fl-g", "opts": {"job_id": "g"}, "children": [
        {"queue_name": "fl-g1", "opts": {"job_id": "g1"}, "children": [
            {"queue_name": "fl-g2", "opts": {"job_id": "g11"}},
            {"queue_name": "fl-g2", "opts": {"job_id": "g12"}}]},
        {"queue_name": "fl-g1", "opts": {"job_id": "g2"}}]})
    await work(conn, "fl-g2", "r11")
    tree = await flow.get_flow("g")
    assert tree is not None

    def shape(node: FlowNode) -> Any:
        return (node.job.id, node.job.state, [shape(c) for c in node.children])

    assert shape(tree) == ("g", "waiting-children", [
        ("g1", "waiting-children", [("g11", "completed", []), ("g12", "waiting", [])]),
        ("g2", "waiting", [])])
    assert tree.children[0].job.queue_name == "fl-g1"
    assert tree.children[0].job.queue.name == "fl-g1"
    top = await flow.get_flow("g", depth=0)
    assert top is not None and top.children == []
    one = await flow.get_flow("g", depth=1)
    assert one is not None and [shape(c) for c in one.children] == [
        ("g1", "waiting-children", []), ("g2", "waiting", [])]
    few = await flow.get_flow("g", max_children=1)
    assert few is not None and shape(few) == ("g", "waiting-children", [
        ("g1", "waiting-children", [("g11", "completed", [])])])
    sub = await flow.get_flow("g1")
    assert sub is not None and [c.job.id for c in sub.children] == ["g11", "g12"]
    await Queue("fl-g2", conn).remove("g12")  # a child that is gone is skipped
    pruned = await flow.get_flow("g")
    assert pruned is not None and [c.job.id for c in pruned.children[0].children] == ["g11"]
    assert await flow.get_flow("nobody") is None


async def test_add_chain_runs_steps_in_order(conn: Connection) -> None:
    flow = FlowProducer(conn)
    steps = await flow.add_chain([
        {"name": "fetch", "queue_name": "fl-c1", "data": {"url": "u"}},
        {"name": "parse", "queue_name": "fl-c2"},
        {"name": "store", "queue_name": "fl-c1", "opts": {"job_id": "store-1"}},
    ])
    assert [s.state for s in steps] == ["waiting", "waiting-children", "waiting-children"]
    assert steps[1].depends_on == [steps[0].id] and steps[2].depends_on == [steps[1].id]
    assert steps[1].data == {"__flowParentId": steps[0].id}
    assert steps[0].data == {"url": "u"} and steps[2].id == "store-1"
    assert await work(conn, "fl-c1", "html") == steps[0].id
    assert (await conn.call("PULL", queue="fl-c1"))["job"] is None  # store still waits
    assert await work(conn, "fl-c2", {"rows": 3}) == steps[1].id
    assert await steps[2].get_children_values() == {f"fl-c2:{steps[1].id}": {"rows": 3}}
    assert await work(conn, "fl-c1") == "store-1"
    assert await flow.add_chain([]) == []


async def test_add_bulk_then_fans_in(conn: Connection) -> None:
    flow = FlowProducer(conn)
    parallel, final = await flow.add_bulk_then(
        [{"name": "part", "queue_name": "fl-p", "data": {"i": i}} for i in range(3)],
        {"name": "merge", "queue_name": "fl-m", "opts": {"job_id": "merge-1"}})
    ids = [job.id for job in parallel]
    assert final.id == "merge-1" and final.state == "waiting-children"
    assert final.depends_on == ids and final.data == {"__flowParentIds": ids}
    for i in range(3):
        await work(conn, "fl-p", i * 10)
    assert await final.get_state() == "waiting"
    assert await final.get_children_values() == {
        f"fl-p:{job_id}": i * 10 for i, job_id in enumerate(ids)}
    with pytest.raises(ValidationError, match="at least one parallel job"):
        await flow.add_bulk_then([], {"queue_name": "fl-m"})
    with pytest.raises(ValidationError, match="cannot have children"):
        await flow.add_bulk_then([{"queue_name": "fl-p", "children": [
            {"queue_name": "fl-p"}]}], {"queue_name": "fl-m"})
