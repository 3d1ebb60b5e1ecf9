"""wait_job_until_finished over every mode, with and without QueueEvents.

Each test starts the waits first and lets every task block before it changes the
job. Under trio the broker runs in the test's own loop (in TCP modes too), so the wait
is then really in progress (a parked WaitJob, or a registered watch) when the outcome
happens. Under asyncio the broker runs in a thread: a wait has then sent its first
command but may not be parked yet, so those runs check the outcomes and the trio runs
are the ones that also pin that ordering.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import (
    CommandError,
    Connection,
    ConnectionLost,
    JobFailed,
    JobNotFound,
    Queue,
    QueueEvents,
    WaitTimeout,
    open_connection,
    waiting,
)

pytestmark = pytest.mark.anyio

DEADLINE_S = 5.0


@pytest.fixture(params=["holds", "events"])
def via(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@asynccontextmanager
async def waiter(conn: Connection, queue_name: str, via: str
                 ) -> AsyncIterator[Callable[..., Awaitable[Any]]]:
    """``wait(job_id, ttl=...)`` with a QueueEvents (``via == "events"``) or without."""
    queue = Queue(queue_name, conn)
    if via == "holds":
        async def wait_holds(job_id: str, ttl: float | None = 30.0) -> Any:
            return await queue.wait_job_until_finished(job_id, None, ttl)

        yield wait_holds
        return
    async with QueueEvents(queue_name, conn) as events:
        async def wait_events(job_id: str, ttl: float | None = 30.0) -> Any:
            return await queue.wait_job_until_finished(job_id, events, ttl)

        yield wait_events


class Background:
    """A wait running in a task; ``outcome`` is its result or exception once done."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.outcome: Any = None

    async def run(self, wait: Awaitable[Any]) -> None:
        try:
            self.outcome = await wait
        except Exception as exc:
            self.outcome = exc
        self.done.set()

    async def result(self) -> Any:
        with anyio.fail_after(DEADLINE_S):
            await self.done.wait()
        return self.outcome


async def started(nursery: anyio.abc.TaskGroup, wait: Awaitable[Any]) -> Background:
    """Start ``wait`` and return once it (and every other task) is blocked."""
    bg = Background()
    nursery.start_soon(bg.run, wait)
    await anyio.wait_all_tasks_blocked()
    assert not bg.done.is_set(), bg.outcome
    return bg


async def pull(conn: Connection, queue: str, **fields: Any) -> dict[str, Any]:
    reply = await conn.call("PULL", queue=queue, timeout=int(DEADLINE_S * 1000), **fields)
    assert reply["job"] is not None, "no job became ready"
    return dict(reply)


async def test_completes_after_a_retried_failure(conn: Connection, via: str,
                                                 nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-retry", conn)
    async with waiter(conn, "w-retry", via) as wait:
        await queue.add("x", {"n": 1}, job_id="a1", attempts=3, backoff=0)
        bg = await started(nursery, wait("a1"))
        await pull(conn, "w-retry")
        await queue.move_job_to_failed("a1", "flaky")  # retried: not the outcome
        await pull(conn, "w-retry")
        await anyio.wait_all_tasks_blocked()
        assert not bg.done.is_set(), bg.outcome
        await queue.move_job_to_completed("a1", {"ok": True})
        assert await bg.result() == {"ok": True}
        # A wait that starts after the completion reads the stored result.
        assert await wait("a1") == {"ok": True}


async def test_job_failed_with_the_last_error(conn: Connection, via: str,
                                              nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-fail", conn)
    async with waiter(conn, "w-fail", via) as wait:
        await queue.add("x", None, job_id="b1", attempts=2, backoff=0)
        bg = await started(nursery, wait("b1"))
        await pull(conn, "w-fail")
        await queue.move_job_to_failed("b1", "first")
        await pull(conn, "w-fail")
        await queue.move_job_to_failed("b1", "second")
        failed = await bg.result()
        assert isinstance(failed, JobFailed)
        assert failed.job_id == "b1" and failed.error == "second"
        with pytest.raises(JobFailed, match="second"):  # also once it is in the DLQ
            await wait("b1")


async def test_job_failed_when_a_lost_lock_dead_letters_it(
        conn: Connection, via: str, nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-dlq", conn)
    async with waiter(conn, "w-dlq", via) as wait:
        await queue.add("x", None, job_id="d1", attempts=1)
        bg = await started(nursery, wait("d1"))
        await pull(conn, "w-dlq", owner="gone-worker", lockTtl=50)  # never renewed
        failed = await bg.result()
        assert isinstance(failed, JobFailed) and "Lock expired" in str(failed.error)
        assert await queue.get_job_state("d1") == "failed"


async def test_job_not_found(conn: Connection, via: str, nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-gone", conn)
    async with waiter(conn, "w-gone", via) as wait:
        with pytest.raises(JobNotFound, match="Job nope not found"):
            await wait("nope")
        await queue.add("x", None, job_id="g1", delay=60_000)
        bg = await started(nursery, wait("g1"))
        await queue.remove("g1")  # cancelled while waited for
        gone = await bg.result()
        assert isinstance(gone, JobNotFound) and str(gone) == "Job g1 not found"


async def test_drained_job_is_not_found(conn: Connection, via: str, nursery: anyio.abc.TaskGroup,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Drain emits no per-job event: a parked hold is answered by the broker; with
    QueueEvents the scheduled state read finds the job gone (its first read, normally
    after a second, is brought forward here to keep the test fast)."""
    monkeypatch.setattr(waiting, "PROBE_FIRST_S", 0.05)
    queue = Queue("w-drain", conn)
    async with waiter(conn, "w-drain", via) as wait:
        await queue.add("x", None, job_id="h1")
        bg = await started(nursery, wait("h1"))
        assert await queue.drain() == 1
        gone = await bg.result()
        assert isinstance(gone, JobNotFound) and str(gone) == "Job h1 not found"


async def test_remove_on_complete_result_is_retained(conn: Connection, via: str,
                                                     nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-roc", conn)
    async with waiter(conn, "w-roc", via) as wait:
        await queue.add("x", None, job_id="r1", remove_on_complete=True)
        bg = await started(nursery, wait("r1"))
        await pull(conn, "w-roc")
        await queue.move_job_to_completed("r1", "pong")
        assert await bg.result() == "pong"
        assert await queue.get_job_state("r1") == "unknown"  # the job itself is gone
        assert await wait("r1") == "pong"  # a late wait still gets the result


async def test_ttl_raises_wait_timeout(conn: Connection, via: str) -> None:
    queue = Queue("w-ttl", conn)
    async with waiter(conn, "w-ttl", via) as wait:
        await queue.add("x", None, job_id="t1")
        start = anyio.current_time()
        with pytest.raises(WaitTimeout, match="Job t1 timed out after 200ms"):
            await wait("t1", ttl=0.2)
        elapsed = anyio.current_time() - start
        assert 0.19 <= elapsed < 2.0, elapsed
        assert await queue.get_job_state("t1") == "waiting"  # the job is untouched


async def test_no_ttl_means_no_limit(conn: Connection, via: str,
                                     nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-nottl", conn)
    async with waiter(conn, "w-nottl", via) as wait:
        await queue.add("x", None, job_id="n1")
        zero = await started(nursery, wait("n1", ttl=0))
        none = await started(nursery, wait("n1", ttl=None))
        await pull(conn, "w-nottl")
        await queue.move_job_to_completed("n1", 7)
        assert await zero.result() == 7 and await none.result() == 7


async def test_wait_survives_its_queue_events_closing(conn: Connection,
                                                      nursery: anyio.abc.TaskGroup) -> None:
    queue = Queue("w-close", conn)
    await queue.add("x", None, job_id="s1")
    async with QueueEvents("w-close", conn) as events:
        bg = await started(nursery, queue.wait_job_until_finished("s1", events))
    await anyio.wait_all_tasks_blocked()  # now waiting with WaitJob holds
    assert not bg.done.is_set(), bg.outcome
    await pull(conn, "w-close")
    await queue.move_job_to_completed("s1", "still here")
    assert await bg.result() == "still here"


async def test_lost_connections_and_transient_refusals_are_retried(
        conn: Connection, via: str, nursery: anyio.abc.TaskGroup,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The first WaitJobs fail as a broker outage would (ConnectionLost, then a "try
    later" refusal): the wait carries on and settles on the result."""
    monkeypatch.setattr(waiting, "backoff_s", lambda attempt: 0.001)
    failures: list[Exception] = [ConnectionLost("connection lost: reset"),
                                 CommandError("Rate limit exceeded", "WaitJob"),
                                 ConnectionLost("connection lost: reset")]
    call = conn.call

    async def flaky_call(cmd: str, **fields: Any) -> dict[str, Any]:
        if cmd == "WaitJob" and failures:
            raise failures.pop(0)
        return await call(cmd, **fields)

    conn.call = flaky_call  # type: ignore[method-assign]
    queue = Queue("w-flaky", conn)
    async with waiter(conn, "w-flaky", via) as wait:
        await queue.add("x", None, job_id="k1")
        bg = await started(nursery, wait("k1"))
        with anyio.fail_after(DEADLINE_S):
            while failures:  # every failure was met (and retried) by the wait
                await anyio.sleep(0.005)
        await anyio.wait_all_tasks_blocked()
        assert not bg.done.is_set(), bg.outcome
        await pull(conn, "w-flaky")
        await queue.move_job_to_completed("k1", "made it")
        assert await bg.result() == "made it"


async def test_queue_events_of_another_queue_is_refused(conn: Connection) -> None:
    async with QueueEvents("w-other", conn) as events:
        with pytest.raises(ValueError):
            await Queue("w-mine", conn).wait_job_until_finished("x", events)


async def test_sixty_waits_beyond_the_hold_limit(connect_args: dict[str, Any]) -> None:
    """One channel (pool_size=1) holds at most 40 WaitJobs on a queue: the other 20
    waits are answered at once, pause, and ask again; all 60 settle."""
    async with open_connection(**connect_args, pool_size=1) as conn:
        queue = Queue("w-many", conn)
        refused = 0  # WaitJobs answered at once, without a hold
        call = conn.call

        async def counting_call(cmd: str, **fields: Any) -> dict[str, Any]:
            nonlocal refused
            reply = await call(cmd, **fields)
            if cmd == "WaitJob" and "completed" in reply and not reply["completed"]:
                refused += 1
            return reply

        conn.call = counting_call  # type: ignore[method-assign]
        jobs = await queue.add_bulk([{"name": "x", "data": n, "opts": {"job_id": f"m{n}"}}
                                     for n in range(60)])
        async with anyio.create_task_group() as nursery:
            waits = [await started(nursery, queue.wait_job_until_finished(job.id))
                     for job in jobs]
            with anyio.fail_after(DEADLINE_S):  # past 40 holds the broker answers at once
                while refused < 20:
                    await anyio.sleep(0.01)
            reply = await conn.call("PULLB", queue="w-many", count=60, timeout=0)
            assert len(reply["jobs"]) == 60
            await conn.call("ACKB", ids=[job.id for job in jobs],
                            results=[{"n": job.data} for job in jobs])
            assert [await bg.result() for bg in waits] == [{"n": n} for n in range(60)]
