"""A pause of the broker itself (SIGSTOP, a frozen VM) does not take leases from the
workers that kept renewing them (issue 12, item 7).

Under trio's MockClock a ``jump`` is such a pause: the clock moves and nothing runs.
When the broker runs again, every lock of these tests is past its deadline, and the
timers that fired late compete with the heartbeats that waited in the sockets; the
pause watch holds lock expiry for ``lease_grace_after_pause_s``, so the heartbeats
are applied first. A holder that does not renew still loses its jobs, after the grace.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from trioqueue.testing import RawClient

QUEUE = "paused"
GRACE_S = 5.0
LOCK_TTL_MS = 30_000


async def take(client: RawClient, owner: str, count: int) -> tuple[list[str], list[str]]:
    got = await client.ok("PULLB", queue=QUEUE, count=count, owner=owner,
                          lockTtl=LOCK_TTL_MS)
    return [j["id"] for j in got["jobs"]], got["tokens"]


async def states(client: RawClient, ids: list[str]) -> list[str]:
    return [(await client.ok("GetState", id=i))["state"] for i in ids]


async def test_a_broker_pause_keeps_the_jobs_of_a_worker_that_renews(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True, lease_grace_after_pause_s=GRACE_S)
    producer = await RawClient.connect(server.tcp_port)
    await producer.ok("PUSHB", queue=QUEUE,
                      jobs=[{"name": "n", "data": i, "backoff": 0} for i in range(12)])
    worker = await RawClient.connect(server.tcp_port)
    silent = await RawClient.connect(server.tcp_port)
    kept, tokens = await take(worker, "worker", 8)
    lost, lost_tokens = await take(silent, "silent", 4)
    for _ in range(5):  # both renew every second, until the broker stops
        await trio.sleep(1)
        for client, ids, toks in ((worker, kept, tokens), (silent, lost, lost_tokens)):
            beat = await client.ok("JobHeartbeatB", ids=ids, tokens=toks)
            assert beat["data"]["count"] == len(ids)

    autojump_clock.jump(40)  # the broker is stopped for 40 s: every lease ran out
    resumed = trio.current_time()

    # The worker's heartbeat (it waited in the socket) renews all 8, its ACKs hold.
    beat = await worker.ok("JobHeartbeatB", ids=kept, tokens=tokens)
    assert beat["data"]["count"] == len(kept)
    acked = await worker.ok("ACKB", ids=kept, tokens=tokens, results=["once"] * len(kept))
    assert "ignoredIds" not in acked.get("data", {})
    assert await states(producer, kept) == ["completed"] * len(kept)

    # The silent holder keeps its locks through the grace, and loses them after it.
    await trio.sleep_until(resumed + GRACE_S - 0.1)
    assert await states(producer, lost) == ["active"] * len(lost)
    await trio.sleep_until(resumed + GRACE_S + 0.1)
    assert await states(producer, lost) == ["waiting"] * len(lost)
    job = (await producer.ok("GetJob", id=lost[0]))["job"]
    assert (job["attempts"], job["stallCount"]) == (1, 1)
    again, _ = await take(worker, "worker", 10)
    assert sorted(again) == sorted(lost)  # delivered again, once
    late = await silent.call("ACK", id=lost[0], token=lost_tokens[0], result="stale")
    assert late["ok"] is False  # its old token is fenced off


async def test_without_a_pause_an_idle_broker_expires_leases_on_time(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    """The watch runs all along, so a quiet broker is not taken for a paused one: a lease
    nobody renews ends at its ttl, with no grace added."""
    server = await start_server(memory=True, lease_grace_after_pause_s=GRACE_S)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue=QUEUE, name="n", data=1, jobId="idle", backoff=0)
    started = trio.current_time()
    await take(client, "w", 1)
    await trio.sleep_until(started + LOCK_TTL_MS / 1000 - 0.1)
    assert await states(client, ["idle"]) == ["active"]
    await trio.sleep_until(started + LOCK_TTL_MS / 1000 + 0.1)
    assert await states(client, ["idle"]) == ["waiting"]
