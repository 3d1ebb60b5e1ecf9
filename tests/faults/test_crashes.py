"""Crashes: kill -9 during a write burst, a failing commit, SIGTERM under load.

Every test records what its clients sent and saw in a
:class:`~trioqueue.testing.history.History` and ends with the checker: no acknowledged
add lost, no job completed twice without a redelivery in between, no redelivery after
an acknowledged completion, every job terminal after the drain, counters never going
back; and, after each crash, the LMDB store must be consistent with itself.

CI runs a bounded sample (5 kill cycles); ``-m slow`` runs the long versions (50).
"""

from __future__ import annotations

import random
import signal
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.testing import RawClient
from trioqueue.testing.history import ACK, ADD, LOST, PULL, History, Op, check
from trioqueue.testing.pg_store_check import check_pg_store
from trioqueue.testing.process import FAULTY_SERVE, BrokerProcess
from trioqueue.testing.store_check import check_lmdb_store

QUEUE = "crash"
# How an error reply says the command may have been applied all the same.
AMBIGUOUS = "may or may not"
LOCK_TTL_MS = 10_000


class Lost(Exception):
    """The broker went away under a client."""


async def producer(history: History, port: int, name: str, prefix: str, count: int,
                   window: int, queue: str = QUEUE) -> None:
    """Pipelined PUSHes with custom ids (so an unknown outcome can be reconciled)."""
    client = await RawClient.connect(port)
    pending: dict[str, Op] = {}
    try:
        sent = 0
        while sent < count or pending:
            while sent < count and len(pending) < window:
                job_id = f"{prefix}-{sent}"
                op = history.invoke(name, ADD, job_id)
                pending[await client.send("PUSH", queue=queue, name="n", data=sent,
                                          jobId=job_id, backoff=0, maxAttempts=50)] = op
                sent += 1
            reply = await client.receive()
            op = pending.pop(reply["reqId"])
            if reply.get("ok"):
                history.ok(op, reply["id"])
            elif AMBIGUOUS in reply.get("error", ""):
                # (a cluster's forward lost with the broker it went to: it says so)
                history.unknown(op, reply["error"])
            else:
                history.fail(op, reply.get("error", ""))
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        pass
    finally:
        for op in pending.values():
            history.unknown(op, "connection lost")
        await client.aclose()


async def worker(history: History, port: int, name: str, stop: trio.Event,
                 queue: str = QUEUE) -> None:
    """PULLB under a lease, then ACKB: every delivery and completion is recorded; a
    lost connection ends the worker, recorded as a LOST op (its leases are then no
    longer a live holder's)."""
    client = await RawClient.connect(port)
    try:
        while not stop.is_set():
            pull = history.invoke(name, PULL)
            reply = await client.reply_to(await client.send(
                "PULLB", queue=queue, count=20, owner=name, lockTtl=LOCK_TTL_MS,
                timeout=100))
            history.ok(pull, None, count=len(reply.get("jobs") or []))
            jobs, tokens = reply.get("jobs") or [], reply.get("tokens") or []
            if not jobs:
                continue
            acks = []
            for job in jobs:
                delivery = history.invoke(name, PULL, job["id"])
                delivery.invoked_at = pull.invoked_at  # one PULLB delivered them all
                history.ok(delivery, job["id"], attempts=job["attempts"],
                           stallCount=job["stallCount"])
                acks.append(history.invoke(name, ACK, job["id"]))
            try:
                ack = await client.reply_to(await client.send(
                    "ACKB", ids=[j["id"] for j in jobs], tokens=tokens,
                    results=[j["data"] for j in jobs]))
            except BaseException:
                for op in acks:
                    history.unknown(op, "connection lost")
                raise
            ignored = set((ack.get("data") or {}).get("ignoredIndices") or [])
            for i, op in enumerate(acks):
                if ack.get("ok") and i not in ignored:
                    history.ok(op)
                else:
                    history.fail(op, ack.get("error") or "ignored")
    except (EOFError, trio.BrokenResourceError, trio.ClosedResourceError, OSError):
        history.ok(history.invoke(name, LOST))
    finally:
        await client.aclose()


def start_load(nursery: trio.Nursery, history: History, port: int, stop: trio.Event, *,
               prefix: str, producers: int, jobs: int, window: int, workers: int = 2) -> None:
    """``producers`` producers of ``jobs`` jobs each (``window`` in flight) and
    ``workers`` workers, recording into ``history``; the workers run until ``stop``."""
    for p in range(producers):
        nursery.start_soon(producer, history, port, f"producer-{p}", f"{prefix}p{p}", jobs,
                           window)
    for w in range(workers):
        nursery.start_soon(worker, history, port, f"worker-{w}", stop)


async def drain_and_read(history: History, port: int, queues: tuple[str, ...] = (QUEUE,)
                         ) -> dict[str, dict[str, Any] | None]:
    """Process every job that is left, then read every job the history names."""
    stop = trio.Event()
    client = await RawClient.connect(port)
    async with trio.open_nursery() as nursery:
        for queue in queues:
            nursery.start_soon(worker, history, port, f"drainer-{queue}", stop, queue)
        with trio.fail_after(60):
            for queue in queues:
                while True:
                    counts = (await client.ok("GetJobCounts", queue=queue))["counts"]
                    if not (counts["waiting"] or counts["delayed"] or counts["active"]
                            or counts["prioritized"]):
                        break
                    await trio.sleep(0.05)
        stop.set()
    final: dict[str, dict[str, Any] | None] = {}
    for job_id in sorted({op.job_id for op in history.ops if op.job_id is not None}):
        reply = await client.call("GetJob", id=job_id)
        final[job_id] = reply["job"] if reply.get("ok") else None
    await client.aclose()
    return final


async def kill_cycles(tmp_path: Path, cycles: int, seed: int,
                      storage_url: str | None = None) -> History:
    """``cycles`` kill -9s of a broker under load (on LMDB, or on PostgreSQL at
    ``storage_url``), the store checked after each, then the history."""
    rng = random.Random(seed)
    data = tmp_path / "data"
    broker = BrokerProcess(data, storage_url=storage_url)
    history = History()
    await broker.start()
    try:
        for cycle in range(cycles):
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                start_load(nursery, history, broker.tcp_port, stop, prefix=f"c{cycle}",
                           producers=4, jobs=400, window=32)
                # SIGKILL before any client closes its socket: a close first would let
                # the broker release the jobs cleanly and hide the crash path.
                code = await broker.kill_at_random(0.05, 0.6, rng)
                assert code == -signal.SIGKILL
                stop.set()
            history.pending_as_unknown("the broker was killed")
            problems = (check_lmdb_store(data) if storage_url is None
                        else check_pg_store(storage_url))
            assert problems == [], f"cycle {cycle}: {problems}"
            await broker.start()
        final = await drain_and_read(history, broker.tcp_port)
    finally:
        await broker.stop()
    result = check(history, final)
    result.assert_valid()
    assert result.stats["adds acknowledged"] > 0 and result.stats["deliveries"] > 0
    return history


async def test_kill_9_during_a_write_burst_loses_nothing_acknowledged(tmp_path: Path) -> None:
    await kill_cycles(tmp_path, cycles=5, seed=1)


@pytest.mark.slow
async def test_kill_9_fifty_times(tmp_path: Path) -> None:
    await kill_cycles(tmp_path, cycles=50, seed=2)


async def test_active_jobs_come_back_charged_after_a_kill(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "data")
    await broker.start()
    try:
        client = await RawClient.connect(broker.tcp_port)
        await client.ok("PUSHB", queue=QUEUE, jobs=[
            {"name": "n", "data": i, "customId": f"a{i}", "backoff": 0} for i in range(3)])
        pulled = await client.ok("PULLB", queue=QUEUE, count=2, owner="w", lockTtl=60_000)
        await broker.kill(signal.SIGKILL)
        await client.aclose()
        await broker.start()
        client = await RawClient.connect(broker.tcp_port)
        for job in pulled["jobs"]:
            after = (await client.ok("GetJob", id=job["id"]))["job"]
            assert (after["attempts"], after["stallCount"]) == (1, 1)
            assert after["state"] == "waiting"
        untouched = (await client.ok("GetJob", id="a2"))["job"]
        assert (untouched["attempts"], untouched["state"]) == (0, "waiting")
        await client.aclose()
    finally:
        await broker.stop()


async def test_a_failing_commit_stops_acknowledging_and_exits_3(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data, "--fail-commit-at", "40", entry=FAULTY_SERVE)
    history = History()
    await broker.start()
    async with trio.open_nursery() as nursery:
        for p in range(3):
            nursery.start_soon(producer, history, broker.tcp_port, f"producer-{p}",
                               f"f{p}", 300, 8)
        code = await broker.wait_exit()
    assert code == 3, broker.log.decode()
    assert b"injected failure of commit" in broker.log
    acked = history.by_kind(ADD, "ok")
    assert 0 < len(acked) < 900  # it stopped acknowledging at the failure
    assert check_lmdb_store(data) == []
    healthy = BrokerProcess(data)
    await healthy.start()
    try:
        final = await drain_and_read(history, healthy.tcp_port)
    finally:
        await healthy.stop()
    check(history, final).assert_valid()


async def test_sigterm_mid_burst_flushes_and_exits_in_time(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = BrokerProcess(data)
    history = History()
    await broker.start()
    async with trio.open_nursery() as nursery:
        for p in range(4):
            nursery.start_soon(producer, history, broker.tcp_port, f"producer-{p}",
                               f"t{p}", 2000, 64)
        stop = trio.Event()
        nursery.start_soon(worker, history, broker.tcp_port, "worker", stop)
        with trio.fail_after(20):  # mid-burst: once a good part is acknowledged
            while len(history.by_kind(ADD, "ok")) < 1000:
                await trio.sleep(0.01)
        with trio.fail_after(15):  # within the shutdown grace period (10 s) and startup
            code = await broker.kill(signal.SIGTERM)
        stop.set()
    assert code == 0, broker.log.decode()
    assert check_lmdb_store(data) == []
    history.pending_as_unknown("the broker stopped")
    again = BrokerProcess(data)
    await again.start()
    try:
        final = await drain_and_read(history, again.tcp_port)
    finally:
        await again.stop()
    check(history, final).assert_valid()
