"""Queue and Job over every mode (TCP and embedded, LMDB and memory)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from trioqueue.client import (
    Connection,
    Job,
    JobNotFound,
    LockError,
    Queue,
    ValidationError,
)

pytestmark = pytest.mark.anyio


async def pull(conn: Connection, queue: str, owner: str | None = "w") -> tuple[str, str]:
    """Pull one job as a worker would; returns (id, token)."""
    fields: dict[str, Any] = {"queue": queue}
    if owner is not None:
        fields["owner"] = owner
    reply = await conn.call("PULL", **fields)
    assert reply["job"] is not None, f"nothing to pull in {queue}"
    return reply["job"]["id"], reply.get("token") or ""


async def test_add_and_read_back(conn: Connection) -> None:
    queue = Queue("q-add", conn)
    job = await queue.add("send", {"to": "a@b.c"}, priority=2, attempts=5, job_id="m1")
    assert job.id == "m1" and job.name == "send" and job.data == {"to": "a@b.c"}
    got = await queue.get_job("m1")
    assert got is not None and got.priority == 2 and got.max_attempts == 5
    assert got.state == "prioritized" and await queue.get_job_state("m1") == "prioritized"
    assert got.timestamp is not None and abs(got.timestamp - time.time() * 1000) < 60_000
    assert await queue.get_job("nope") is None
    again = await queue.add("send", {"other": True}, job_id="m1")  # idempotent
    assert again.id == "m1"
    assert (await queue.get_job("m1")).data == {"to": "a@b.c"}  # type: ignore[union-attr]
    assert await queue.count() == 1
    with pytest.raises(JobNotFound):
        await queue.remove("nope")


async def test_every_job_option_reaches_the_broker(conn: Connection) -> None:
    queue = Queue("q-opts", conn)
    await queue.add("n", {}, job_id="o1", delay=60_000, attempts=7,
                    backoff={"type": "fixed", "delay": 10, "max_delay": 100}, ttl=5_000,
                    timeout=9_000, tags=["a"], lifo=True, remove_on_fail=True,
                    stall_timeout=1234, stack_trace_limit=3, keep_logs=5, size_limit=6,
                    debounce_id="d", debounce_ttl=7, durable=True)
    raw = (await queue.get_job("o1")).raw  # type: ignore[union-attr]
    assert raw["state"] == "delayed" and raw["maxAttempts"] == 7
    assert raw["backoffConfig"] == {"type": "fixed", "delay": 10, "maxDelay": 100}
    assert (raw["ttl"], raw["timeout"], raw["tags"], raw["lifo"]) == (5000, 9000, ["a"], True)
    assert raw["removeOnFail"] is True and raw["stallTimeout"] == 1234
    assert (raw["stackTraceLimit"], raw["keepLogs"], raw["sizeLimit"]) == (3, 5, 6)
    assert (raw["debounceId"], raw["debounceTtl"]) == ("d", 7)
    dedup = await queue.add("n", {}, deduplication={"id": "k", "ttl": 60_000})
    same = await queue.add("n", {"x": 1}, deduplication={"id": "k"})
    assert same.id == dedup.id and await queue.get_deduplication_job_id("k") == dedup.id
    assert await queue.remove_deduplication_key("k") == 1
    fresh = await queue.add("n", {}, deduplication={"id": "k"})
    assert fresh.id != dedup.id
    assert await queue.remove_job_deduplication_key(dedup.id) is False  # not its key now
    assert await queue.remove_job_deduplication_key(fresh.id) is True
    assert await queue.remove_deduplication_key("k") == 0
    with pytest.raises(ValidationError, match="unknown job option: atempts"):
        await queue.add("n", {}, atempts=3)
    with pytest.raises(ValidationError, match="priority must be"):
        await queue.add("n", {}, priority="high")


async def test_add_bulk_is_all_or_nothing(conn: Connection) -> None:
    queue = Queue("q-bulk", conn)
    jobs = await queue.add_bulk([
        {"name": "a", "data": 1, "opts": {"job_id": "b1"}},
        {"name": "b", "data": 2, "opts": {"priority": 3, "depends_on": ["b1"]}},
        {"name": "c", "data": 3},
    ])
    assert [j.name for j in jobs] == ["a", "b", "c"] and jobs[0].id == "b1"
    assert await queue.get_job_state(jobs[1].id) == "waiting-children"
    with pytest.raises(ValidationError, match=r"jobs\[1\]: "):
        await queue.add_bulk([{"name": "x", "data": 1}, {"name": "", "data": 2}])
    assert await queue.count() == 2  # the refused batch added nothing
    assert await queue.add_bulk([]) == []


async def test_listing_and_counting(conn: Connection) -> None:
    queue = Queue("q-list", conn)
    ids = [(await queue.add("n", i, priority=i % 2)).id for i in range(5)]
    delayed = await queue.add("n", "later", delay=60_000)
    counts = await queue.get_job_counts()
    assert counts["waiting"] == 3 and counts["prioritized"] == 2 and counts["delayed"] == 1
    assert await queue.get_counts_per_priority() == {0: 4, 1: 2}
    every = await queue.get_jobs()
    assert [j.id for j in every] == ids + [delayed.id]  # creation order
    assert [j.id for j in await queue.get_jobs("waiting", 1, 2)] == [ids[2], ids[4]]
    newest = await queue.get_jobs(["waiting", "delayed"], 0, 0, asc=False)
    assert [j.id for j in newest] == [delayed.id]
    await queue.pause()
    assert await queue.is_paused() is True
    assert (await queue.get_job_counts())["paused"] == 5
    await queue.resume()
    assert await queue.is_paused() is False
    assert await queue.drain() == 6 and await queue.count() == 0


@pytest.mark.parametrize("states", [123, ["waiting", 1], {"waiting": 1}, b"waiting"])
async def test_get_jobs_refuses_states_that_are_not_state_names(
        conn: Connection, states: Any) -> None:
    queue = Queue("q-list-bad", conn)
    with pytest.raises(ValidationError, match="states must be a state name"):
        await queue.get_jobs(states)
    with pytest.raises(ValidationError, match="asc must be True or False"):
        await queue.get_jobs("waiting", asc="no")  # type: ignore[arg-type]


async def test_results_progress_and_logs(conn: Connection) -> None:
    queue = Queue("q-prog", conn)
    job = await queue.add("n", {}, job_id="p1")
    assert await queue.get_progress("p1") is None  # not active yet
    job_id, token = await pull(conn, "q-prog")
    await queue.update_job_progress(job_id, 40, "reading")
    assert await queue.get_progress(job_id) == {"progress": 40, "message": "reading"}
    await job.update_progress(75)
    assert (await queue.get_progress(job_id))["progress"] == 75  # type: ignore[index]
    await queue.add_job_log(job_id, "step 1")
    await job.log("step 2", level="warn")
    logs = await queue.get_job_logs(job_id)
    assert logs["count"] == 2
    assert [(e["level"], e["message"]) for e in logs["logs"]] == [
        ("info", "step 1"), ("warn", "step 2")]
    assert (await queue.get_job_logs(job_id, 1, 1))["logs"][0]["message"] == "step 2"
    await queue.move_job_to_completed(job_id, {"rows": 3}, token)
    assert await queue.get_result(job_id) == {"rows": 3}
    assert await job.get_state() == "completed" and await job.is_completed()
    assert await queue.get_progress("nope") is None


async def test_moves_follow_the_token_rule(conn: Connection) -> None:
    queue = Queue("q-move", conn)
    await queue.add("n", {}, job_id="t1", attempts=1)
    job_id, token = await pull(conn, "q-move")
    with pytest.raises(LockError, match="Lock token required"):
        await queue.move_job_to_wait(job_id)
    with pytest.raises(LockError, match="Invalid or expired lock token"):
        await queue.move_job_to_wait(job_id, "wrong")
    await queue.move_job_to_wait(job_id, token)
    assert await queue.get_job_state(job_id) == "waiting"
    job_id, token = await pull(conn, "q-move")
    await queue.move_job_to_delayed(job_id, int(time.time() * 1000) + 60_000, token)
    assert await queue.get_job_state(job_id) == "delayed"
    await queue.promote_job(job_id)
    job_id, token = await pull(conn, "q-move")
    assert await queue.move_job_to_waiting_children(job_id, token) is False
    try:
        raise RuntimeError("disk full")
    except RuntimeError as exc:
        await queue.move_job_to_failed(job_id, exc, token)
    failed = await queue.get_job(job_id)
    assert failed is not None and failed.state == "failed"
    assert failed.stacktrace and any("RuntimeError" in line for line in failed.stacktrace)
    await queue.retry_job(job_id)  # from the DLQ
    assert await queue.get_job_state(job_id) == "waiting"


async def test_job_methods_change_the_job(conn: Connection) -> None:
    queue = Queue("q-job", conn)
    job = await queue.add("n", {"v": 1}, delay=60_000)
    await job.update_data({"v": 2})
    await job.change_priority(7)
    await job.promote()
    fresh = await queue.get_job(job.id)
    assert fresh is not None and fresh.data == {"v": 2} and fresh.priority == 7
    assert await fresh.is_waiting() is False and await fresh.get_state() == "prioritized"
    await job.change_delay(30_000)
    assert await job.is_delayed()
    await job.remove()
    assert await queue.get_job(job.id) is None
    assert repr(job).startswith("<Job ")


async def test_dependencies_from_the_queue(conn: Connection) -> None:
    queue = Queue("q-deps", conn)
    child = await queue.add("child", {}, job_id="c1")
    parent = await queue.add("parent", {}, job_id="p1", depends_on=["c1"],
                             children_ids=["c1"])
    assert await parent.is_waiting_children()
    deps = await queue.get_job_dependencies("p1")
    assert deps == {"processed": {}, "unprocessed": ["q-deps:c1"], "failed": {},
                    "ignored": {}}
    job_id, token = await pull(conn, "q-deps")
    assert job_id == child.id
    await queue.move_job_to_completed(job_id, 5, token)
    assert await queue.get_children_values("p1") == {"q-deps:c1": 5}
    assert await parent.get_children_values() == {"q-deps:c1": 5}
    page = await queue.get_dependencies("p1", "processed", 0, 10)
    assert page == {"processed": {"q-deps:c1": 5}, "count": 1}
    assert await queue.get_dependencies_count("p1") == {
        "processed": 1, "unprocessed": 0, "failed": 0, "ignored": 0}
    assert await queue.get_failed_children_values("p1") == {}
    assert await queue.get_ignored_children_failures("p1") == {}
    with pytest.raises(JobNotFound):
        await queue.get_job_dependencies("ghost")


async def test_custom_ids_and_stall_config(conn: Connection) -> None:
    queue = Queue("q-misc", conn)
    await queue.add("n", {}, job_id="cid")
    found = await queue.get_job_by_custom_id("cid")
    assert isinstance(found, Job) and found.id == "cid"
    assert await queue.get_job_by_custom_id("none") is None
    await queue.set_stall_config(stall_interval=1000, max_stalls=2)
    config = await queue.get_stall_config()
    assert config["stallInterval"] == 1000 and config["maxStalls"] == 2
    with pytest.raises(ValidationError):
        await queue.set_stall_config(interval=5)
    await queue.obliterate()
    assert await queue.get_job("cid") is None
    with pytest.raises(ValidationError, match="Queue name"):
        Queue("bad name", conn)
