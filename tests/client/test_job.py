"""Job methods with no other test."""

from __future__ import annotations

import time

import pytest

from trioqueue.client import Connection, FlowProducer, Job, Queue

pytestmark = pytest.mark.anyio


async def leased(conn: Connection, queue: Queue) -> Job:
    reply = await conn.call("PULL", queue=queue.name, owner="w")
    assert reply["job"] is not None
    return Job(queue, reply["job"], reply.get("token") or None)


async def test_delay_reports_the_requested_delay(conn: Connection) -> None:
    queue = Queue("j-delay", conn)
    await queue.add("n", {}, job_id="d", delay=60_000)
    await queue.add("n", {}, job_id="now")
    got = await queue.get_job("d")
    assert got is not None and abs(got.delay - 60_000) < 1_000
    assert (await queue.get_job("now")).delay == 0  # type: ignore[union-attr]


async def test_logs_read_and_clear(conn: Connection) -> None:
    queue = Queue("j-logs", conn)
    job = await queue.add("n", {}, job_id="l")
    await job.log("a")
    await job.log("b")
    assert [e["message"] for e in (await job.get_logs())["logs"]] == ["a", "b"]
    await job.clear_logs()
    assert (await job.get_logs())["logs"] == []


async def test_move_to_completed_and_is_active(conn: Connection) -> None:
    queue = Queue("j-done", conn)
    await queue.add("n", {}, job_id="c")
    job = await leased(conn, queue)
    assert await job.is_active()
    await job.move_to_completed({"ok": 1})
    assert await job.get_state() == "completed" and not await job.is_active()
    assert await queue.get_result("c") == {"ok": 1}


async def test_move_to_failed_then_is_failed(conn: Connection) -> None:
    queue = Queue("j-fail", conn)
    await queue.add("n", {}, job_id="f", attempts=1)
    job = await leased(conn, queue)
    assert not await job.is_failed()
    await job.move_to_failed("boom")
    assert await job.is_failed()


async def test_retry_puts_a_failed_job_back_to_waiting(conn: Connection) -> None:
    queue = Queue("j-retry", conn)
    await queue.add("n", {}, job_id="r", attempts=1)
    job = await leased(conn, queue)
    await job.move_to_failed("boom")
    assert await job.is_failed()
    await job.retry()
    assert await job.get_state() == "waiting"


async def test_move_to_delayed_makes_an_active_job_delayed(conn: Connection) -> None:
    queue = Queue("j-delayed", conn)
    await queue.add("n", {}, job_id="md")
    job = await leased(conn, queue)
    await job.move_to_delayed(int(time.time() * 1000) + 60_000)
    assert await job.get_state() == "delayed"


async def test_extend_lock_keeps_the_lease_valid(conn: Connection) -> None:
    queue = Queue("j-lock", conn)
    await queue.add("n", {}, job_id="el")
    job = await leased(conn, queue)
    await job.extend_lock(60_000)
    await job.move_to_completed("x")
    assert await job.get_state() == "completed"



async def two_child_flow(conn: Connection, queue: str) -> Job:
    node = await FlowProducer(conn).add({"queue_name": queue, "opts": {"job_id": "p"},
                                         "children": [
        {"queue_name": queue, "opts": {"job_id": "c1"}},
        {"queue_name": queue, "opts": {"job_id": "c2"}}]})
    return node.job


async def test_dependencies_of_a_fresh_flow_are_all_unprocessed(conn: Connection) -> None:
    parent = await two_child_flow(conn, "j-deps")
    assert await parent.get_dependencies_count() == {
        "processed": 0, "unprocessed": 2, "failed": 0, "ignored": 0}
    deps = await parent.get_dependencies()
    assert sorted(deps["unprocessed"]) == ["j-deps:c1", "j-deps:c2"]
    one = await parent.get_dependencies("unprocessed")
    assert one["count"] == 2 and sorted(one["unprocessed"]) == ["j-deps:c1", "j-deps:c2"]
    assert await parent.get_failed_children_values() == {}
    assert await parent.get_ignored_children_failures() == {}


async def test_remove_child_dependency_detaches_one_child(conn: Connection) -> None:
    parent = await two_child_flow(conn, "j-rcd")
    child = await parent.queue.get_job("c1")
    assert child is not None and await child.remove_child_dependency() is True
    assert (await parent.get_dependencies_count())["unprocessed"] == 1
    assert await parent.get_state() == "waiting-children"


async def test_remove_unprocessed_children_frees_the_parent(conn: Connection) -> None:
    parent = await two_child_flow(conn, "j-ruc")
    await parent.remove_unprocessed_children()
    assert await parent.queue.get_job("c1") is None
    assert await parent.queue.get_job("c2") is None
    assert await parent.get_state() == "waiting"


@pytest.mark.parametrize("other_queues", [False, True], ids=["same-queue", "other-queues"])
async def test_dependencies_read_after_removing_unprocessed_children_are_empty(
        conn: Connection, other_queues: bool) -> None:
    """The reply comes once the removals settled the parent, as in BullMQ's one script:
    the very next read of the parent sees no children (the notices went round the
    children's queues and back after the reply, before; about half the reads saw them).
    Several flows, so a race would show."""
    for i in range(6):
        children = [{"queue_name": f"j-rx{n}" if other_queues else "j-rx", "opts": {
            "job_id": f"rx{i}-{n}"}} for n in range(2)]
        node = await FlowProducer(conn).add({"queue_name": "j-rx", "opts": {
            "job_id": f"rx{i}"}, "children": children})
        await node.job.remove_unprocessed_children()
        deps = await node.job.get_dependencies()
        assert deps["unprocessed"] == [] and deps["processed"] == {}
        assert (await node.job.get_dependencies_count())["unprocessed"] == 0
        assert await node.job.get_state() == "waiting"


async def test_failed_children_values_and_ignored_failures_hold_the_errors(
        conn: Connection) -> None:
    """One child failing under continueParentOnFailure, one under
    ignoreDependencyOnFailure: each error is read back under its own query."""
    node = await FlowProducer(conn).add({"queue_name": "j-fcv", "opts": {"job_id": "fp"},
                                         "children": [
        {"queue_name": "j-fcv", "opts": {"job_id": "fi", "attempts": 1,
                                         "ignore_dependency_on_failure": True}},
        {"queue_name": "j-fcv", "opts": {"job_id": "fc", "attempts": 1,
                                         "continue_parent_on_failure": True}}]})
    parent = node.job
    for _ in range(2):
        child = await leased(conn, parent.queue)
        await child.move_to_failed(f"boom {child.id}")
    ignored = await parent.get_ignored_children_failures()
    failed = await parent.get_failed_children_values()
    assert list(ignored.values()) == ["boom fi"] and "fi" in next(iter(ignored))
    assert list(failed.values()) == ["boom fc"] and "fc" in next(iter(failed))
    assert await parent.get_state() == "waiting"  # continueParentOnFailure released it


async def test_move_to_waiting_children_with_a_pending_child_parks_the_job(
        conn: Connection) -> None:
    queue = Queue("j-mwcp", conn)
    await queue.add("n", {}, job_id="mp")
    parent = await leased(conn, queue)
    await queue.add("n", {}, job_id="mc", delay=60_000)
    # A child linked to the running parent: now it has something to wait for.
    await conn.call("UpdateParent", queue="j-mwcp", childId="mc", parentId="mp")
    assert (await parent.get_dependencies_count())["unprocessed"] == 1
    assert await parent.move_to_waiting_children() is True
    assert await parent.get_state() == "waiting-children"


async def test_move_to_waiting_children_without_children_stays_active(
        conn: Connection) -> None:
    queue = Queue("j-mwc", conn)
    await queue.add("n", {}, job_id="mw")
    job = await leased(conn, queue)
    assert await job.move_to_waiting_children() is False
    assert await job.get_state() == "active"
