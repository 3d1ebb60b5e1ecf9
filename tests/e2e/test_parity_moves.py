"""bunqueue parity over TCP (msgpack, as its clients speak it): manual moves of jobs
that hold no lock, combined parent-failure options, a child linked to its parent
twice over (one edge), links to a child already dead-lettered (its policy applies at
once), a child detached and linked again (waited for again), and the behaviour of
bunqueue's
releases after 2.9.5 (``backoff.maxDelay`` caps a retry; recovery and a closing
connection act only on the delivery they own).

The last three tests (maxDelay, and the two about the current delivery) pin
behaviour the broker already had before bunqueue 2.9.7 made it its own: they pass on
the code before this change, and guard the parity from here on."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.config import Config
from trioqueue.testing import RawClient
from trioqueue.testing.served import served


@pytest.fixture
def codec() -> str:
    return "msgpack"


def now_ms() -> float:
    return time.time() * 1000


async def state_of(client: RawClient, job_id: str) -> str:
    return str((await client.ok("GetState", id=job_id))["state"])


# ------------------------------------------------------------ lock-free manual moves


async def test_move_to_delayed_of_a_waiting_job_delays_it(client: RawClient) -> None:
    """bunqueue moves a job that holds no lock administratively: a waiting (or
    prioritized, or delayed) job gets ``runAt = now + delay`` in place."""
    waiting = (await client.ok("PUSH", queue="mw", name="n", data=1))["id"]
    prioritized = (await client.ok("PUSH", queue="mw", name="n", data=2, priority=5))["id"]
    delayed = (await client.ok("PUSH", queue="mw", name="n", data=3, delay=5_000))["id"]
    before = now_ms()
    for job_id in (waiting, prioritized, delayed):
        await client.ok("MoveToDelayed", id=job_id, delay=60_000)
        assert await state_of(client, job_id) == "delayed"
        job = (await client.ok("GetJob", id=job_id))["job"]
        assert before + 60_000 - 5 <= job["runAt"] <= now_ms() + 60_000 + 5
        assert job["attempts"] == 0
    counts = (await client.ok("GetJobCounts", queue="mw"))["counts"]
    assert counts["delayed"] == 3 and counts["waiting"] == 0 and counts["prioritized"] == 0
    assert (await client.ok("PULL", queue="mw", timeout=0))["job"] is None
    # a delay of 0 makes it ready again
    await client.ok("MoveToDelayed", id=waiting, delay=0)
    assert (await client.ok("PULL", queue="mw", timeout=0))["job"]["id"] == waiting
    # pulled without a lock (no owner), it is moved without a token ...
    await client.ok("MoveToDelayed", id=waiting, delay=60_000)
    assert await state_of(client, waiting) == "delayed"
    # ... while a locked job still needs its own
    locked = (await client.ok("PUSH", queue="mw", name="n", data=4))["id"]
    assert (await client.ok("PULL", queue="mw", owner="w"))["job"]["id"] == locked
    assert (await client.call("MoveToDelayed", id=locked, delay=1000))["error"] == (
        f"Lock token required for job {locked}")
    assert (await client.call("MoveToDelayed", id=locked, delay=1000, token="x"))[
        "error"] == f"Invalid or expired lock token for job {locked}"
    assert await state_of(client, locked) == "active"


async def test_move_to_delayed_refuses_what_has_no_queue_place(client: RawClient) -> None:
    """Completed and waiting-for-children jobs are not moved (bunqueue:
    ``Job is not active (current state: X)``); an unknown id is ``Job not found``."""
    done = (await client.ok("PUSH", queue="mr", name="n", data=1))["id"]
    await client.ok("PULL", queue="mr")
    await client.ok("ACK", id=done)
    assert (await client.call("MoveToDelayed", id=done, delay=10))["error"] == (
        "Job is not active (current state: completed)")
    parent = (await client.ok("PUSH", queue="mr", name="p", data=1,
                              dependsOn=[(await client.ok(
                                  "PUSH", queue="mr", name="c", data=2,
                                  delay=60_000))["id"]]))["id"]
    assert (await client.call("MoveToDelayed", id=parent, delay=10))["error"] == (
        "Job is not active (current state: waiting-children)")
    assert (await client.call("MoveToDelayed", id="nope", delay=10))["error"] == (
        "Job not found")


# ------------------------------------------------------ combined parent-failure options


async def _child_fails(client: RawClient, queue: str, **policy: bool) -> tuple[str, str]:
    """A flow: parent ``<queue>-p`` waits for child ``<queue>-c`` (carrying
    ``policy``) and child ``<queue>-o`` (delayed, still pending); the first child is
    pulled and fails for good. Returns (parent id, other child id)."""
    parent, child, other = f"{queue}-p", f"{queue}-c", f"{queue}-o"
    marks = {"__parentId": parent, "__parentQueue": queue}
    await client.ok("PUSHF", jobs=[
        {"id": parent, "queue": queue, "input": {
            "name": "p", "data": {"__childrenIds": [child, other]},
            "childrenIds": [child, other], "dependsOn": [child, other]}},
        {"id": child, "queue": queue, "input": {
            "name": "c", "data": marks, "parentId": parent, "maxAttempts": 1,
            **policy}},
        {"id": other, "queue": queue, "input": {
            "name": "o", "data": marks, "parentId": parent, "delay": 60_000}}])
    assert (await client.ok("PULL", queue=queue))["job"]["id"] == child
    await client.ok("FAIL", id=child, error="boom")
    return parent, other


async def _settled(client: RawClient, job_id: str, state: str) -> None:
    """Wait until ``job_id`` is in ``state`` (a parent hears of its children by a
    notice sent after the commit)."""
    with trio.fail_after(5):
        while await state_of(client, job_id) != state:
            await trio.sleep(0.01)


@pytest.mark.parametrize("others", [
    {"ignoreDependencyOnFailure": True},
    {"removeDependencyOnFailure": True},
    {"continueParentOnFailure": True},
    {"ignoreDependencyOnFailure": True, "removeDependencyOnFailure": True,
     "continueParentOnFailure": True},
])
async def test_fail_parent_wins_over_the_other_options(
        client: RawClient, others: dict[str, bool]) -> None:
    """bunqueue accepts the options together; failParentOnFailure acts first and the
    parent goes to the dead-letter queue, so the others find nothing to do."""
    parent, _ = await _child_fails(client, "pf", failParentOnFailure=True, **others)
    await _settled(client, parent, "failed")
    assert (await client.ok("GetIgnoredChildrenFailures", id=parent))["values"] == {}
    assert (await client.ok("GetFailedChildrenValues", id=parent))["values"] == {}


async def test_continue_wins_over_ignore_and_remove(client: RawClient) -> None:
    parent, _ = await _child_fails(client, "pc", continueParentOnFailure=True,
                                   ignoreDependencyOnFailure=True,
                                   removeDependencyOnFailure=True)
    await _settled(client, parent, "waiting")  # released, the other child still pending
    failed = (await client.ok("GetFailedChildrenValues", id=parent))["values"]
    assert list(failed.values()) == ["boom"]
    assert (await client.ok("GetIgnoredChildrenFailures", id=parent))["values"] == {}


async def test_ignore_wins_over_remove(client: RawClient) -> None:
    """Both drop the edge; ignore also keeps the error, so the pair acts as ignore."""
    parent, other = await _child_fails(client, "pi", ignoreDependencyOnFailure=True,
                                       removeDependencyOnFailure=True)
    with trio.fail_after(5):
        while not (ignored := (await client.ok(
                "GetIgnoredChildrenFailures", id=parent))["values"]):
            await trio.sleep(0.01)
    assert list(ignored.values()) == ["boom"]
    assert await state_of(client, parent) == "waiting-children"  # the other child
    await client.ok("Promote", id=other)
    assert (await client.ok("PULL", queue="pi"))["job"]["id"] == other
    await client.ok("ACK", id=other)
    await _settled(client, parent, "waiting")


# ------------------------------------------------ a parent edge linked more than once


async def _linked_twice(client: RawClient, q: str, how: str, policy: dict[str, bool]
                        ) -> tuple[str, str]:
    """Parent ``<q>-p`` (queue ``<q>p``) and child ``<q>-c`` (queue ``<q>c``, one
    attempt, carrying ``policy``) linked twice over, as ``how`` says. Returns (parent
    id, the queue to pull the child from)."""
    parent, child, pq, cq = f"{q}-p", f"{q}-c", f"{q}p", f"{q}c"
    child_opts: dict[str, Any] = {"name": "c", "data": {}, "maxAttempts": 1, **policy}
    if how == "PUSHF + UpdateParent":
        await client.ok("PUSHF", jobs=[
            {"id": parent, "queue": pq, "input": {
                "name": "p", "data": {"__childrenIds": [child]}, "childrenIds": [child],
                "dependsOn": [child]}},
            {"id": child, "queue": cq, "input": {
                **child_opts, "data": {"__parentId": parent, "__parentQueue": pq},
                "parentId": parent}}])
        await client.ok("UpdateParent", childId=child, parentId=parent)
    elif how == "PUSHB dependsOn twice":
        await client.ok("PUSHB", queue=cq, jobs=[
            {**child_opts, "customId": child},
            {"name": "p", "data": {}, "customId": parent, "dependsOn": [child, child]}])
        return parent, cq
    elif how == "UpdateParent twice":
        await client.ok("PUSH", queue=pq, name="p", data={}, jobId=parent)
        await client.ok("PUSH", queue=cq, jobId=child, **child_opts)
        await client.ok("UpdateParent", childId=child, parentId=parent)
        await client.ok("UpdateParent", childId=child, parentId=parent)
    else:  # the child first, then its parent with dependsOn (and UpdateParent)
        await client.ok("PUSH", queue=cq, jobId=child, **child_opts)
        deps = [child, child] if how == "dependsOn twice" else [child]
        await client.ok("PUSH", queue=pq, name="p", data={}, jobId=parent, dependsOn=deps)
        if how == "dependsOn + UpdateParent":
            await client.ok("UpdateParent", childId=child, parentId=parent)
    return parent, cq


# How a child gets linked twice over (value: a short tag naming the case's queues).
LINKED_TWICE = {"dependsOn + UpdateParent": "du", "UpdateParent twice": "uu",
                "PUSHF + UpdateParent": "fu", "dependsOn twice": "dd",
                "PUSHB dependsOn twice": "bd"}


@pytest.mark.parametrize("how", list(LINKED_TWICE))
@pytest.mark.parametrize("outcome", ["completes", "ignoreDependencyOnFailure",
                                     "removeDependencyOnFailure"])
async def test_a_child_linked_twice_is_one_edge(client: RawClient, how: str,
                                                outcome: str) -> None:
    """Linking a child its parent already waits for adds no second edge (bunqueue
    answers ok and keeps one dependency): the parent lists it once and leaves
    waiting-children when the child completes or fails under an edge-dropping policy.

    Only the ``dependsOn + UpdateParent`` order (the one the bunqueue client uses)
    failed before this change; the other orders were one edge already and are kept
    here as guards."""
    policy = {} if outcome == "completes" else {outcome: True}
    q = f"l{LINKED_TWICE[how]}{outcome[:3]}"
    parent, child_queue = await _linked_twice(client, q, how, policy)
    deps = (await client.ok("GetDependencies", id=parent))["data"]
    assert deps["unprocessed"] == [f"{child_queue}:{q}-c"]
    assert await state_of(client, parent) == "waiting-children"
    assert (await client.ok("PULL", queue=child_queue))["job"]["id"] == f"{q}-c"
    if outcome == "completes":
        await client.ok("ACK", id=f"{q}-c", result=7)
    else:
        await client.ok("FAIL", id=f"{q}-c", error="boom")
    await _settled(client, parent, "waiting")
    deps = (await client.ok("GetDependencies", id=parent))["data"]
    assert deps["unprocessed"] == []
    if outcome == "completes":
        assert deps["processed"] == {f"{child_queue}:{q}-c": 7}
        counts = (await client.ok("GetDependenciesCount", id=parent))["data"]
        assert counts["processed"] == 1


async def test_linking_a_settled_child_again_keeps_the_parent_released(
        client: RawClient) -> None:
    """The bunqueue client pushes the children, then the parent with dependsOn, then
    one UpdateParent per child: a child that failed under ignoreDependencyOnFailure in
    between has released the parent already, and the link does not take it back."""
    await client.ok("PUSH", queue="lsc", name="c", data={}, jobId="ls-c", maxAttempts=1,
                    ignoreDependencyOnFailure=True)
    await client.ok("PUSH", queue="lsp", name="p", data={}, jobId="ls-p",
                    dependsOn=["ls-c"])
    assert (await client.ok("PULL", queue="lsc"))["job"]["id"] == "ls-c"
    await client.ok("FAIL", id="ls-c", error="boom")
    await _settled(client, "ls-p", "waiting")
    await client.ok("UpdateParent", childId="ls-c", parentId="ls-p")
    assert await state_of(client, "ls-p") == "waiting"
    assert (await client.ok("GetJob", id="ls-p"))["job"]["childrenIds"] == ["ls-c"]
    assert (await client.ok("PULL", queue="lsp"))["job"]["id"] == "ls-p"


# ------------------------------------------- a child that failed for good before its link


async def _failed_child(client: RawClient, q: str, **policy: bool) -> str:
    """Child ``<q>-c`` in queue ``<q>c`` (one attempt, carrying ``policy``), pulled and
    failed for good: it is in the dead-letter queue. Returns its queue."""
    child, cq = f"{q}-c", f"{q}c"
    await client.ok("PUSH", queue=cq, name="c", data={}, jobId=child, maxAttempts=1,
                    **policy)
    assert (await client.ok("PULL", queue=cq))["job"]["id"] == child
    await client.ok("FAIL", id=child, error="boom")
    assert await state_of(client, child) == "failed"
    return cq


# The four policies (value: a short tag naming the case's queues) and the parent's state
# right after the link: failed, released, or still waiting for its other child.
FAILED_FIRST = {"failParentOnFailure": ("ff", "failed"),
                "continueParentOnFailure": ("fc", "waiting"),
                "ignoreDependencyOnFailure": ("fi", "waiting-children"),
                "removeDependencyOnFailure": ("fr", "waiting-children")}


@pytest.mark.parametrize("how", ["UpdateParent", "dependsOn"])
@pytest.mark.parametrize("policy", list(FAILED_FIRST))
async def test_linking_a_child_that_already_failed_applies_its_policy(
        client: RawClient, policy: str, how: str) -> None:
    """bunqueue applies a child's failure policy when the child is already in the
    dead-letter queue as it is linked: the parent fails, is released, or drops the edge
    at once, as if the child had failed after the link. Before, the parent waited for a
    retry from the DLQ, by UpdateParent and by dependsOn alike. The parent also waits
    for another child (delayed), so the four policies differ."""
    tag, state_after = FAILED_FIRST[policy]
    q = tag + how[0].lower()
    cq = await _failed_child(client, q, **{policy: True})
    parent, child, other, pq = f"{q}-p", f"{q}-c", f"{q}-o", f"{q}p"
    await client.ok("PUSH", queue=pq, name="o", data={}, jobId=other, delay=60_000)
    if how == "UpdateParent":
        await client.ok("PUSH", queue=pq, name="p", data={}, jobId=parent,
                        dependsOn=[other])
        await client.ok("UpdateParent", childId=child, parentId=parent)
    else:
        await client.ok("PUSH", queue=pq, name="p", data={}, jobId=parent,
                        dependsOn=[other, child])
    assert await state_of(client, parent) == state_after
    failed = (await client.ok("GetFailedChildrenValues", id=parent))["values"]
    ignored = (await client.ok("GetIgnoredChildrenFailures", id=parent))["values"]
    key = f"{cq}:{child}"
    assert failed == ({key: "boom"} if policy == "continueParentOnFailure" else {})
    assert ignored == ({key: "boom"} if policy == "ignoreDependencyOnFailure" else {})
    if policy == "failParentOnFailure":
        entry = (await client.ok("Dlq", queue=pq))["entries"][0]
        assert entry["job"]["id"] == parent
        assert entry["error"] == f"Child job {child} failed: boom"
        return
    if policy == "continueParentOnFailure":
        assert (await client.ok("PULL", queue=pq))["job"]["id"] == parent
        return
    deps = (await client.ok("GetDependencies", id=parent))["data"]
    assert deps["unprocessed"] == [f"{pq}:{other}"]
    await client.ok("Promote", id=other)
    assert (await client.ok("PULL", queue=pq))["job"]["id"] == other
    await client.ok("ACK", id=other)
    assert await state_of(client, parent) == "waiting"


async def test_linking_a_child_that_failed_without_a_policy_waits_for_its_retry(
        client: RawClient) -> None:
    """Without a policy bunqueue keeps the parent waiting (a retry from the DLQ may
    still complete the child), by UpdateParent and by dependsOn alike. Before, a
    dependsOn naming a dead-lettered job was refused (``Dependency job not found``);
    bunqueue accepts it."""
    cq = await _failed_child(client, "fn")
    await client.ok("PUSH", queue="fnp", name="p", data={}, jobId="fn-p1",
                    dependsOn=["fn-c"])
    await client.ok("PUSH", queue="fnp", name="p", data={}, jobId="fn-p2")
    await client.ok("UpdateParent", childId="fn-c", parentId="fn-p2")
    for parent in ("fn-p1", "fn-p2"):
        assert await state_of(client, parent) == "waiting-children"
    assert (await client.ok("RetryDlq", queue=cq, jobId="fn-c"))["count"] == 1
    assert (await client.ok("PULL", queue=cq))["job"]["id"] == "fn-c"
    await client.ok("ACK", id="fn-c", result=3)
    for parent in ("fn-p1", "fn-p2"):
        await _settled(client, parent, "waiting")


# ------------------------------------------------------ detached, then linked again


@pytest.mark.parametrize("how", ["dependsOn", "UpdateParent", "PUSHF"])
async def test_a_child_detached_then_linked_again_is_waited_for(
        client: RawClient, how: str) -> None:
    """RemoveChildDependency takes the child out of its parent's children and
    dependencies (bunqueue), so a later UpdateParent is a new edge and the parent waits
    for the child again. Before, the parent kept the child listed and the new link
    only patched the child's marker: the parent ran without waiting."""
    q = {"dependsOn": "rd", "UpdateParent": "ru", "PUSHF": "rf"}[how]
    parent, child, pq, cq = f"{q}-p", f"{q}-c", f"{q}p", f"{q}c"
    if how == "PUSHF":
        await client.ok("PUSHF", jobs=[
            {"id": parent, "queue": pq, "input": {
                "name": "p", "data": {"__childrenIds": [child]}, "childrenIds": [child],
                "dependsOn": [child]}},
            {"id": child, "queue": cq, "input": {
                "name": "c", "data": {"__parentId": parent, "__parentQueue": pq},
                "parentId": parent}}])
    else:
        await client.ok("PUSH", queue=cq, name="c", data={}, jobId=child)
        deps = [child] if how == "dependsOn" else []
        await client.ok("PUSH", queue=pq, name="p", data={}, jobId=parent, dependsOn=deps)
        if how == "UpdateParent":
            await client.ok("UpdateParent", childId=child, parentId=parent)
    assert await state_of(client, parent) == "waiting-children"
    assert (await client.ok("RemoveChildDependency", id=child))["removed"] is True
    await _settled(client, parent, "waiting")
    job = (await client.ok("GetJob", id=parent))["job"]
    assert job["childrenIds"] == [] and job["dependsOn"] == []
    assert "__childrenIds" not in job["data"]

    await client.ok("UpdateParent", childId=child, parentId=parent)
    assert await state_of(client, parent) == "waiting-children"
    job = (await client.ok("GetJob", id=parent))["job"]
    assert job["childrenIds"] == [child] and job["dependsOn"] == [child]
    deps = (await client.ok("GetDependencies", id=parent))["data"]
    assert deps["unprocessed"] == [f"{cq}:{child}"]
    assert (await client.ok("PULL", queue=pq, timeout=0))["job"] is None
    assert (await client.ok("PULL", queue=cq))["job"]["id"] == child
    await client.ok("ACK", id=child, result=7)
    await _settled(client, parent, "waiting")
    deps = (await client.ok("GetDependencies", id=parent))["data"]
    assert deps["processed"] == {f"{cq}:{child}": 7} and deps["unprocessed"] == []


async def test_a_child_linked_again_is_still_waited_for_after_a_restart(
        configure: Callable[..., Config]) -> None:
    """A restart replays a waiting parent's outcome rows: the row of the earlier
    detach must not release a parent that waits for the child again."""
    config = configure()  # LMDB (or PostgreSQL), in this test's directory
    async with served(config) as client:
        await client.ok("PUSH", queue="rrc", name="c", data={}, jobId="rr-c")
        await client.ok("PUSH", queue="rrp", name="p", data={}, jobId="rr-p",
                        dependsOn=["rr-c"])
        assert (await client.ok("RemoveChildDependency", id="rr-c"))["removed"] is True
        await _settled(client, "rr-p", "waiting")
        await client.ok("UpdateParent", childId="rr-c", parentId="rr-p")
        assert await state_of(client, "rr-p") == "waiting-children"
    async with served(config) as client:
        assert await state_of(client, "rr-p") == "waiting-children"
        assert (await client.ok("PULL", queue="rrc"))["job"]["id"] == "rr-c"
        await client.ok("ACK", id="rr-c", result=1)
        await _settled(client, "rr-p", "waiting")


# ---------------------------------------------------------------- backoff.maxDelay


@pytest.mark.parametrize("backoff", [
    {"type": "exponential", "delay": 30_000, "maxDelay": 200},
    {"type": "fixed", "delay": 30_000, "maxDelay": 200},
])
async def test_max_delay_caps_a_retry(client: RawClient, backoff: dict[str, Any]) -> None:
    job_id = (await client.ok("PUSH", queue="bm", name="n", data=1, maxAttempts=3,
                              backoff=backoff))["id"]
    pulled = await client.ok("PULL", queue="bm", owner="w")
    before = now_ms()
    await client.ok("FAIL", id=job_id, token=pulled["token"], error="e")
    job = (await client.ok("GetJob", id=job_id))["job"]
    assert job["state"] == "delayed"
    assert job["runAt"] <= now_ms() + 200 + 2
    assert job["runAt"] >= before
    assert job["backoffConfig"]["maxDelay"] == 200


# ---------------------------------------------------- ownership of the current delivery


async def test_a_closing_connection_releases_only_the_deliveries_it_owns(
        connect: Callable[..., Any]) -> None:
    """A job moved away from a silent client (MoveToWait) and delivered to another
    worker stays with that worker when the silent client finally closes."""
    admin, silent, other = await connect(), await connect(), await connect()
    job_id = (await admin.ok("PUSH", queue="own", name="n", data=1))["id"]
    assert (await silent.ok("PULL", queue="own"))["job"]["id"] == job_id
    await admin.ok("MoveToWait", id=job_id)
    assert (await other.ok("PULL", queue="own"))["job"]["id"] == job_id
    await silent.aclose()
    await admin.ok("Ping")  # the close is handled before commands after it
    with trio.fail_after(5):
        while True:
            await admin.ok("Ping")
            if (await admin.ok("GetJob", id=job_id))["job"]["state"] == "active":
                break
    counts = (await admin.ok("GetJobCounts", queue="own"))["counts"]
    assert counts["active"] == 1 and counts["waiting"] == 0
    await other.ok("ACK", id=job_id)
    assert await state_of(admin, job_id) == "completed"


async def test_lock_expiry_then_redelivery_survives_the_old_connection_closing(
        connect: Callable[..., Any]) -> None:
    admin, silent, other = await connect(), await connect(), await connect()
    job_id = (await admin.ok("PUSH", queue="own2", name="n", data=1))["id"]
    first = await silent.ok("PULL", queue="own2", owner="a", lockTtl=50)
    assert first["job"]["id"] == job_id
    with trio.fail_after(5):
        while (await admin.ok("GetState", id=job_id))["state"] != "waiting":
            await trio.sleep(0.01)
    second = await other.ok("PULL", queue="own2", owner="b")
    assert second["job"]["id"] == job_id
    await silent.aclose()
    await admin.ok("Ping")
    assert await state_of(admin, job_id) == "active"
    await other.ok("ACK", id=job_id, token=second["token"])
    assert await state_of(admin, job_id) == "completed"
