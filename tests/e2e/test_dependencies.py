"""Dependencies and flows over TCP: dependsOn, PUSHF, the four child-failure policies,
the dependency queries, UpdateParent, MoveToWaitingChildren and child removal."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trioqueue.testing import RawClient

# on both stores (the representative PostgreSQL run in CI; tests/conftest.py)
pytestmark = pytest.mark.engines("lmdb", "postgres")


async def state(client: RawClient, job_id: str) -> str:
    return str((await client.ok("GetState", id=job_id))["state"])


async def work(client: RawClient, queue: str, result: Any = None, *, fail: str | None = None
               ) -> str:
    """Pull one job of ``queue`` and ACK it with ``result`` (or FAIL it with ``fail``)."""
    job = (await client.ok("PULL", queue=queue))["job"]
    assert job is not None, f"nothing to pull in {queue}"
    if fail is not None:
        await client.ok("FAIL", id=job["id"], error=fail)
    else:
        await client.ok("ACK", id=job["id"], result=result)
    return str(job["id"])


def tree(parent: str, children: dict[str, str], *, parent_queue: str = "fa",
         policy: str | None = None, **parent_opts: Any) -> list[dict[str, Any]]:
    """A PUSHF job list: ``parent`` in ``parent_queue`` waiting for ``children``
    (id -> queue), linked both ways as bunqueue's FlowProducer plans it."""
    ids = list(children)
    jobs = [{"id": parent, "queue": parent_queue, "input": {
        "name": "parent", "data": {"__childrenIds": ids}, "childrenIds": ids,
        "dependsOn": ids, **parent_opts}}]
    for child, queue in children.items():
        child_input: dict[str, Any] = {
            "name": "child", "data": {"__parentId": parent, "__parentQueue": parent_queue},
            "parentId": parent, "maxAttempts": 1}
        if policy is not None:
            child_input[policy] = True
        jobs.append({"id": child, "queue": queue, "input": child_input})
    return jobs


async def test_depends_on_waits_for_a_job_in_another_queue(client: RawClient) -> None:
    dep = (await client.ok("PUSH", queue="dq1", name="n", data=1))["id"]
    job = (await client.ok("PUSH", queue="dq2", name="n", data=2, dependsOn=[dep]))["id"]
    assert await state(client, job) == "waiting-children"
    counts = (await client.ok("GetJobCounts", queue="dq2"))["counts"]
    assert counts["waiting-children"] == 1 and counts["waiting"] == 0
    assert (await client.ok("PULL", queue="dq2"))["job"] is None
    await work(client, "dq1", {"sum": 3})
    assert await state(client, job) == "waiting"
    values = (await client.ok("GetChildrenValues", id=job))["data"]["values"]
    assert values == {f"dq1:{dep}": {"sum": 3}}
    assert (await client.ok("PULL", queue="dq2"))["job"]["id"] == job


async def test_a_completed_dependency_is_satisfied_at_once(client: RawClient) -> None:
    dep = (await client.ok("PUSH", queue="dc", name="n", data=1))["id"]
    await work(client, "dc", "done")
    job = (await client.ok("PUSH", queue="dc", name="n", data=2, dependsOn=[dep]))["id"]
    assert await state(client, job) == "waiting"
    values = (await client.ok("GetChildrenValues", id=job))["data"]["values"]
    assert values == {f"dc:{dep}": "done"}


async def test_unknown_and_self_dependencies_are_refused(client: RawClient) -> None:
    reply = await client.call("PUSH", queue="du", name="n", data=1, dependsOn=["ghost"])
    assert reply["error"] == "Dependency job not found: ghost"
    reply = await client.call("PUSH", queue="du", name="n", data=1, jobId="me",
                              dependsOn=["me"])
    assert reply["error"] == "Job cannot depend on itself: me"
    reply = await client.call("PUSHB", queue="du", jobs=[
        {"name": "a", "data": 1},
        {"name": "b", "data": 2, "dependsOn": ["ghost"]}])
    assert reply["error"] == "jobs[1]: Dependency job not found: ghost"
    assert (await client.ok("Count", queue="du"))["count"] == 0  # nothing admitted


async def test_pushb_may_depend_on_later_custom_ids_of_the_batch(client: RawClient) -> None:
    ids = (await client.ok("PUSHB", queue="db", jobs=[
        {"name": "last", "data": 0, "customId": "c", "dependsOn": ["a", "b"]},
        {"name": "first", "data": 1, "customId": "a"},
        {"name": "second", "data": 2, "customId": "b", "dependsOn": ["a"]},
    ]))["ids"]
    assert ids == ["c", "a", "b"]
    assert [await state(client, i) for i in ids] == [
        "waiting-children", "waiting", "waiting-children"]
    assert await work(client, "db", 1) == "a"
    assert await state(client, "b") == "waiting" and await state(client, "c") == (
        "waiting-children")
    assert await work(client, "db", 2) == "b"
    assert await state(client, "c") == "waiting"
    values = (await client.ok("GetChildrenValues", id="c"))["data"]["values"]
    assert values == {"db:a": 1, "db:b": 2}
    cycle = await client.call("PUSHB", queue="db", jobs=[
        {"name": "x", "data": 0, "customId": "x", "dependsOn": ["y"]},
        {"name": "y", "data": 0, "customId": "y", "dependsOn": ["x"]}])
    assert cycle["error"].startswith("Dependency cycle: ")


async def test_pushf_admits_a_tree_across_queues(client: RawClient) -> None:
    reply = await client.ok("PUSHF", jobs=tree("p1", {"k1": "fb", "k2": "fc"}))
    snapshots = reply["data"]["jobs"]
    assert [(j["id"], j["queue"], j["state"]) for j in snapshots] == [
        ("p1", "fa", "waiting-children"), ("k1", "fb", "waiting"), ("k2", "fc", "waiting")]
    assert snapshots[1]["parentId"] == "p1" and snapshots[0]["childrenIds"] == ["k1", "k2"]
    deps = (await client.ok("GetDependencies", id="p1"))["data"]
    assert deps == {"processed": {}, "unprocessed": ["fb:k1", "fc:k2"], "failed": {},
                    "ignored": {}}
    await work(client, "fb", "one")
    assert await state(client, "p1") == "waiting-children"
    counts = (await client.ok("GetDependenciesCount", id="p1"))["data"]
    assert counts == {"processed": 1, "unprocessed": 1, "failed": 0, "ignored": 0}
    await work(client, "fc", "two")
    assert await state(client, "p1") == "waiting"
    page = (await client.ok("GetDependencies", id="p1", type="processed", start=1, end=1))
    assert page["data"] == {"processed": {"fc:k2": "two"}, "count": 2}
    parent = (await client.ok("PULL", queue="fa"))["job"]
    assert parent["id"] == "p1"
    values = (await client.ok("GetChildrenValues", id="p1"))["data"]["values"]
    assert values == {"fb:k1": "one", "fc:k2": "two"}


async def test_pushf_is_all_or_nothing(client: RawClient) -> None:
    await client.ok("PUSH", queue="fx", name="n", data=1, jobId="taken")
    reply = await client.call("PUSHF", jobs=tree("px", {"taken": "fx", "fresh": "fy"},
                                                 parent_queue="fx"))
    assert reply["error"] == "Job taken already exists"
    for job_id in ("px", "fresh"):
        assert await state(client, job_id) == "unknown"
    bad = tree("py", {"ky": "fy"})
    bad[1]["input"]["parentId"] = "someone-else"
    reply = await client.call("PUSHF", jobs=bad)
    assert reply["error"] == "child ky does not name py as its parent"
    assert await state(client, "py") == "unknown"
    reply = await client.call("PUSHF", jobs=[{"id": "a:b", "queue": "fy", "input": {
        "name": "n", "data": {}}}])
    assert reply["error"] == "flow job id cannot contain a colon: a:b"


async def test_fail_parent_on_failure_buries_the_parent(client: RawClient) -> None:
    await client.ok("PUSHF", jobs=tree("pf", {"kf": "ff"}, policy="failParentOnFailure"))
    await work(client, "ff", fail="boom")
    assert await state(client, "kf") == "failed"
    assert await state(client, "pf") == "failed"
    waited = await client.ok("WaitJob", id="pf", timeout=1000)
    assert waited["completed"] is False and waited["error"] == "Child job kf failed: boom"


async def test_continue_parent_on_failure_releases_the_parent(client: RawClient) -> None:
    await client.ok("PUSHF", jobs=tree("pc", {"kc1": "fcont", "kc2": "fcont"},
                                       policy="continueParentOnFailure"))
    await work(client, "fcont", fail="bad input")
    assert await state(client, "pc") == "waiting"  # kc2 is no longer awaited
    failed = await client.ok("GetFailedChildrenValues", id="pc")
    assert failed["values"] == {"fcont:kc1": "bad input"} and "data" not in failed
    assert (await client.ok("GetIgnoredChildrenFailures", id="pc"))["values"] == {}


async def test_ignore_and_remove_dependency_drop_only_that_edge(client: RawClient) -> None:
    await client.ok("PUSHF", jobs=tree("pi", {"ki1": "fign", "ki2": "fign2"},
                                       policy="ignoreDependencyOnFailure"))
    await work(client, "fign", fail="flaky")
    assert await state(client, "pi") == "waiting-children"  # still waits for ki2
    ignored = (await client.ok("GetIgnoredChildrenFailures", id="pi"))["values"]
    assert ignored == {"fign:ki1": "flaky"}
    await work(client, "fign2", 2)
    assert await state(client, "pi") == "waiting"
    assert (await client.ok("GetChildrenValues", id="pi"))["data"]["values"] == {
        "fign2:ki2": 2}

    await client.ok("PUSHF", jobs=tree("pr", {"kr": "frem"},
                                       policy="removeDependencyOnFailure"))
    await work(client, "frem", fail="gone")
    assert await state(client, "pr") == "waiting"
    assert (await client.ok("GetIgnoredChildrenFailures", id="pr"))["values"] == {}


async def test_without_a_policy_the_parent_keeps_waiting(client: RawClient) -> None:
    await client.ok("PUSHF", jobs=tree("pn", {"kn": "fnone"}))
    await work(client, "fnone", fail="nope")
    assert await state(client, "kn") == "failed"
    assert await state(client, "pn") == "waiting-children"
    # a retry from the DLQ that completes still releases the parent
    await client.ok("MoveToWait", id="kn")
    await work(client, "fnone", "second try")
    assert await state(client, "pn") == "waiting"


async def test_removing_children_releases_the_parent(client: RawClient) -> None:
    await client.ok("PUSHF", jobs=tree("pd", {"kd1": "fdet", "kd2": "fdet"}))
    assert (await client.ok("RemoveChildDependency", id="kd1"))["removed"] is True
    assert (await client.ok("GetJob", id="kd1"))["job"]["parentId"] is None
    assert await state(client, "pd") == "waiting-children"
    await client.ok("Cancel", id="kd2")  # a removed child no longer holds its parent
    assert await state(client, "pd") == "waiting"
    assert (await client.ok("RemoveChildDependency", id="kd1"))["removed"] is False

    await client.ok("PUSHF", jobs=tree("pu", {"ku1": "fun", "ku2": "fun2"}))
    await client.ok("RemoveUnprocessedChildren", id="pu")
    assert await state(client, "ku1") == "unknown" and await state(client, "ku2") == (
        "unknown")
    assert await state(client, "pu") == "waiting"


async def test_update_parent_links_a_child_to_a_waiting_parent(client: RawClient) -> None:
    parent = (await client.ok("PUSH", queue="up", name="p", data={}))["id"]
    child = (await client.ok("PUSH", queue="uc", name="c", data={}))["id"]
    await client.ok("UpdateParent", childId=child, parentId=parent)
    assert await state(client, parent) == "waiting-children"
    job = (await client.ok("GetJob", id=child))["job"]
    assert job["parentId"] == parent
    assert job["data"] == {"__parentId": parent, "__parentQueue": "up"}
    assert (await client.ok("GetJob", id=parent))["job"]["childrenIds"] == [child]
    await work(client, "uc", "linked")
    assert await state(client, parent) == "waiting"
    assert (await client.call("UpdateParent", childId=child, parentId="ghost"))["error"] == (
        "Parent job ghost not found")
    assert (await client.call("UpdateParent", childId=parent, parentId=parent))["error"] == (
        "A job cannot be its own parent")


async def test_move_to_waiting_children_parks_an_active_parent(client: RawClient) -> None:
    parent = (await client.ok("PUSH", queue="mw", name="p", data={}))["id"]
    pulled = await client.ok("PULL", queue="mw", owner="w")
    moved = await client.ok("MoveToWaitingChildren", id=parent, token=pulled["token"])
    assert moved["data"] == {"moved": False}  # nothing to wait for: stays active
    assert await state(client, parent) == "active"
    child = (await client.ok("PUSH", queue="mwc", name="c", data={}))["id"]
    await client.ok("UpdateParent", childId=child, parentId=parent)
    assert (await client.call("MoveToWaitingChildren", id=parent))["error"] == (
        f"Lock token required for job {parent}")
    moved = await client.ok("MoveToWaitingChildren", id=parent, token=pulled["token"])
    assert moved["data"] == {"moved": True}
    assert await state(client, parent) == "waiting-children"
    await work(client, "mwc", "ok")
    assert (await client.ok("PULL", queue="mw"))["job"]["id"] == parent
    assert (await client.call("MoveToWaitingChildren", id="ghost"))["error"] == (
        "Job not found")


async def test_flow_events(connect: Any) -> None:
    listener: RawClient = await connect()
    worker: RawClient = await connect()
    await listener.ok("SubscribeEvents", queue="fev")
    await worker.ok("PUSHF", jobs=tree("pe", {"ke": "fev"}, parent_queue="fev"))
    await work(worker, "fev", 1)
    kinds = []
    while len(kinds) < 7:
        msg = await listener.receive()
        if msg.get("type") == "event":
            event = msg["event"]
            kinds.append((event["eventType"], event["jobId"], event.get("prev")))
    assert kinds == [
        ("pushed", "pe", None), ("waiting-children", "pe", None), ("pushed", "ke", None),
        ("pulled", "ke", None), ("drained", "", None), ("completed", "ke", None),
        ("waiting", "pe", "waiting-children")]


async def test_ids_too_long_to_link_are_refused_before_anything_is_written(
        client: RawClient) -> None:
    dep = "é" * 20  # 40 bytes of UTF-8
    await client.ok("PUSH", queue="dl", name="n", data=1, jobId=dep)
    long_id = "é" * 240  # 480 bytes: a valid id on its own, too long beside the dep
    reply = await client.call("PUSH", queue="dl", name="n", data=1, jobId=long_id,
                              dependsOn=[dep])
    assert reply["error"].startswith(f"Job ids too long to link {dep}")
    assert await state(client, long_id) == "unknown"
    assert (await client.ok("PUSH", queue="dl", name="n", data=1, dependsOn=[dep]))["id"]


async def test_many_flows_resolve_under_concurrent_workers(connect: Any) -> None:
    """Parked pulls take children the moment their flow is adopted; completions in three
    queues race each other's notices to the parents' queue."""
    queues = ["cw-a", "cw-b", "cw-c"]
    n_flows = 40
    producer: RawClient = await connect()
    workers: list[RawClient] = [await connect() for _ in queues]
    done = trio.Event()
    completed = {q: 0 for q in queues}

    async def work_queue(client: RawClient, queue: str) -> None:
        while completed[queue] < n_flows:
            reply = await client.ok("PULLB", queue=queue, count=10, timeout=1000)
            jobs = reply["jobs"]
            if jobs:
                await client.ok("ACKB", ids=[j["id"] for j in jobs],
                                results=[j["id"].upper() for j in jobs])
                completed[queue] += len(jobs)
        if all(n >= n_flows for n in completed.values()):
            done.set()

    async with trio.open_nursery() as nursery:
        for client, queue in zip(workers, queues, strict=True):
            nursery.start_soon(work_queue, client, queue)
        for f in range(n_flows):
            kids = {f"f{f}k{i}": q for i, q in enumerate(queues)}
            await producer.ok("PUSHF", jobs=tree(f"f{f}p", kids, parent_queue="cw-p"))
        with trio.fail_after(20):
            await done.wait()
    counts = (await producer.ok("GetJobCounts", queue="cw-p"))["counts"]
    assert counts["waiting"] == n_flows and counts["waiting-children"] == 0
    for f in (0, n_flows - 1):
        values = (await producer.ok("GetChildrenValues", id=f"f{f}p"))["data"]["values"]
        assert values == {f"{q}:f{f}k{i}": f"F{f}K{i}" for i, q in enumerate(queues)}
