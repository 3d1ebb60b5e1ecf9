"""A queue actor serves a long backlog a part per step (STEP_BUDGET_MS), so one read of
thousands of pipelined frames does not hold every other queue for one long step; the
replies still come back complete and in order."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.actors import queue_actor
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import StepCounter


async def test_a_pipelined_burst_is_served_in_parts_in_order(
    start_server: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_actor, "STEP_BUDGET_MS", 0)  # every BUDGET_EVERY commands
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue="burst", name="j", data={})  # the actor exists
    n = 20 * queue_actor.BUDGET_EVERY
    steps = StepCounter("queue:burst")
    trio.lowlevel.add_instrument(steps)
    try:
        await client.send_raw(b"".join(
            client.frame({"cmd": "PUSH", "reqId": i, "queue": "burst", "name": "j",
                          "data": {"i": i}}) for i in range(n)))
        replies = [await client.receive() for _ in range(n)]
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert [r["reqId"] for r in replies] == list(range(n))
    assert all(r["ok"] for r in replies)
    assert steps.steps >= n // queue_actor.BUDGET_EVERY // 2  # served in parts
    jobs = (await client.ok("GetJobs", queue="burst", state="waiting", limit=n + 1))["jobs"]
    assert sorted(j["data"].get("i", -1) for j in jobs) == [-1, *range(n)]


async def test_commands_behind_long_work_in_one_read_wait_for_it(
    start_server: Callable[..., Any],
) -> None:
    """Large PUSHBs (long work, admitted in slices) and a Drain pipelined in one write
    with plain commands behind them: each long command finishes before the next
    command of its queue runs, so every reply comes, in order, and the counts show
    the commands applied in that order (the Drain empties what came before it only)."""
    server = await start_server()
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue="long", name="j", data={})  # the actor exists
    big = [{"data": i} for i in range(450)]
    frames = [
        {"cmd": "PUSHB", "reqId": 0, "queue": "long", "jobs": big},
        {"cmd": "PUSHB", "reqId": 1, "queue": "long", "jobs": big},
        {"cmd": "Drain", "reqId": 2, "queue": "long"},
        {"cmd": "PUSHB", "reqId": 3, "queue": "long", "jobs": big},
        {"cmd": "PUSH", "reqId": 4, "queue": "long", "name": "j", "data": {}},
    ]
    await client.send_raw(b"".join(client.frame(f) for f in frames))
    with trio.fail_after(10):
        replies = [await client.receive() for _ in frames]
    assert [r["reqId"] for r in replies] == [0, 1, 2, 3, 4]
    assert all(r["ok"] for r in replies), replies
    assert [len(r["ids"]) for r in (replies[0], replies[1], replies[3])] == [450] * 3
    counts = (await client.ok("GetJobCounts", queue="long"))["counts"]
    assert counts["waiting"] == 451
