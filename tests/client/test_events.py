"""QueueEvents over every mode (TCP and embedded, LMDB and memory), and across a broker
restart (TCP modes)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import (
    Connection,
    JobNotFound,
    Queue,
    QueueEvent,
    QueueEvents,
    open_connection,
)
from trioqueue.config import Config

pytestmark = pytest.mark.anyio

DEADLINE_S = 5.0


async def pull(conn: Connection, queue: str, **fields: Any) -> dict[str, Any]:
    """The next job of ``queue`` (a PULL parked until one is ready)."""
    reply = await conn.call("PULL", queue=queue, timeout=int(DEADLINE_S * 1000), **fields)
    assert reply["job"] is not None, "no job became ready"
    return dict(reply)


async def take(events: QueueEvents, job_id: str | None, until: str) -> list[QueueEvent]:
    """Events (of ``job_id`` and queue-wide ones) until the first ``until`` among them."""
    seen: list[QueueEvent] = []
    with anyio.fail_after(DEADLINE_S):
        async for event in events:
            if event.job_id not in (job_id, None):
                continue
            seen.append(event)
            if event.name == until:
                return seen
    raise AssertionError(f"stream ended before {until}: {seen}")


async def wait_until(predicate: Callable[[], bool], what: str) -> None:
    with anyio.move_on_after(DEADLINE_S):
        while not predicate():
            await anyio.sleep(0.005)
        return
    raise AssertionError(f"timed out waiting for {what}")


async def test_lifecycle_in_order_with_payloads(conn: Connection) -> None:
    queue = Queue("ev-life", conn)
    async with QueueEvents("ev-life", conn) as events:
        await queue.add("mail", {"to": "a"}, job_id="e1", attempts=2, backoff=0)
        await pull(conn, "ev-life")
        await queue.move_job_to_failed("e1", "boom")
        await pull(conn, "ev-life")
        await queue.update_job_progress("e1", 40, "almost")
        await queue.move_job_to_completed("e1", {"sent": 1})
        seen = await take(events, "e1", "completed")

    assert [e.name for e in seen] == ["waiting", "active", "drained", "failed", "retried",
                                      "active", "drained", "progress", "completed"]
    failed, retried, progress, completed = seen[3], seen[4], seen[7], seen[8]
    assert failed.failed_reason == "boom" and failed.terminal is False
    assert failed.data == {"to": "a"}
    assert retried.prev == "failed"
    assert progress.progress == 40 and progress.data == {"progress": 40, "message": "almost"}
    assert completed.return_value == {"sent": 1} and completed.job_id == "e1"
    assert all(e.queue == "ev-life" for e in seen)
    assert seen[2].job_id is None  # drained is queue-wide
    assert completed.raw["eventType"] == "completed"


async def test_terminal_failure_and_removal(conn: Connection) -> None:
    queue = Queue("ev-fail", conn)
    async with QueueEvents("ev-fail", conn) as events:
        await queue.add("x", None, job_id="f1", attempts=1)
        await pull(conn, "ev-fail")
        await queue.move_job_to_failed("f1", "bad input")
        (*_, failed) = await take(events, "f1", "failed")
        assert failed.terminal is True and failed.failed_reason == "bad input"

        await queue.add("x", None, job_id="f2", delay=60_000)
        await queue.remove("f2")
        delayed, pushed, removed = await take(events, "f2", "removed")
        assert (delayed.name, pushed.name) == ("delayed", "waiting")
        assert delayed.delay is not None and 50_000 < delayed.delay <= 60_000
        assert removed.name == "removed" and removed.prev == "waiting"


def test_missing_terminal_flag_counts_as_terminal() -> None:
    event = QueueEvent.from_raw({"eventType": "failed", "queue": "q", "jobId": "1",
                                 "timestamp": 1, "error": "x"})
    assert event.terminal is True and event.failed_reason == "x"
    pushed = QueueEvent.from_raw({"eventType": "pushed", "queue": "q", "jobId": "1"})
    assert pushed.name == "waiting" and pushed.terminal is None


async def test_callbacks_sync_and_async(conn: Connection) -> None:
    queue = Queue("ev-cb", conn)
    sync_seen: list[tuple[str | None, Any]] = []
    async_seen: list[tuple[str | None, Any]] = []
    failed_seen: list[str | None] = []
    both_done = anyio.Event()

    def on_completed(event: QueueEvent) -> None:
        sync_seen.append((event.job_id, event.return_value))

    async def on_completed_async(event: QueueEvent) -> None:
        await anyio.lowlevel.checkpoint()
        async_seen.append((event.job_id, event.return_value))
        if len(async_seen) == 2:
            both_done.set()

    def broken(event: QueueEvent) -> None:
        raise RuntimeError("a listener bug must not stop the others")

    async with QueueEvents("ev-cb", conn) as events:
        with pytest.raises(ValueError):
            events.on("complete", on_completed)  # a typo is refused
        events.on("completed", broken)
        events.on("completed", on_completed)
        events.on("completed", on_completed_async)
        events.on("failed", lambda event: failed_seen.append(event.failed_reason))
        for n in (1, 2):
            await queue.add("x", n, job_id=f"c{n}", attempts=1)
            await pull(conn, "ev-cb")
            await queue.move_job_to_completed(f"c{n}", n * 10)
        await queue.add("x", None, job_id="c3", attempts=1)
        await pull(conn, "ev-cb")
        await queue.move_job_to_failed("c3", "nope")
        with anyio.fail_after(DEADLINE_S):
            await both_done.wait()
        await wait_until(lambda: failed_seen == ["nope"], "the failed callback")
        events.off("completed", on_completed)
        await queue.add("x", 4, job_id="c4", attempts=1)
        await pull(conn, "ev-cb")
        await queue.move_job_to_completed("c4", 40)
        await wait_until(lambda: len(async_seen) == 3, "the third completion")

    assert sync_seen == [("c1", 10), ("c2", 20)]  # off() stopped the fourth
    assert async_seen == [("c1", 10), ("c2", 20), ("c4", 40)]


async def test_overflow_drops_oldest_and_says_so(conn: Connection) -> None:
    queue = Queue("ev-over", conn)
    async with QueueEvents("ev-over", conn, max_buffered=3) as events:
        await queue.add_bulk([{"name": "x", "opts": {"job_id": f"o{n}"}} for n in range(5)])
        await wait_until(lambda: events.dropped == 2, "two dropped events")
        first = await events.__anext__()
        assert first.name == "overflow" and first.raw["dropped"] == 2
        rest = [await events.__anext__() for _ in range(3)]
        assert [(e.name, e.job_id) for e in rest] == [
            ("waiting", "o2"), ("waiting", "o3"), ("waiting", "o4")]


async def test_iteration_ends_with_the_block(conn: Connection) -> None:
    queue = Queue("ev-end", conn)
    names: list[str] = []

    async with anyio.create_task_group() as nursery:
        async with QueueEvents("ev-end", conn) as events:
            async def read() -> None:
                async for event in events:
                    names.append(event.name)

            nursery.start_soon(read)
            await queue.add("x", None, job_id="z1")
            await wait_until(lambda: names == ["waiting"], "the waiting event")
        # Leaving the block ends the iterator: the nursery can close.
    assert events.closed


# ---------------------------------------------------------------- broker restart


async def test_survives_broker_restart(mode: str, broker_config: Config, brokers: Any
                                       ) -> None:
    """Stop the broker under a QueueEvents and two waits, start a new one on the same
    port (and data dir): the stream says ``reconnected`` and both waits settle after
    it (with the result on LMDB; on memory the job is gone: Job not found)."""
    if not mode.startswith("tcp"):
        pytest.skip("an embedded broker lives and dies with its connection: "
                    "there is no broker to restart under a live connection")
    order: list[str] = []
    outcomes: dict[str, Any] = {}

    first = await brokers.start(broker_config)
    port = first.tcp_port
    assert port is not None
    async with open_connection(port=port) as conn:
        queue = Queue("ev-restart", conn)
        async with QueueEvents("ev-restart", conn) as events:
            reconnected = anyio.Event()

            def on_reconnected(event: QueueEvent) -> None:
                order.append("reconnected")
                reconnected.set()

            events.on("reconnected", on_reconnected)
            await queue.add("x", {"n": 1}, job_id="r1")

            async def wait(key: str, with_events: bool) -> None:
                try:
                    outcomes[key] = await queue.wait_job_until_finished(
                        "r1", events if with_events else None, ttl=20)
                except JobNotFound as exc:
                    outcomes[key] = exc
                order.append(key)

            with anyio.fail_after(DEADLINE_S * 3):
                async with anyio.create_task_group() as waits:
                    waits.start_soon(wait, "with-events", True)
                    waits.start_soon(wait, "holds", False)
                    await anyio.wait_all_tasks_blocked()

                    await first.stop()
                    assert outcomes == {}
                    config = dataclasses.replace(broker_config, tcp_port=port)
                    second = await brokers.start(config)
                    assert second.tcp_port == port
                    await reconnected.wait()
                    names = [e.name for e in await take(events, "r1", "reconnected")]
                    assert names[0] == "waiting" and names[-1] == "reconnected"
                    if mode == "tcp-lmdb":
                        assert await queue.get_job_state("r1") == "waiting"
                        await pull(conn, "ev-restart")
                        await queue.move_job_to_completed("r1", "after the restart")
                    # The waits end with this nursery.

    assert reconnected.is_set() and sorted(outcomes) == ["holds", "with-events"]
    if mode == "tcp-lmdb":
        # Only possible after the restart: the job completed once the stream was back.
        assert order[0] == "reconnected"
        assert outcomes == {"with-events": "after the restart", "holds": "after the restart"}
    else:  # a memory store starts empty: the job's outcome is unknown
        assert all(isinstance(v, JobNotFound) for v in outcomes.values()), outcomes
