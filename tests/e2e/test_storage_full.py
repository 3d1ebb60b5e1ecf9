"""Full storage over TCP: a tiny store refuses new jobs, retriably, and keeps serving.

Each test runs against LMDB with a 2 MiB map (512 KiB kept in reserve) and against the
memory store with a 1 MiB limit (256 KiB reserve). "Full" is reached by pushing until
the broker refuses, never by timing. What is checked (docs/durability.md, "Full
storage"):

- the refusal is an ``{ok: false, error: "Storage full..."}`` reply, for PUSH, PUSHB
  (the whole batch), PUSHF and MoveToWait of a dead-lettered job; the broker keeps
  serving and its writer never failed;
- a refused job does not exist (GetJob, counts), every acknowledged one does;
- PULL, ACK and FAIL of existing jobs work while full, and every accepted job can be
  pulled and finished (acknowledged with a result, or dead-lettered with its stack)
  without a commit failing for lack of space;
- ACK with removeOnComplete, or Obliterate, frees space and new jobs are taken again;
- LMDB: a broker restarted on the full store has every acknowledged change.
"""

from __future__ import annotations

import argparse
import hashlib
import os
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from trioqueue.cli import build_parser, config_from
from trioqueue.config import DEFAULT_LMDB_MAX_BYTES, MIB, Config, default_reserve_bytes
from trioqueue.core.errors import STORAGE_FULL
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.small_disk import CannotMount, small_tmpfs

# store limits are LMDB's and the memory store's (PostgreSQL refuses them: test_postgres.py)
pytestmark = pytest.mark.engines("lmdb")

KIB = 1024
StartServer = Callable[..., Any]

LIMITS: dict[str, dict[str, Any]] = {
    "lmdb": {"store_max_bytes": 2 * MIB, "store_reserve_bytes": 512 * KIB},
    "memory": {"memory": True, "store_max_bytes": 1 * MIB, "store_reserve_bytes": 256 * KIB},
}
PAD = "x" * 200  # small records: no LMDB overflow pages, so no free-list fragmentation
BATCH = 50


@pytest.fixture(params=sorted(LIMITS))
def limits(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(LIMITS[request.param])


def job(custom_id: str) -> dict[str, Any]:
    return {"name": "j", "data": {"pad": PAD}, "customId": custom_id}


def is_full(reply: dict[str, Any]) -> bool:
    return reply.get("ok") is False and reply.get("error") == STORAGE_FULL


async def fill_with_batches(client: RawClient, queue: str,
                            prefix: str) -> tuple[list[str], list[str]]:
    """PUSHB batches until one is refused: (ids acknowledged, ids of the refused batch)."""
    accepted: list[str] = []
    for n in range(10_000):
        ids = [f"{prefix}{n}-{i}" for i in range(BATCH)]
        reply = await client.call("PUSHB", queue=queue, jobs=[job(i) for i in ids])
        if not reply["ok"]:
            assert is_full(reply), reply
            return accepted, ids
        assert reply["ids"] == ids
        accepted.extend(ids)
    raise AssertionError("the store never filled up")


async def fill_with_pushes(client: RawClient, queue: str, prefix: str,
                           data: Any = None) -> tuple[list[str], str]:
    """Single PUSHes until one is refused: (ids acknowledged, the refused id)."""
    accepted: list[str] = []
    for n in range(100_000):
        job_id = f"{prefix}{n}"
        reply = await client.call("PUSH", queue=queue, name="j",
                                  data={"pad": PAD} if data is None else data, jobId=job_id)
        if not reply["ok"]:
            assert is_full(reply), reply
            return accepted, job_id
        assert reply["id"] == job_id
        accepted.append(job_id)
    raise AssertionError("the store never filled up")


async def fill(client: RawClient, queue: str) -> list[str]:
    """Fill the store to the last small job (with a one-letter id, no data, the
    smallest a job can be); returns every acknowledged id."""
    accepted, refused_batch = await fill_with_batches(client, queue, "b")
    await assert_missing(client, refused_batch)  # the whole batch, not a prefix of it
    singles, refused = await fill_with_pushes(client, queue, "s")
    await assert_missing(client, [refused])
    tiny, refused = await fill_with_pushes(client, queue, "t", data={})
    await assert_missing(client, [refused])
    return accepted + singles + tiny


async def work(client: RawClient, queue: str, n: int) -> list[str]:
    """PULL and ACK (keeping a result) ``n`` jobs, one at a time: the ids."""
    done: list[str] = []
    for _ in range(n):
        pulled = await client.ok("PULL", queue=queue, timeout=0, owner="w")
        job_id = pulled["job"]["id"]
        await client.ok("ACK", id=job_id, token=pulled["token"], result={"n": len(done)})
        done.append(job_id)
    return done


async def assert_missing(client: RawClient, ids: list[str]) -> None:
    for job_id in ids:
        reply = await client.call("GetJob", id=job_id)
        assert reply == {"ok": False, "error": "Job not found", "reqId": reply["reqId"]}


async def queued_ids(client: RawClient, queue: str) -> set[str]:
    jobs = (await client.ok("GetJobs", queue=queue, state=["waiting", "delayed"],
                            limit=100_000))["jobs"]
    return {j["id"] for j in jobs}


async def counts(client: RawClient, queue: str) -> dict[str, int]:
    result: dict[str, int] = (await client.ok("GetJobCounts", queue=queue))["counts"]
    return result


async def connect(server: Server) -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port)


async def test_a_full_store_refuses_new_jobs_and_serves_existing_ones(
    start_server: StartServer, limits: dict[str, Any]
) -> None:
    server = await start_server(**limits)
    client = await connect(server)
    # a dead-lettered job, to revive later
    await client.ok("PUSH", queue="q", name="j", data={}, jobId="dead", maxAttempts=1)
    assert (await client.ok("PULL", queue="q", timeout=0))["job"]["id"] == "dead"
    await client.ok("FAIL", id="dead", error="boom")

    accepted = await fill(client, "q")
    assert len(accepted) > 100
    assert await queued_ids(client, "q") == set(accepted)  # every acknowledged job
    assert (await counts(client, "q"))["waiting"] == len(accepted)

    # Full: new jobs of every kind are refused, however small, and leave no trace.
    assert is_full(await client.call("PUSH", queue="q", name="j", data={}, jobId="late"))
    assert is_full(await client.call("PUSHB", queue="other", jobs=[job("o1")]))
    assert is_full(await client.call("MoveToWait", id="dead"))
    assert (await client.ok("GetState", id="dead"))["state"] == "failed"
    flow = [{"id": "fp", "queue": "f", "input": {"name": "p", "data": {}}}]
    assert is_full(await client.call("PUSHF", jobs=flow))
    await assert_missing(client, ["late", "o1", "fp"])

    # The broker keeps serving existing jobs while full: PULL, ACK, FAIL, their writes
    # going into the room held back for them.
    await client.ok("Ping")
    acked = await work(client, "q", 20)
    assert (await client.ok("GetResult", id=acked[0]))["result"] == {"n": 0}
    failing = await client.ok("PULL", queue="q", timeout=0, owner="w")
    await client.ok("FAIL", id=failing["job"]["id"], token=failing["token"], error="no")
    assert (await client.ok("GetState", id=failing["job"]["id"]))["state"] == "delayed"
    assert not server.broker.writer.failed
    now = await counts(client, "q")
    assert (now["waiting"], now["delayed"]) == (len(accepted) - len(acked) - 1, 1)
    assert now["completed"] == len(acked)

    # Space returns: completing jobs with removeOnComplete deletes them...
    pulled = (await client.ok("PULLB", queue="q", count=300, timeout=0))["jobs"]
    done = [j["id"] for j in pulled]
    reply = await client.ok("ACKB", ids=done, removeOnCompletes=[True] * len(done))
    assert "data" not in reply  # none ignored
    await assert_missing(client, done[:5])
    # ...and new jobs are taken again, the dead letter can be revived.
    await client.ok("PUSH", queue="q", name="j", data={}, jobId="late")
    await client.ok("MoveToWait", id="dead")
    assert (await client.ok("GetState", id="dead"))["state"] == "waiting"

    left = set(accepted) - {*acked, *done}
    assert await queued_ids(client, "q") == left | {"late", "dead"}  # nothing lost

    # Obliterate frees everything: the store takes as much again.
    await client.ok("Obliterate", queue="q")
    again, _ = await fill_with_batches(client, "q", "again")
    assert len(again) >= len(accepted) // 2
    assert not server.broker.writer.failed


RESULT = {"summary": "r" * 600}  # within the default finish allowance (1 KiB)
STACK = [f"  File \"worker.py\", line {n}, in step_{n}" for n in range(10)]


async def test_every_accepted_job_can_be_finished_from_a_full_store(
    start_server: StartServer, limits: dict[str, Any]
) -> None:
    """Issue 12: fill the store with ~1 KB jobs until new ones are refused, then pull
    them in large batches (their records grow while active) and finish every one:
    95% acknowledged with a result, 5% failed for good with an error and a stack
    trace (dead-lettered). No commit may fail for lack of space on the way."""
    server = await start_server(**limits)
    client = await connect(server)
    pad = "d" * 1000
    accepted: list[str] = []
    for _ in range(10_000):
        reply = await client.call("PUSHB", queue="q", jobs=[
            {"name": "j", "data": {"pad": pad}, "maxAttempts": 1} for _ in range(20)])
        if not reply["ok"]:
            assert is_full(reply), reply
            break
        accepted.extend(reply["ids"])
    assert len(accepted) >= 60, "the store should take some jobs"
    failed = 0
    finished = 0
    while finished < len(accepted):
        reply = await client.ok("PULLB", queue="q", count=100, timeout=0, owner="w")
        assert reply["jobs"], f"{len(accepted) - finished} accepted jobs are missing"
        for pulled, token in zip(reply["jobs"], reply["tokens"], strict=True):
            if finished % 20 == 7:
                await client.ok("FAIL", id=pulled["id"], token=token,
                                error="ValueError: bad input", stack=STACK)
                failed += 1
            else:
                await client.ok("ACK", id=pulled["id"], token=token, result=RESULT)
            finished += 1
    assert not server.broker.writer.failed
    now = await counts(client, "q")
    assert (now["completed"], now["failed"]) == (len(accepted) - failed, failed)
    assert (now["waiting"], now["active"]) == (0, 0)
    storage = server.broker.storage
    assert storage.max_bytes is not None and storage.used_bytes() <= storage.max_bytes


async def test_a_pipelined_burst_is_cut_cleanly(
    start_server: StartServer, limits: dict[str, Any]
) -> None:
    """Many pushes in one read form one actor batch, measured once: every reply says
    exactly what happened to its job, and the broker never overruns its store."""
    server = await start_server(**limits)
    client = await connect(server)
    await fill_with_batches(client, "q", "b")
    ids = [f"burst{i}" for i in range(400)]
    await client.send_raw(b"".join(
        client.frame({"cmd": "PUSH", "reqId": job_id, "queue": "q", "name": "j",
                      "data": {"pad": PAD}, "jobId": job_id}) for job_id in ids))
    replies: dict[str, dict[str, Any]] = {}
    while len(replies) < len(ids):
        reply = await client.receive()
        replies[reply["reqId"]] = reply
    taken = [job_id for job_id in ids if replies[job_id]["ok"]]
    refused = [job_id for job_id in ids if not replies[job_id]["ok"]]
    assert refused, "the burst should not all fit"
    assert all(is_full(replies[job_id]) for job_id in refused)
    assert await queued_ids(client, "q") >= set(taken)
    await assert_missing(client, refused)
    assert not server.broker.writer.failed


@asynccontextmanager
async def running(tmp_path: Path, **overrides: Any) -> AsyncIterator[Server]:
    """A broker that is fully stopped (store closed) when the block ends, so another
    can open the same LMDB directory (LMDB forbids two opens in one process)."""
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0,
                    data_dir=str(tmp_path / "restart"), fsync="never")
    for key, value in overrides.items():
        setattr(config, key, value)
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(Server(config).run)
        try:
            yield server
        finally:
            server.stop()


async def test_a_restart_on_a_full_lmdb_store_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    limits = LIMITS["lmdb"]
    async with running(tmp_path, **limits) as server:
        client = await connect(server)
        accepted = await fill(client, "q")
        done = await work(client, "q", 20)
        await client.aclose()
    async with running(tmp_path, **limits) as server:
        client = await connect(server)
        assert await queued_ids(client, "q") == set(accepted) - set(done)
        for n, job_id in enumerate(done):
            assert (await client.ok("GetResult", id=job_id))["result"] == {"n": n}
        # full again once filled after the restart, and still retriable
        await fill_with_pushes(client, "q", "after-restart")
        await client.ok("Obliterate", queue="q")
        await client.ok("PUSH", queue="q", name="j", data={}, jobId="after")
        await client.aclose()
    async with running(tmp_path, **limits) as server:
        client = await connect(server)
        assert await queued_ids(client, "q") == {"after"}
        await client.aclose()


# ------------------------------------------------------------------ configuration


def test_default_reserve() -> None:
    assert default_reserve_bytes(DEFAULT_LMDB_MAX_BYTES) == DEFAULT_LMDB_MAX_BYTES // 32
    assert default_reserve_bytes(128 * MIB) == 8 * MIB
    assert default_reserve_bytes(12 * MIB) == 768 * KIB  # a sixteenth of a small store
    config = Config()
    assert config.store_limit_bytes() == DEFAULT_LMDB_MAX_BYTES
    assert Config(memory=True).store_limit_bytes() is None


@pytest.mark.parametrize("overrides", [
    {"store_max_bytes": 0},
    {"store_reserve_bytes": -1},
    {"store_max_bytes": 2 * MIB, "store_reserve_bytes": 2 * MIB},
    {"memory": True, "store_max_bytes": MIB, "store_reserve_bytes": 2 * MIB},
])
def test_invalid_limits_are_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Config(**overrides).validate()


def test_a_reserve_without_a_memory_limit_is_ignored() -> None:
    Config(memory=True, store_reserve_bytes=10 * MIB).validate()


def parse(argv: list[str], env: dict[str, str] | None = None) -> Config:
    args: argparse.Namespace = build_parser().parse_args(["serve", *argv])
    return config_from(args, env or {})


def test_flags_and_environment() -> None:
    config = parse(["--store-max-bytes", "2GiB", "--store-reserve-bytes", "65536"])
    assert (config.store_max_bytes, config.store_reserve_bytes) == (2 << 30, 65536)
    env = {"TRIOQUEUE_STORE_MAX_BYTES": "512M", "TRIOQUEUE_STORE_RESERVE_BYTES": "1k"}
    config = parse([], env)
    assert (config.store_max_bytes, config.store_reserve_bytes) == (512 * MIB, KIB)
    assert parse(["--store-max-bytes", "3MiB"], env).store_max_bytes == 3 * MIB  # flag wins
    assert parse([]).store_max_bytes is None
    for bad in ("lots", "-1", "1.5GiB", "2PB", ""):
        with pytest.raises(SystemExit):
            parse(["--store-max-bytes", bad])


def test_the_disk_reserve_flag_and_variable() -> None:
    assert parse([]).disk_reserve_bytes is None
    assert parse(["--disk-reserve-bytes", "256MiB"]).disk_reserve_bytes == 256 * MIB
    env = {"TRIOQUEUE_DISK_RESERVE_BYTES": "0"}
    assert parse([], env).disk_reserve_bytes == 0
    with pytest.raises(SystemExit):
        parse(["--disk-reserve-bytes", "lots"])


def test_the_finish_allowance_flag_and_variable() -> None:
    assert Config().store_finish_allowance_bytes == KIB
    assert parse(["--store-finish-allowance-bytes", "2KiB"]).store_finish_allowance_bytes == 2 * KIB
    env = {"TRIOQUEUE_STORE_FINISH_ALLOWANCE_BYTES": "300"}
    assert parse([], env).store_finish_allowance_bytes == 300
    with pytest.raises(ValueError):
        Config(store_finish_allowance_bytes=-1).validate()


# ------------------------------------------------- what a small store admits (issue 40)

SMALL = {"store_max_bytes": 12 * MIB}  # LMDB, the default reserve (768 KiB)
KB_PAD = "d" * 1000  # a ~1 KB job


async def fill_1kb(client: RawClient, queue: str, **options: Any) -> list[str]:
    """PUSHB 20 ~1 KB jobs at a time until refused: the ids acknowledged."""
    accepted: list[str] = []
    for _ in range(10_000):
        reply = await client.call("PUSHB", queue=queue, jobs=[
            {"name": "j", "data": {"pad": KB_PAD}, **options} for _ in range(20)])
        if not reply["ok"]:
            assert is_full(reply), reply
            return accepted
        accepted.extend(reply["ids"])
    raise AssertionError("the store never filled up")


async def drain(client: RawClient, queue: str, finish: Callable[..., Any]) -> int:
    """PULLB 100 at a time until the queue is empty, each job handed to ``finish``."""
    done = 0
    for _ in range(10_000):
        reply = await client.ok("PULLB", queue=queue, count=100, timeout=0, owner="w")
        if not reply["jobs"]:
            return done
        for pulled, token in zip(reply["jobs"], reply["tokens"], strict=True):
            await finish(pulled["id"], token)
            done += 1
    raise AssertionError("the queue never emptied")


@pytest.mark.parametrize("how", ["ack", "dlq", "retried"])
async def test_a_12_mib_store_takes_an_eighth_of_itself_in_1kb_jobs_and_finishes_them(
    start_server: StartServer, how: str
) -> None:
    """At least 12 MiB / 8 of ~1 KB jobs are admitted (the claims of live jobs are what
    they can really still write), and every one of them can then be pulled and
    finished without a commit failing: acknowledged with a result, failed into the DLQ
    with an error and a stack trace, or failed once, retried and acknowledged."""
    server = await start_server(**SMALL)
    client = await connect(server)
    accepted = await fill_1kb(client, "q", maxAttempts=2 if how == "retried" else 1,
                              backoff=0)
    assert len(accepted) >= 12 * MIB // 8 // KIB, len(accepted)

    failed_once: set[str] = set()

    async def finish(job_id: str, token: str) -> None:
        if how == "ack" or job_id in failed_once:
            await client.ok("ACK", id=job_id, token=token, result=RESULT)
        else:
            await client.ok("FAIL", id=job_id, token=token,
                            error="ValueError: bad input", stack=STACK)
            if how == "retried":  # back to waiting at once (no backoff)
                failed_once.add(job_id)

    finished = await drain(client, "q", finish)
    assert finished == len(accepted) * (2 if how == "retried" else 1)
    now = await counts(client, "q")
    kept = "failed" if how == "dlq" else "completed"
    assert now[kept] == len(accepted)
    assert (now["waiting"], now["active"], now["delayed"]) == (0, 0, 0)
    assert not server.broker.writer.failed


async def test_bulk_retry_dlq_and_retry_completed_go_through_admission(
    start_server: StartServer,
) -> None:
    """Bulk RetryDlq and RetryCompleted make live jobs again: on a full store they
    stop at the limit with the retriable error (they used to revive every entry past
    it), and whatever they did revive can still be finished."""
    server = await start_server(**SMALL)
    client = await connect(server)
    done = await fill_1kb(client, "done")

    async def ack(job_id: str, token: str) -> None:
        await client.ok("ACK", id=job_id, token=token, result=RESULT)

    assert await drain(client, "done", ack) == len(done)
    dead = (await client.ok("PUSHB", queue="dead", jobs=[
        {"name": "j", "data": {"pad": KB_PAD}, "maxAttempts": 1} for _ in range(100)]))["ids"]

    async def bury(job_id: str, token: str) -> None:
        await client.ok("FAIL", id=job_id, token=token, error="no")

    assert await drain(client, "dead", bury) == len(dead)
    await fill_1kb(client, "live")
    await fill_with_pushes(client, "live", "t", data={})  # no room for one more job
    assert is_full(await client.call("RetryCompleted", queue="done"))
    assert is_full(await client.call("RetryDlq", queue="dead"))
    assert (await counts(client, "done"))["waiting"] == 0
    assert (await counts(client, "dead"))["waiting"] == 0
    # With room for some: a bulk retry takes what fits and says the rest was refused.
    await client.ok("Obliterate", queue="live")
    reply = await client.call("RetryCompleted", queue="done")
    assert is_full(reply), reply
    revived = (await counts(client, "done"))["waiting"]
    assert 0 < revived < len(done)
    assert await drain(client, "done", ack) == revived
    assert not server.broker.writer.failed


async def test_an_ack_that_would_admit_a_repeat_successor_is_refused_while_full(
    start_server: StartServer,
) -> None:
    server = await start_server(**LIMITS["lmdb"])
    client = await connect(server)
    gen1 = (await client.ok("PUSH", queue="r", name="tick", data={},
                            repeat={"every": 60_000}))["id"]
    pulled = await client.ok("PULL", queue="r", timeout=0, owner="w")
    assert pulled["job"]["id"] == gen1
    await fill(client, "q")  # to the last small job
    refused = await client.call("ACK", id=gen1, token=pulled["token"])
    assert is_full(refused), refused
    assert (await client.ok("GetState", id=gen1))["state"] == "active"  # retriable
    await client.ok("Obliterate", queue="q")
    await client.ok("ACK", id=gen1, token=pulled["token"])
    assert (await counts(client, "r"))["delayed"] == 1  # the successor
    assert not server.broker.writer.failed


async def wait_for(predicate: Callable[[], Any], what: str, timeout_s: float = 10.0) -> None:
    """Poll ``predicate`` (a condition of the broker's state) until true, or fail."""
    with trio.move_on_after(timeout_s):
        while not await predicate():
            await trio.sleep(0.01)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def test_dlq_auto_retry_waits_for_room(start_server: StartServer) -> None:
    """The DLQ's auto-retry on a full store revives nothing (it used to run past the
    limit); the entries stay due and are retried once there is room."""
    server = await start_server(**LIMITS["lmdb"])
    client = await connect(server)
    dead = (await client.ok("PUSHB", queue="d", jobs=[
        {"name": "j", "data": {"pad": PAD}, "maxAttempts": 1} for _ in range(30)]))["ids"]
    for _ in dead:
        pulled = await client.ok("PULL", queue="d", timeout=0, owner="w")
        await client.ok("FAIL", id=pulled["job"]["id"], token=pulled["token"], error="no")
    await fill(client, "q")  # to the last small job
    actor = server.broker.router.actor("d")
    await client.ok("SetDlqConfig", queue="d",
                    config={"autoRetry": True, "autoRetryInterval": 50})

    async def tried() -> bool:  # held back for room (now), or revived (before)
        waiting = (await counts(client, "d"))["waiting"]
        return waiting > 0 or actor.state.dlq.retries_held_until > 0

    await wait_for(tried, "an auto-retry")
    assert (await counts(client, "d"))["waiting"] == 0
    assert (await client.ok("GetDlqStats", queue="d"))["data"]["stats"]["total"] == len(dead)
    await client.ok("Obliterate", queue="q")

    async def retried() -> bool:
        return bool((await counts(client, "d"))["waiting"] == len(dead))

    await wait_for(retried, "the entries retried once there is room")
    assert not server.broker.writer.failed


async def test_a_cron_firing_refused_for_space_is_retried_and_logged_once(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Cron firings go through admission: on a full store they are refused (they used
    to push past the limit until the broker stopped), not counted, tried again at the
    next tick, logged once; once there is room the schedule fires again."""
    server = await start_server(**LIMITS["lmdb"], cron_full_retry_ms=50,
                                cron_min_interval_ms=100)
    client = await connect(server)
    scheduler = server.broker.scheduler
    assert scheduler is not None
    answers: list[dict[str, Any]] = []
    answered = scheduler.answered

    def counting(firing: Any, reply: dict[str, Any]) -> None:
        answers.append(reply)
        answered(firing, reply)

    scheduler.answered = counting  # type: ignore[method-assign]
    big = {"pad": "c" * 100_000}  # each firing a large job: past the reserve fast
    # Stored before the store fills (a Cron is admitted by its size, as a push is); it
    # fires while the store fills, then is refused.
    await client.ok("Cron", name="c", queue="cq", repeatEvery=100, data=big,
                    preventOverlap=False)
    await fill_with_batches(client, "q", "b")

    async def refused_thrice() -> bool:
        return sum(1 for a in answers if is_full(a)) >= 3 or server.broker.writer.failed

    await wait_for(refused_thrice, "three refused firings")
    assert not server.broker.writer.failed
    pushed = (await counts(client, "cq"))["waiting"]
    assert (await client.ok("CronGet", name="c"))["cron"]["executions"] == pushed
    assert sum("cron c: a firing was refused" in r.message for r in caplog.records) == 1
    await client.ok("Obliterate", queue="q")

    async def fired() -> bool:
        return bool((await counts(client, "cq"))["waiting"] > pushed)

    await wait_for(fired, "a firing once there is room")
    assert not server.broker.writer.failed


async def test_a_20_mb_rest_push_gets_a_4xx_not_a_crash(start_server: StartServer) -> None:
    """One REST push of 20 MB into a 12 MiB store: counted by its body's size, as a TCP
    frame is, and refused with a clear 4xx; the broker keeps serving."""
    server = await start_server(**SMALL)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{server.ws_port}",
                                 timeout=30.0) as http:
        reply = await http.post("/queues/q/jobs",
                                json={"name": "big", "data": {"pad": "z" * (20 << 20)}})
        assert 400 <= reply.status_code < 500, reply.text
        assert reply.json()["ok"] is False
        ok = await http.post("/queues/q/jobs", json={"name": "small", "data": {}})
        assert ok.status_code == 200, ok.text
    assert not server.broker.writer.failed


# ------------------------------------------------------- a disk that fills (issue 40)

DISK_BYTES = 16 * MIB


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs for this test; skipped, saying why, where mounting is not
    permitted."""
    try:
        with small_tmpfs(tmp_path / "disk", DISK_BYTES) as mount_point:
            yield mount_point
    except CannotMount as exc:
        pytest.skip(str(exc))


async def test_a_disk_that_fills_refuses_new_jobs_and_every_admitted_one_finishes(
    small_disk: Path,
) -> None:
    """No store maximum is set (LMDB's 1 TiB default), but the data directory's file
    system holds 16 MiB: pushes are refused with the retriable ``Storage full`` before
    the disk runs out (the broker used to stop on a failed commit), and every job
    admitted can then be pulled and finished, 90% acknowledged with a result, 10%
    failed into the DLQ with an error and a stack trace, the broker alive throughout.
    Removing jobs makes room again."""
    with trio.fail_after(120):
        async with running(small_disk, data_dir=str(small_disk / "data")) as server:
            assert server.broker.storage.max_bytes == DEFAULT_LMDB_MAX_BYTES
            client = await connect(server)
            accepted = await fill_1kb(client, "q", maxAttempts=1)
            singles, refused = await fill_with_pushes(client, "q", "s")
            await assert_missing(client, [refused])
            accepted += singles
            # a disk of 16 MiB takes at least a third of what a 16 MiB store would
            assert len(accepted) >= 16 * MIB // 8 // 1024 // 3, len(accepted)
            vfs = os.statvfs(small_disk)
            assert vfs.f_bavail * vfs.f_frsize > 0  # refused before the disk was full

            failed = 0

            async def finish(job_id: str, token: str) -> None:
                nonlocal failed
                if int(hashlib.sha1(job_id.encode()).hexdigest(), 16) % 10 == 0:
                    await client.ok("FAIL", id=job_id, token=token,
                                    error="ValueError: bad input", stack=STACK)
                    failed += 1
                else:
                    await client.ok("ACK", id=job_id, token=token, result=RESULT)

            assert await drain(client, "q", finish) == len(accepted)
            assert not server.broker.writer.failed
            now = await counts(client, "q")
            assert (now["completed"], now["failed"]) == (len(accepted) - failed, failed)
            assert failed > 0
            dead = (await client.ok("Dlq", queue="q", count=failed + 1))["jobs"]
            assert len(dead) == failed

            await client.ok("Obliterate", queue="q")  # space returns
            await client.ok("PUSH", queue="q", name="j", data={}, jobId="after")
            assert not server.broker.writer.failed
            await client.aclose()
