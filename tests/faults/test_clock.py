"""Clock jumps of +1 h and -1 h: delayed jobs are released once, never twice; leases
are judged on the monotonic clock.

While the broker runs it never reads the wall clock again (TrioClock derives wall time
from trio's monotonic clock), so a step of the system clock changes nothing: the first
test steps ``time.time`` under a running broker (virtual time, MockClock). Across a
restart the wall clock is read again: the second test restarts the broker as if the
wall clock had moved an hour forward, then back, and checks the delays follow it
without any job running twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from trioqueue.actors.broker import Broker
from trioqueue.actors.clock import TrioClock
from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.testing import RawClient
from trioqueue.testing.faults import step_wall_clock

HOUR_MS = 3_600_000


def wall_ms() -> float:
    """The real wall clock, whatever step is in force (for the sanity check)."""
    import datetime

    return datetime.datetime.now(datetime.UTC).timestamp() * 1000


async def test_a_wall_clock_step_changes_nothing_while_running(
        autojump_clock: trio.testing.MockClock, start_server: Callable[..., Any]) -> None:
    server = await start_server(memory=True)
    client = await RawClient.connect(server.tcp_port)
    await client.ok("PUSH", queue="ck", name="n", data=1, jobId="later", delay=10_000)
    await client.ok("PUSH", queue="ck", name="n", data=2, jobId="leased")
    leased = await client.ok("PULL", queue="ck", owner="w", lockTtl=30_000)
    started = trio.current_time()
    for step_ms in (HOUR_MS, -HOUR_MS):
        with step_wall_clock(step_ms):
            assert abs(time.time() * 1000 - step_ms - wall_ms()) < 5_000
            # neither the delayed job nor the lease moved with the step
            assert (await client.ok("GetState", id="later"))["state"] == "delayed"
            assert (await client.ok("ExtendLock", id="leased", token=leased["token"],
                                    duration=30_000))["ok"]
    delivered = await client.ok("PULLB", queue="ck", count=10, owner="w", timeout=60_000)
    assert [j["id"] for j in delivered["jobs"]] == ["later"]
    assert 9.9 <= trio.current_time() - started <= 10.5  # at its due time, monotonic
    again = await client.ok("PULLB", queue="ck", count=10, owner="w", timeout=15_000)
    assert again["jobs"] == []  # released once, never twice
    assert (await client.ok("GetState", id="leased"))["state"] == "active"  # lease intact
    # ... until 30 s of monotonic time after its last renewal, not a wall-clock hour
    await trio.sleep(30 - (trio.current_time() - started) + 0.5)
    assert (await client.ok("GetJob", id="leased"))["job"]["stallCount"] == 1


async def serve_once(config: Config, offset_ms: int, body: Callable[[RawClient], Any]
                     ) -> None:
    """Run a broker (wall clock ``offset_ms`` away) until ``body`` is done, then stop it
    and wait until its store is closed."""
    async with trio.open_nursery() as nursery:
        broker = Broker(config, clock=TrioClock(wall_offset_ms=offset_ms))
        server: Server = await nursery.start(Server(config, broker).run)
        client = await RawClient.connect(server.tcp_port)  # type: ignore[arg-type]
        try:
            await body(client)
        finally:
            await client.aclose()
            server.stop()


async def test_delays_follow_the_wall_clock_across_restarts_without_reruns(
        tmp_path: Path) -> None:
    config = Config(tcp_port=0, ws_port=0, data_dir=str(tmp_path / "data"))

    async def before(client: RawClient) -> None:
        await client.ok("PUSH", queue="ck", name="n", data=1, jobId="in30m",
                        delay=HOUR_MS // 2)
        await client.ok("PUSH", queue="ck", name="n", data=2, jobId="in2h", delay=2 * HOUR_MS)

    async def an_hour_later(client: RawClient) -> None:
        due = await client.ok("PULLB", queue="ck", count=10, owner="w")
        assert [j["id"] for j in due["jobs"]] == ["in30m"]
        await client.ok("ACK", id="in30m", token=due["tokens"][0], result="ran")
        assert (await client.ok("GetState", id="in2h"))["state"] == "delayed"

    async def an_hour_earlier(client: RawClient) -> None:
        assert (await client.ok("PULLB", queue="ck", count=10, owner="w"))["jobs"] == []
        assert (await client.ok("GetState", id="in30m"))["state"] == "completed"
        assert (await client.ok("GetResult", id="in30m"))["result"] == "ran"
        assert (await client.ok("GetState", id="in2h"))["state"] == "delayed"

    await serve_once(config, 0, before)
    await serve_once(config, HOUR_MS, an_hour_later)  # the wall clock stepped forward
    await serve_once(config, -HOUR_MS, an_hour_earlier)  # and back, behind the start
