"""A queue actor sizes the slices of its long work from what they cost: past
``Config.slice_budget_ms`` the next slices take fewer jobs, under half of it more again,
and the work's result is the same whatever the size."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import trio

from trioqueue.actors.slice_budget import resized
from trioqueue.cli import build_parser, config_from
from trioqueue.config import Config
from trioqueue.core.queue import lifecycle, slices
from trioqueue.testing import RawClient
from trioqueue.testing.tasks import StepCounter

MOST = slices.SLICE_JOBS


def test_a_slice_past_the_budget_makes_the_next_ones_proportionally_smaller() -> None:
    assert resized(0, MOST, 0.008, 0.002) == MOST // 4  # 0: not measured yet, so MOST
    assert resized(40, MOST, 0.004, 0.002) == 20
    assert resized(8, MOST, 1.0, 0.002) == slices.MIN_SLICE_JOBS  # never below the floor


def test_quick_slices_grow_back_a_quarter_at_a_time_up_to_the_most() -> None:
    assert resized(40, MOST, 0.0005, 0.002) == 50
    assert resized(5, MOST, 0.0, 0.002) == 6
    assert resized(MOST - 1, MOST, 0.0, 0.002) == MOST
    assert resized(0, MOST, 0.0, 0.002) == MOST
    assert resized(40, MOST, 0.0015, 0.002) == 40  # within the budget: kept


async def _pullb_steps(start_server: Callable[..., Any], budget_ms: float) -> int:
    """The queue task's steps while a PULLB of 500 jobs runs; checks its reply."""
    server = await start_server(slice_budget_ms=budget_ms, memory=True)  # two of them
    client = await RawClient.connect(server.tcp_port)
    for start in (0, 250):
        await client.ok("PUSHB", queue="sized",
                        jobs=[{"name": "j", "data": start + i} for i in range(250)])
    steps = StepCounter("queue:sized")
    trio.lowlevel.add_instrument(steps)
    try:
        with trio.fail_after(20):
            reply = await client.ok("PULLB", queue="sized", count=500, timeout=0)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert [job["data"] for job in reply["jobs"]] == list(range(500))
    assert len({job["id"] for job in reply["jobs"]}) == 500
    actor = server.broker.router.actors["sized"]
    assert (actor.state.slice_cap == 0) == (budget_ms == 0)
    return steps.steps


async def test_slices_over_a_tiny_budget_take_fewer_jobs_each_with_the_same_reply(
    start_server: Callable[..., Any],
) -> None:
    fixed = await _pullb_steps(start_server, 0)  # SLICE_JOBS a slice: a handful
    tight = await _pullb_steps(start_server, 0.001)  # every slice is over: the floor
    # Two steps a slice: the slice, then the pass it sits out (turns.py).
    assert fixed <= 2 * (500 // MOST + 2)
    assert tight >= 4 * fixed, (fixed, tight)


async def test_due_jobs_are_promoted_in_smaller_ticks_past_the_budget(
    start_server: Callable[..., Any],
) -> None:
    server = await start_server(slice_budget_ms=0.001)
    client = await RawClient.connect(server.tcp_port)
    n = 3 * lifecycle.PROMOTE_MAX_JOBS
    await client.ok("PUSHB", queue="due", jobs=[{"name": "j", "data": i, "delay": 1}
                                                 for i in range(n)])
    await trio.sleep(0.01)  # real time: the jobs' runAt (1 ms) must pass
    with trio.fail_after(20):
        while (await client.ok("GetJobCounts", queue="due"))["counts"]["delayed"]:
            pass
    counts = (await client.ok("GetJobCounts", queue="due"))["counts"]
    assert counts["waiting"] == n
    state = server.broker.router.actors["due"].state
    assert 0 < state.promote_cap < lifecycle.PROMOTE_MAX_JOBS


def test_the_flag_and_variable() -> None:
    args = build_parser().parse_args(["serve", "--slice-budget-ms", "5"])
    assert config_from(args, {}).slice_budget_ms == 5
    args = build_parser().parse_args(["serve"])
    assert config_from(args, {"TRIOQUEUE_SLICE_BUDGET_MS": "0"}).slice_budget_ms == 0
    assert Config().slice_budget_ms == 4.0
    with pytest.raises(ValueError):
        Config(slice_budget_ms=-1).validate()
    with pytest.raises(ValueError):
        Config(slice_budget_ms=float("inf")).validate()


def test_the_budget_is_each_slices_deadline_by_the_wall_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The core asks ``q.slice_over`` part-way through a slice; the budget answers by the
    wall clock from the slice's start, and a queue without a budget has no clock."""
    from trioqueue.actors import slice_budget
    from trioqueue.testing.queue import QueueHarness

    now = [100.0]
    monkeypatch.setattr(slice_budget, "_wall", lambda: now[0])
    q = QueueHarness().q
    budget = slice_budget.SliceBudget(4.0)
    budget.begin(q)
    over = q.slice_over
    assert over is not None
    work_s = 0.004 * slice_budget.WORK_SHARE  # the rest of the budget: the commit's
    now[0] += work_s - 0.0001
    assert not over()
    now[0] += 0.0002
    assert over()
    budget.begin(q)  # the next slice: a fresh deadline
    assert not over()
    budget.begin_tick(q)  # a tick has one too
    now[0] += 0.005
    assert over()
    slice_budget.SliceBudget(0).begin(q)
    assert q.slice_over is None


async def test_a_parked_pullb_met_by_a_pushb_is_leased_in_slices(
    start_server: Callable[..., Any],
) -> None:
    """A worker's long-poll PULLB of 500 parked on an empty queue; a PUSHB of 500
    arrives. The jobs are leased a slice a step in the queue's task (at a million
    active jobs, 500 leases in one step held every other queue for 15-25 ms), and the
    worker's reply holds all 500 in order."""
    server = await start_server(slice_budget_ms=0, memory=True)
    steps = StepCounter("queue:parked")
    result, _ = await park_then_push(
        server, {"cmd": "PULLB", "count": 500, "timeout": 10_000, "owner": "w"}, 500,
        answer_within_s=20, counting=steps)
    assert [job["data"] for job in result["jobs"]] == list(range(500))
    assert len(set(result["tokens"])) == 500
    assert steps.steps >= 500 // MOST  # a slice a step at least


async def test_a_pull_parked_before_a_sliced_pushb_is_served_when_the_push_ends(
    start_server: Callable[..., Any],
) -> None:
    """The last slice of long work runs the queue's timers and serves its parked pulls:
    a long-poll PULL parked on an empty queue used to wait for its own deadline (here
    30 s) when the jobs came in a PUSHB long enough to be admitted in slices."""
    server = await start_server(memory=True)
    got, ids = await park_then_push(server, {"cmd": "PULL", "timeout": 30_000},
                                    3 * MOST, answer_within_s=5)  # far less than 30 s
    assert got["job"]["id"] == ids[0]


async def test_a_parked_pullb_whose_lease_goes_on_after_an_inline_step_is_answered(
    start_server: Callable[..., Any],
) -> None:
    """A PUSHB short enough for one step, run inline by the producer's connection, fills
    a parked PULLB's first slice: the rest of its lease is long work begun in someone
    else's task, and the queue's own task must wake for it, not sleep to the pull's
    deadline."""
    server = await start_server(slice_budget_ms=0, memory=True)
    # Answered in far less than the pull's own 30 s, and than the 5 s at which the stall
    # sweep of the jobs leased so far would wake the queue anyway.
    got, ids = await park_then_push(
        server, {"cmd": "PULLB", "count": 3 * MOST, "timeout": 30_000, "owner": "w"},
        MOST, answer_within_s=2)
    assert [job["id"] for job in got["jobs"]] == ids


async def park_then_push(
    server: Any, pull: dict[str, Any], jobs: int, *, answer_within_s: float,
    counting: StepCounter | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Park ``pull`` on an empty queue, push ``jobs`` jobs in one PUSHB from another
    connection, and return the pull's answer (within ``answer_within_s``) and the ids;
    ``counting`` counts the steps from the push to the answer."""
    worker = await RawClient.connect(server.tcp_port)
    producer = await RawClient.connect(server.tcp_port)
    got: list[dict[str, Any]] = []
    fields = {k: v for k, v in pull.items() if k != "cmd"}

    async def run_pull() -> None:
        got.append(await worker.ok(pull["cmd"], queue="parked", **fields))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(run_pull)
        with trio.fail_after(10):
            while not ((actor := server.broker.router.actors.get("parked"))
                       and actor.state.waiters):
                await trio.sleep(0)
        if counting is not None:
            trio.lowlevel.add_instrument(counting)
        try:
            with trio.fail_after(answer_within_s):
                ids = (await producer.ok("PUSHB", queue="parked", jobs=[
                    {"name": "j", "data": i} for i in range(jobs)]))["ids"]
                while not got:
                    await trio.sleep(0)  # yields only (no clock time passes)
        finally:
            if counting is not None:
                trio.lowlevel.remove_instrument(counting)
    return got[0], ids
