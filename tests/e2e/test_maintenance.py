"""Clean, ListQueues, TrimEvents and CompactMemory over real TCP, with both codecs."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import make_config
from trioqueue.actors.broker import Broker
from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.storage.memory import MemoryStorage
from trioqueue.testing import RawClient
from trioqueue.testing.faults import FaultyStorage

# on both stores (the representative PostgreSQL run in CI; tests/conftest.py)
pytestmark = pytest.mark.engines("lmdb", "postgres")

HOUR_MS = 3_600_000


def hour_ago() -> int:
    """A createdAt an hour in the past (PUSH's ``timestamp``): old for any grace here."""
    return int(time.time() * 1000) - HOUR_MS


async def state_of(client: RawClient, job_id: str) -> str:
    return str((await client.ok("GetState", id=job_id))["state"])


async def finish(client: RawClient, queue: str, *, fail: bool = False) -> str:
    """Pull one job and complete it (or fail it for good); its id."""
    pulled = await client.ok("PULL", queue=queue, owner="w")
    job_id = pulled["job"]["id"]
    if fail:
        await client.ok("FAIL", id=job_id, token=pulled["token"], error="boom")
    else:
        await client.ok("ACK", id=job_id, token=pulled["token"], result={"ok": 1})
    return str(job_id)


# ------------------------------------------------------------------ Clean


async def test_clean_removes_queued_jobs_older_than_grace_oldest_first(
        client: RawClient) -> None:
    old = hour_ago()
    w = (await client.ok("PUSH", queue="c", name="n", data=1, timestamp=old))["id"]
    p = (await client.ok("PUSH", queue="c", name="n", data=1, priority=3,
                         timestamp=old - 2))["id"]
    d = (await client.ok("PUSH", queue="c", name="n", data=1, delay=60_000,
                         timestamp=old - 1))["id"]
    young = (await client.ok("PUSH", queue="c", name="n", data=1))["id"]
    reply = await client.ok("Clean", queue="c", grace=60_000)
    assert reply["count"] == 3 and reply["ids"] == [p, d, w]  # by createdAt
    for job_id in (w, p, d):
        assert await state_of(client, job_id) == "unknown"
    assert await state_of(client, young) == "waiting"
    assert (await client.ok("Count", queue="c"))["count"] == 1


@pytest.mark.parametrize("state", ["wait", "waiting", "delayed", "prioritized", "paused"])
async def test_every_waiting_like_state_cleans_the_queued_jobs(
        client: RawClient, state: str) -> None:
    old = hour_ago()
    ids = [(await client.ok("PUSH", queue="w", name="n", data=i, timestamp=old + i,
                            **extra))["id"]
           for i, extra in enumerate([{}, {"priority": 2}, {"delay": 60_000}])]
    reply = await client.ok("Clean", queue="w", grace=1000, state=state)
    assert reply == {"ok": True, "reqId": reply["reqId"], "count": 3, "ids": ids}


async def test_clean_leaves_active_jobs_and_unknown_states_remove_nothing(
        client: RawClient) -> None:
    old = hour_ago()
    for i in range(2):
        await client.ok("PUSH", queue="a", name="n", data=i, timestamp=old)
    pulled = await client.ok("PULL", queue="a", owner="w")
    for state in ("active", "bogus", "waiting-children"):
        reply = await client.ok("Clean", queue="a", grace=0, state=state)
        assert reply["count"] == 0 and reply["ids"] == []
    cleaned = await client.ok("Clean", queue="a", grace=0)
    assert cleaned["count"] == 1  # the waiting one; the active one is its worker's
    assert await state_of(client, pulled["job"]["id"]) == "active"


async def test_clean_completed_judges_completion_time(client: RawClient) -> None:
    for i in range(3):
        await client.ok("PUSH", queue="done", name="n", data=i, timestamp=hour_ago())
    ids = [await finish(client, "done") for _ in range(3)]
    # Created an hour ago, completed just now: younger than a minute's grace.
    kept = await client.ok("Clean", queue="done", grace=60_000, state="completed")
    assert kept["count"] == 0
    assert (await client.ok("GetJobCounts", queue="done"))["counts"]["completed"] == 3
    gone = await client.ok("Clean", queue="done", grace=0, state="completed")
    assert gone["count"] == 3 and sorted(gone["ids"]) == sorted(ids)
    for job_id in ids:
        assert await state_of(client, job_id) == "unknown"
        assert (await client.call("GetJob", id=job_id))["error"] == "Job not found"
    assert (await client.ok("GetJobCounts", queue="done"))["counts"]["completed"] == 0


async def test_clean_failed_judges_the_time_it_entered_the_dlq(client: RawClient) -> None:
    await client.ok("PUSH", queue="dead", name="n", data=1, maxAttempts=1,
                    timestamp=hour_ago())
    await client.ok("PUSH", queue="dead", name="n", data=2)
    dead = await finish(client, "dead", fail=True)
    done = await finish(client, "dead")
    assert await state_of(client, dead) == "failed"
    kept = await client.ok("Clean", queue="dead", grace=60_000, state="failed")
    assert kept["count"] == 0  # created an hour ago, but in the DLQ for less than that
    gone = await client.ok("Clean", queue="dead", grace=0, state="failed")
    assert gone["ids"] == [dead]
    assert await state_of(client, dead) == "unknown"
    assert await state_of(client, done) == "completed"  # another state: left alone


async def test_clean_limit_is_honoured_and_defaults_to_1000(client: RawClient) -> None:
    old = hour_ago()
    jobs = [{"name": "n", "data": i, "timestamp": old + i} for i in range(1205)]
    ids = (await client.ok("PUSHB", queue="lim", jobs=jobs))["ids"]
    first = await client.ok("Clean", queue="lim", grace=0, limit=5)
    assert first["ids"] == ids[:5]
    default = await client.ok("Clean", queue="lim", grace=0)
    assert default["count"] == 1000 and default["ids"] == ids[5:1005]
    rest = await client.ok("Clean", queue="lim", grace=0, limit=100_000)
    assert rest["ids"] == ids[1005:]
    assert (await client.ok("Count", queue="lim"))["count"] == 0


async def test_a_large_clean_of_finished_jobs_runs_page_by_page(
        client: RawClient) -> None:
    # 250 completed jobs: three pages of ids, each read and deleted in a step of its own
    await client.ok("PUSHB", queue="big", jobs=[{"name": "n", "data": i}
                                                 for i in range(250)])
    pulled = await client.ok("PULLB", queue="big", count=250, owner="w")
    await client.ok("ACKB", ids=[j["id"] for j in pulled["jobs"]], tokens=pulled["tokens"])
    reply = await client.ok("Clean", queue="big", grace=0, state="completed", limit=240)
    assert reply["count"] == 240
    counts = (await client.ok("GetJobCounts", queue="big"))["counts"]
    assert counts["completed"] == 10


async def test_clean_releases_custom_ids_and_dedup_keys(client: RawClient) -> None:
    await client.ok("PUSH", queue="k", name="n", data=1, jobId="order-7",
                    uniqueKey="u1", timestamp=hour_ago())
    assert (await client.ok("Clean", queue="k", grace=0))["ids"] == ["order-7"]
    again = await client.ok("PUSH", queue="k", name="n", data=2, jobId="order-7")
    assert again["id"] == "order-7"
    fresh = await client.ok("PUSH", queue="k", name="n", data=3, uniqueKey="u1")
    assert fresh["id"] != "order-7"


async def test_clean_validation_errors(client: RawClient) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({}, "grace is required"),
        ({"grace": "soon"}, "grace must be a number"),
        ({"grace": -1}, "grace must be at least 0"),
        ({"grace": float("inf")}, "grace must be a finite number"),
        ({"grace": 0, "limit": 1.5}, "limit must be an integer"),
        ({"grace": 0, "limit": 0}, "limit must be at least 1"),
        ({"grace": 0, "limit": 100_001}, "limit must be at most 100000"),
        ({"grace": 0, "state": 3}, "state must be a string"),
    ]
    for fields, error in cases:
        reply = await client.call("Clean", queue="v", **fields)
        assert reply["ok"] is False and reply["error"] == error, fields
    missing = await client.call("Clean", grace=0)
    assert missing["error"] == "Queue name is required"


# ------------------------------------------------------------------ ListQueues


async def list_queues(client: RawClient) -> list[str]:
    reply = await client.ok("ListQueues")
    assert set(reply) <= {"ok", "reqId", "queues"}
    return list(reply["queues"])


async def test_list_queues_names_queues_that_hold_something(client: RawClient) -> None:
    assert await list_queues(client) == []
    await client.ok("PUSH", queue="live", name="n", data=1)
    await client.ok("Pause", queue="paused")  # a setting of its own
    await client.ok("GetJobCounts", queue="asked")  # merely asked about
    await client.ok("PUSH", queue="finished", name="n", data=1)
    await finish(client, "finished")
    assert await list_queues(client) == ["finished", "live", "paused"]
    await client.ok("Obliterate", queue="live")
    await client.ok("Resume", queue="paused")  # back to the defaults
    assert await list_queues(client) == ["finished"]


async def test_list_queues_after_a_restart(configure: Callable[..., Config],
                                           codec: str) -> None:
    config = configure()  # LMDB, in this test's directory
    async with trio.open_nursery() as nursery:
        first: Server = await nursery.start(Server(config).run)
        assert first.tcp_port is not None
        client = await RawClient.connect(first.tcp_port, codec)
        await client.ok("PUSH", queue="live", name="n", data=1)
        await client.ok("Pause", queue="paused")
        await client.ok("PUSH", queue="dead", name="n", data=1, maxAttempts=1)
        await finish(client, "dead", fail=True)
        await client.ok("GetJobCounts", queue="asked")
        before = await list_queues(client)
        await client.aclose()
        first.stop()
    assert before == ["dead", "live", "paused"]
    async with trio.open_nursery() as nursery:
        second: Server = await nursery.start(Server(config).run)
        assert second.tcp_port is not None
        client = await RawClient.connect(second.tcp_port, codec)
        assert await list_queues(client) == before
        await client.aclose()
        second.stop()


# ------------------------------------------------------------------ TrimEvents


async def test_trim_events_keeps_no_journal_and_checks_its_fields(
        client: RawClient) -> None:
    reply = await client.ok("TrimEvents", queue="t", maxLength=10)
    assert reply["data"] == {"removed": 0}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"queue": "t"}, "maxLength is required"),
        ({"queue": "t", "maxLength": -1}, "maxLength must be at least 0"),
        ({"queue": "t", "maxLength": 2.5}, "maxLength must be an integer"),
        ({"queue": "t", "maxLength": "ten"}, "maxLength must be a number"),
        ({"maxLength": 1}, "Queue name is required"),
    ]
    for fields, error in cases:
        refused = await client.call("TrimEvents", **fields)
        assert refused["ok"] is False and refused["error"] == error, fields
    assert await list_queues(client) == []  # no queue was made for it


# ------------------------------------------------------------------ CompactMemory


async def test_compact_memory_frees_expired_results_and_stale_entries(
        start_server: Callable[..., Any], codec: str) -> None:
    # A window of 0: a result retained now is past its window from the next ms on.
    server: Server = await start_server(removed_result_retention_s=0)
    assert server.tcp_port is not None
    client = await RawClient.connect(server.tcp_port, codec)
    router = server.broker.router
    # A removed-on-complete result is retained for its window, then only takes room.
    await client.ok("PUSH", queue="m", name="n", data=1, removeOnComplete=True)
    done = await finish(client, "m")
    assert done in router.results.kept
    # Cancelled jobs leave their ready-heap entries (deleted lazily) and empty slots.
    ids = (await client.ok("PUSHB", queue="m", jobs=[{"name": "n", "data": i}
                                                      for i in range(3000)]))["ids"]
    for job_id in ids:
        await client.send("Cancel", id=job_id)
    for _ in ids:
        assert (await client.receive())["ok"] is True
    state = router.actors["m"].state
    assert state.order.sizes()[0] >= 3000
    reply = await client.ok("CompactMemory")
    freed = reply["freed"]
    assert freed["retainedResults"] == 1 and done not in router.results.kept
    assert freed["heapEntries"] >= 3000 and state.order.sizes()[0] == 0
    assert freed["bytes"] > 0 and freed["queues"] == len(router.actors)
    assert freed["gcObjects"] == 0  # no collection unless asked for
    # Nothing left to free: a second call frees nothing of the kind.
    again = (await client.ok("CompactMemory"))["freed"]
    assert again["retainedResults"] == 0 and again["heapEntries"] == 0
    # the queue still works
    await client.ok("PUSH", queue="m", name="n", data=1)
    assert (await client.ok("PULL", queue="m"))["job"] is not None
    await client.aclose()


async def test_compact_memory_with_no_queues(client: RawClient) -> None:
    reply = await client.ok("CompactMemory")
    assert reply["freed"]["queues"] == 0 and reply["freed"]["heapEntries"] == 0


# (the collection is the broker process's, whatever the codec or store: one pair by
# default, each a full collection of this long-lived process; the others under -m slow)
@pytest.mark.parametrize("codec", ["msgpack", pytest.param("cbor", marks=pytest.mark.slow)])
@pytest.mark.engines("lmdb", pytest.param("postgres", marks=pytest.mark.slow))
async def test_compact_memory_collects_cyclic_garbage_when_asked(client: RawClient) -> None:
    # The broker runs in this process: garbage made here is the broker's garbage.
    gc.collect()
    gc.disable()  # so that nothing but the command collects it
    try:
        for _ in range(10):
            cycle: list[Any] = []
            cycle.append(cycle)
        del cycle
        freed = (await client.ok("CompactMemory", gc=True))["freed"]
        assert freed["gcObjects"] >= 10
    finally:
        gc.enable()


async def test_clean_of_finished_jobs_on_a_store_that_blocks(
        nursery: trio.Nursery, tmp_path: Path, codec: str) -> None:
    # The pages and records are read off the trio thread (the actor's NeedData
    # rounds), each page's deletions committed before the next page is read.
    config = make_config(tmp_path, memory=True)
    store = FaultyStorage(MemoryStorage(), apply_blocks=True)
    server: Server = await nursery.start(Server(config, Broker(config, storage=store)).run)
    assert server.tcp_port is not None and server.broker.writer.off_thread
    client = await RawClient.connect(server.tcp_port, codec)
    await client.ok("PUSHB", queue="b", jobs=[{"name": "n", "data": i, "maxAttempts": 1}
                                               for i in range(230)])
    pulled = await client.ok("PULLB", queue="b", count=230, owner="w")
    for job, token in zip(pulled["jobs"][:30], pulled["tokens"], strict=False):
        await client.ok("FAIL", id=job["id"], token=token, error="x")
    rest = pulled["jobs"][30:]
    await client.ok("ACKB", ids=[j["id"] for j in rest], tokens=pulled["tokens"][30:])
    completed = await client.ok("Clean", queue="b", grace=0, state="completed")
    assert completed["count"] == 200
    failed = await client.ok("Clean", queue="b", grace=0, state="failed", limit=20)
    assert failed["ids"] == [j["id"] for j in pulled["jobs"][:20]]
    counts = (await client.ok("GetJobCounts", queue="b"))["counts"]
    assert counts["completed"] == 0 and counts["failed"] == 10
    assert await list_queues(client) == ["b"]
    await client.aclose()
    server.stop()
