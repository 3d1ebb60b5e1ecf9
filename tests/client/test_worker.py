"""Worker over every mode (TCP and embedded, LMDB and memory).

Synchronisation is by anyio.Event gates inside processors and by wait-until loops with a
deadline on what the broker reports; the one real-time wait is the lock-renewal test,
whose point is that time passes beyond the lock duration.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import (
    Connection,
    Job,
    LockError,
    Queue,
    UnrecoverableError,
    Worker,
)
from trioqueue.client.worker import EVENTS
from trioqueue.config import Config

pytestmark = pytest.mark.anyio


class Recorder:
    """Every event a worker emits, in order, with its arguments."""

    def __init__(self, worker: Worker) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        for event in EVENTS:
            worker.on(event, partial(self._record, event))

    def _record(self, event: str, *args: Any) -> None:
        self.events.append((event, args))

    def of(self, event: str) -> list[tuple[Any, ...]]:
        return [args for name, args in self.events if name == event]


class Gate:
    """A processor that holds every job it is given until :meth:`open`, then returns
    ``result(job)``; :meth:`holding` waits until it holds ``n`` jobs."""

    def __init__(self, result: Callable[[Job], Any]) -> None:
        self.held: dict[str, Job] = {}
        self._result = result
        self._open = anyio.Event()
        self._arrived = anyio.Event()

    async def __call__(self, job: Job) -> Any:
        self.held[job.id] = job
        self._arrived.set()
        await self._open.wait()
        return self._result(job)

    async def holding(self, n: int) -> None:
        with anyio.fail_after(5):
            while len(self.held) < n:
                self._arrived = anyio.Event()
                await self._arrived.wait()

    def open(self) -> None:
        self._open.set()


@asynccontextmanager
async def started(worker: Worker) -> AsyncIterator[Worker]:
    """The worker running in a nursery; force-closed on the way out if still running."""
    async with anyio.create_task_group() as nursery:
        await nursery.start(worker.run)
        try:
            yield worker
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await worker.close(force=True)


async def wait_until(predicate: Callable[[], Awaitable[bool] | bool],
                     timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while True:
            value = predicate()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return
            await anyio.sleep(0.01)


async def wait_job(conn: Connection, job_id: str) -> dict[str, Any]:
    """The broker's own wait for a job's outcome (WaitJob), not a poll."""
    return await conn.call("WaitJob", id=job_id, timeout=5000)


def handed_back(queue: Queue, job_id: str) -> Callable[[], Awaitable[bool]]:
    """True once the job was pulled and then returned to waiting (its timeline shows
    both), which is what a release after a pull looks like from outside."""

    async def check() -> bool:
        job = await queue.get_job(job_id)
        assert job is not None
        states = [entry["state"] for entry in job.timeline]
        return job.state == "waiting" and "active" in states
    return check


# ---------------------------------------------------------------------- processing


async def test_async_processor_results_are_stored(conn: Connection) -> None:
    queue = Queue("w-async", conn)
    jobs = await queue.add_bulk([{"name": "double", "data": {"n": n}} for n in range(5)])
    tokens: list[str | None] = []

    async def processor(job: Job) -> dict[str, int]:
        tokens.append(job.token)
        return {"doubled": job.data["n"] * 2}

    worker = Worker("w-async", processor, conn, concurrency=2)
    events = Recorder(worker)
    async with started(worker):
        assert worker.is_running
        for job in jobs:
            reply = await wait_job(conn, job.id)
            assert reply["completed"] is True
            assert reply["result"] == {"doubled": job.data["n"] * 2}
        await worker.close()
    assert worker.is_closed and not worker.is_running
    for job in jobs:
        assert await queue.get_result(job.id) == {"doubled": job.data["n"] * 2}
        assert await queue.get_job_state(job.id) == "completed"
    assert len(tokens) == 5 and all(tokens)
    completed = events.of("completed")
    assert sorted(result["doubled"] for _, result in completed) == [0, 2, 4, 6, 8]
    assert sorted(job.id for job, _ in completed) == sorted(job.id for job in jobs)
    assert len(events.of("active")) == 5
    assert events.of("failed") == [] and events.of("error") == []
    assert events.of("closed") == [()]
    assert worker.processed_count == 5 and worker.failed_count == 0


async def test_sync_processor_runs_in_a_thread_and_reaches_the_job(conn: Connection) -> None:
    queue = Queue("w-sync", conn)
    job = await queue.add("inc", {"n": 41})
    in_worker_thread: list[bool] = []

    def processor(job: Job) -> int:
        in_worker_thread.append(threading.current_thread() is not threading.main_thread())
        anyio.from_thread.run(job.update_progress, 50)
        anyio.from_thread.run(job.log, "from a thread")
        return int(job.data["n"]) + 1

    worker = Worker("w-sync", processor, conn)
    events = Recorder(worker)
    async with started(worker):
        reply = await wait_job(conn, job.id)
        assert reply["completed"] is True and reply["result"] == 42
        await worker.close()
    assert in_worker_thread == [True]
    assert await queue.get_result(job.id) == 42
    logs = await queue.get_job_logs(job.id)
    assert [entry["message"] for entry in logs["logs"]] == ["from a thread"]
    assert [(j.id, progress) for j, progress in events.of("progress")] == [(job.id, 50)]
    assert [result for _, result in events.of("completed")] == [42]


async def test_concurrency_limit_is_respected(conn: Connection) -> None:
    queue = Queue("w-conc", conn)
    jobs = await queue.add_bulk([{"name": "j", "data": {"i": i}} for i in range(7)])
    gate = anyio.Event()
    running = 0
    peak = 0

    async def processor(job: Job) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await gate.wait()
        finally:
            running -= 1
        return int(job.data["i"])

    worker = Worker("w-conc", processor, conn, concurrency=3)
    async with started(worker):
        await wait_until(lambda: running == 3)
        # Every slot is taken, so nothing more is leased: the broker agrees.
        counts = await queue.get_job_counts()
        assert counts["active"] == 3 and counts["waiting"] == 4
        gate.set()
        for job in jobs:
            assert (await wait_job(conn, job.id))["completed"] is True
        await worker.close()
    assert peak == 3


async def test_failures_are_retried_by_the_broker_then_dead_lettered(conn: Connection) -> None:
    queue = Queue("w-fail", conn)
    job = await queue.add("flaky", {}, attempts=3, backoff=0)
    attempts_seen: list[int] = []

    async def processor(job: Job) -> None:
        attempts_seen.append(job.attempts_made)
        raise ValueError(f"boom {len(attempts_seen)}")

    worker = Worker("w-fail", processor, conn)
    events = Recorder(worker)
    async with started(worker):
        reply = await wait_job(conn, job.id)
        assert reply["completed"] is False and reply["failed"] is True
        assert reply["error"] == "boom 3"
        await worker.close()
    assert attempts_seen == [0, 1, 2]  # one delivery per attempt, no retry of our own
    failed = await queue.get_job(job.id)
    assert failed is not None and failed.state == "failed" and failed.attempts_made == 3
    assert failed.stacktrace  # the traceback went with the FAIL
    errors = [exc for _, exc in events.of("failed")]
    assert [str(exc) for exc in errors] == ["boom 1", "boom 2", "boom 3"]
    assert all(isinstance(exc, ValueError) for exc in errors)
    assert events.of("completed") == [] and events.of("error") == []
    assert worker.failed_count == 3


async def test_unrecoverable_error_fails_the_job_at_once(conn: Connection) -> None:
    queue = Queue("w-unrec", conn)
    job = await queue.add("bad", {}, attempts=5, backoff=0)
    calls = 0

    async def processor(job: Job) -> None:
        nonlocal calls
        calls += 1
        raise UnrecoverableError("bad input")

    worker = Worker("w-unrec", processor, conn)
    events = Recorder(worker)
    async with started(worker):
        reply = await wait_job(conn, job.id)
        assert reply["failed"] is True and reply["error"] == "bad input"
        await worker.close()
    assert calls == 1
    failed = await queue.get_job(job.id)
    assert failed is not None and failed.state == "failed" and failed.attempts_made == 1
    [(failed_job, exc)] = events.of("failed")
    assert failed_job.id == job.id and isinstance(exc, UnrecoverableError)


async def test_unencodable_result_fails_the_job(conn: Connection) -> None:
    queue = Queue("w-enc", conn)
    job = await queue.add("odd", {}, attempts=1)

    async def processor(job: Job) -> object:
        return object()  # no codec can send this

    worker = Worker("w-enc", processor, conn)
    events = Recorder(worker)
    async with started(worker):
        assert (await wait_job(conn, job.id))["failed"] is True
        await worker.close()
    assert await queue.get_job_state(job.id) == "failed"
    assert len(events.of("failed")) == 1 and events.of("completed") == []


async def test_progress_is_visible_while_running(conn: Connection) -> None:
    queue = Queue("w-progress", conn)
    job = await queue.add("long", {})
    progressed = anyio.Event()
    gate = anyio.Event()

    async def processor(job: Job) -> str:
        await job.update_progress(42, "halfway")
        await job.log("working")
        progressed.set()
        await gate.wait()
        return "done"

    worker = Worker("w-progress", processor, conn)
    events = Recorder(worker)
    async with started(worker):
        with anyio.fail_after(5):
            await progressed.wait()
        assert await queue.get_progress(job.id) == {"progress": 42, "message": "halfway"}
        assert [(j.id, p) for j, p in events.of("progress")] == [(job.id, 42)]
        assert await queue.get_job_state(job.id) == "active"
        gate.set()
        assert (await wait_job(conn, job.id))["result"] == "done"
        await worker.close()
    logs = await queue.get_job_logs(job.id)
    assert [entry["message"] for entry in logs["logs"]] == ["working"]


async def test_drained_when_the_queue_has_no_more_jobs(conn: Connection) -> None:
    queue = Queue("w-drained", conn)

    async def processor(job: Job) -> None:
        return None

    worker = Worker("w-drained", processor, conn, concurrency=5, poll_timeout_ms=50)
    events = Recorder(worker)
    async with started(worker):
        await wait_until(lambda: len(events.of("drained")) >= 1)  # empty from the start
        jobs = await queue.add_bulk([{"name": "j"} for _ in range(3)])
        for job in jobs:
            assert (await wait_job(conn, job.id))["completed"] is True
        # The pull that took them asked for 5 and got fewer: drained again.
        await wait_until(lambda: len(events.of("drained")) >= 2)
        await worker.close()


# ---------------------------------------------------------------------- closing, pausing


async def test_graceful_close_waits_for_running_jobs_and_hands_back_the_rest(
        conn: Connection) -> None:
    queue = Queue("w-close", conn)
    first = await queue.add("a", {})
    entered = anyio.Event()
    gate = anyio.Event()
    seen: list[str] = []

    async def processor(job: Job) -> str:
        seen.append(job.id)
        entered.set()
        await gate.wait()
        return "a done"

    worker = Worker("w-close", processor, conn, concurrency=2)
    events = Recorder(worker)
    close_done = anyio.Event()

    async def close() -> None:
        await worker.close()
        close_done.set()

    async with anyio.create_task_group() as nursery:
        await nursery.start(worker.run)
        with anyio.fail_after(5):
            await entered.wait()
        # The free slot's long-poll is parked at the broker (a sequencing aid only).
        await wait_until(lambda: worker.puller.in_flight)
        nursery.start_soon(close)
        await wait_until(lambda: worker.closing)
        second = await queue.add("b", {})
        # The parked pull brings it after close began: it must go back, not start.
        await wait_until(handed_back(queue, second.id))
        assert not close_done.is_set()  # still waiting for the running job
        gate.set()
        with anyio.fail_after(5):
            await close_done.wait()
    assert seen == [first.id]
    assert await queue.get_result(first.id) == "a done"
    back = await queue.get_job(second.id)
    assert back is not None and back.state == "waiting" and back.attempts_made == 0
    assert [job.id for job, _ in events.of("completed")] == [first.id]
    assert events.of("error") == []


async def test_force_close_cancels_and_hands_back_running_jobs(conn: Connection) -> None:
    queue = Queue("w-force", conn)
    job = await queue.add("stuck", {}, attempts=3)
    entered = anyio.Event()
    cancelled: list[str] = []

    async def processor(job: Job) -> None:
        entered.set()
        try:
            await anyio.sleep_forever()
        finally:
            cancelled.append(job.id)

    worker = Worker("w-force", processor, conn)
    events = Recorder(worker)
    async with started(worker):
        with anyio.fail_after(5):
            await entered.wait()
            await worker.close(force=True)
    assert cancelled == [job.id]
    back = await queue.get_job(job.id)
    assert back is not None and back.state == "waiting" and back.attempts_made == 0
    assert events.of("failed") == [] and events.of("completed") == []
    assert events.of("closed") == [()]


async def test_close_timeout_hands_back_jobs_still_running(conn: Connection) -> None:
    queue = Queue("w-timeout", conn)
    job = await queue.add("slow", {})
    entered = anyio.Event()

    async def processor(job: Job) -> None:
        entered.set()
        await anyio.sleep_forever()

    worker = Worker("w-timeout", processor, conn)
    async with started(worker):
        with anyio.fail_after(5):
            await entered.wait()
            await worker.close(timeout=0.1)
    back = await queue.get_job(job.id)
    assert back is not None and back.state == "waiting" and back.attempts_made == 0


async def test_cancelled_worker_hands_back_its_jobs(conn: Connection) -> None:
    queue = Queue("w-cancel", conn)
    job = await queue.add("stuck", {})
    entered = anyio.Event()

    async def processor(job: Job) -> None:
        entered.set()
        await anyio.sleep_forever()

    worker = Worker("w-cancel", processor, conn, concurrency=2)
    events = Recorder(worker)
    async with anyio.create_task_group() as nursery:
        await nursery.start(worker.run)
        with anyio.fail_after(5):
            await entered.wait()
        await wait_until(lambda: worker.puller.in_flight)  # the free slot's long-poll
        nursery.cancel_scope.cancel()
    assert worker.is_closed and events.of("closed") == [()]
    back = await queue.get_job(job.id)
    assert back is not None and back.state == "waiting" and back.attempts_made == 0
    workers = (await conn.call("ListWorkers"))["data"]["workers"]
    assert worker.id not in [w["workerId"] for w in workers]
    # The long-poll that was parked when the worker was cancelled must not hold on to
    # a job pushed now: another consumer gets both.
    late = await queue.add("late", {})
    pulled = await conn.call("PULLB", queue="w-cancel", count=2, timeout=2000,
                             owner="other", lockTtl=30_000)
    assert sorted(j["id"] for j in pulled["jobs"]) == sorted([job.id, late.id])


async def test_close_from_a_listener_or_a_processor(conn: Connection) -> None:
    # The batch pattern: process what is there, then stop, from an async listener.
    queue = Queue("w-self", conn)
    jobs = await queue.add_bulk([{"name": "j"} for _ in range(2)])

    async def processor(job: Job) -> str:
        return "ok"

    worker = Worker("w-self", processor, conn, poll_timeout_ms=50)
    worker.on("drained", worker.close)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as nursery:
            nursery.start_soon(worker.run)  # the nursery ends when the worker closed itself
    assert worker.is_closed
    for job in jobs:
        assert await queue.get_result(job.id) == "ok"

    # A processor closing its own worker: close cannot wait for that processor, so it
    # returns, and the worker closes once the processor has returned.
    last = await queue.add("last", {})

    async def closing_processor(job: Job) -> str:
        await worker2.close()
        return "closed myself"

    worker2 = Worker("w-self", closing_processor, conn)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as nursery:
            nursery.start_soon(worker2.run)
    assert worker2.is_closed
    assert await queue.get_result(last.id) == "closed myself"


async def test_pause_hands_back_what_a_parked_pull_brings(conn: Connection) -> None:
    queue = Queue("w-pause", conn)
    seen: list[str] = []

    async def processor(job: Job) -> str:
        seen.append(job.id)
        return "ok"

    worker = Worker("w-pause", processor, conn)
    async with started(worker):
        await wait_until(lambda: worker.puller.in_flight)  # parked long-poll
        worker.pause()
        assert worker.is_paused
        job = await queue.add("later", {})
        await wait_until(handed_back(queue, job.id))
        assert seen == []
        worker.resume()
        assert not worker.is_paused
        assert (await wait_job(conn, job.id))["result"] == "ok"
        await worker.close()
    assert seen == [job.id]
    done = await queue.get_job(job.id)
    assert done is not None and done.attempts_made == 0


# ---------------------------------------------------------------------- leases, registry


async def test_locks_are_renewed_past_the_lock_duration(conn: Connection) -> None:
    lock_ms = 300
    kept_queue, control_queue = Queue("w-renew", conn), Queue("w-norenew", conn)
    kept = await kept_queue.add("long", {})
    control = await control_queue.add("long", {})
    gate = Gate(lambda job: "kept")
    worker = Worker("w-renew", gate, conn, lock_duration_ms=lock_ms,
                    heartbeat_interval_s=0.05)
    events = Recorder(worker)
    async with started(worker):
        await gate.holding(1)
        # The control: the same lease taken by hand and never renewed.
        pulled = await conn.call("PULLB", queue="w-norenew", count=1, owner="nobody",
                                 lockTtl=lock_ms)
        assert [j["id"] for j in pulled["jobs"]] == [control.id]
        await anyio.sleep(3 * lock_ms / 1000)  # real time: three lock durations
        expired = await control_queue.get_job(control.id)
        assert expired is not None and expired.attempts_made == 1  # charged, requeued
        renewed = await kept_queue.get_job(kept.id)
        assert renewed is not None and renewed.state == "active"
        assert renewed.attempts_made == 0 and renewed.stalled_counter == 0
        gate.open()
        assert (await wait_job(conn, kept.id))["result"] == "kept"
        await worker.close()
    done = await kept_queue.get_job(kept.id)
    assert done is not None and done.attempts_made == 0
    assert [result for _, result in events.of("completed")] == ["kept"]
    assert events.of("error") == []


async def test_listed_by_list_workers_while_running(conn: Connection) -> None:
    queue = Queue("w-list", conn)

    async def processor(job: Job) -> None:
        return None

    async def listed() -> list[dict[str, Any]]:
        workers = (await conn.call("ListWorkers"))["data"]["workers"]
        return [w for w in workers if w["workerId"] == worker.id]

    worker = Worker("w-list", processor, conn, concurrency=4, name="lister",
                    heartbeat_interval_s=0.05)
    async with started(worker):
        [entry] = await listed()
        assert entry["name"] == "lister" and entry["queues"] == ["w-list"]
        assert entry["concurrency"] == 4
        assert [w["workerId"] for w in await queue.get_workers()] == [worker.id]
        job = await queue.add("j", {})
        assert (await wait_job(conn, job.id))["completed"] is True

        async def heartbeat_counts() -> bool:
            return [w["processedJobs"] for w in await listed()] == [1]
        await wait_until(heartbeat_counts)
        # A lost registration (as when its connection closes) is made again.
        await conn.call("UnregisterWorker", workerId=worker.id)

        async def registered_again() -> bool:
            return len(await listed()) == 1
        await wait_until(registered_again)
        await worker.close()
    assert await listed() == []


async def test_stale_lease_ack_is_an_error_and_batch_mates_still_complete(
        conn: Connection) -> None:
    queue = Queue("w-stale", conn)
    first, second = await queue.add_bulk([{"name": "a"}, {"name": "b"}])
    gate = Gate(lambda job: f"done {job.id}")
    worker = Worker("w-stale", gate, conn, concurrency=2)
    events = Recorder(worker)
    async with started(worker):
        await gate.holding(2)
        # Take the first job away from the worker and lease it elsewhere, as a lock
        # expiry followed by another worker's pull would.
        await gate.held[first.id].move_to_wait()
        thief = await conn.call("PULLB", queue="w-stale", count=1, owner="thief",
                                lockTtl=30_000)
        assert [j["id"] for j in thief["jobs"]] == [first.id]
        gate.open()
        assert (await wait_job(conn, second.id))["result"] == f"done {second.id}"
        await worker.close()
    assert [job.id for job, _ in events.of("completed")] == [second.id]
    [(error,)] = events.of("error")
    assert isinstance(error, LockError)
    assert await queue.get_job_state(first.id) == "active"  # still the thief's


async def test_ignored_acks_emit_nothing(conn: Connection) -> None:
    queue = Queue("w-ignored", conn)
    first, second = await queue.add_bulk([{"name": "a"}, {"name": "b"}])
    gate = Gate(lambda job: "done")
    worker = Worker("w-ignored", gate, conn, concurrency=2)
    events = Recorder(worker)
    async with started(worker):
        await gate.holding(2)
        await gate.held[first.id].discard()  # dead-lettered while its processor runs
        gate.open()
        assert (await wait_job(conn, second.id))["result"] == "done"
        await worker.close()
    assert [job.id for job, _ in events.of("completed")] == [second.id]
    assert events.of("error") == [] and events.of("failed") == []
    assert await queue.get_job_state(first.id) == "failed"
    assert worker.processed_count == 1


async def test_obliterated_while_processing_emits_nothing(conn: Connection) -> None:
    queue = Queue("w-oblit", conn)
    job = await queue.add("gone", {})
    gate = Gate(lambda job: "too late")
    worker = Worker("w-oblit", gate, conn)
    events = Recorder(worker)
    async with started(worker):
        await gate.holding(1)
        await queue.obliterate()
        gate.open()
        await worker.close()  # flushes the ACK
    assert events.of("completed") == [] and events.of("error") == []
    assert await queue.get_job_state(job.id) == "unknown"
    assert worker.processed_count == 0


# ---------------------------------------------------------------------- single mode


async def test_pull_errors_are_reported_and_retried(connect_to: Any) -> None:
    # A broker that refuses a second queue: every pull of the worker is refused.
    async with connect_to(Config(memory=True, max_queues=1)) as conn:
        await Queue("taken", conn).add("j", {})

        async def processor(job: Job) -> None:
            return None

        worker = Worker("refused", processor, conn)
        errors: list[BaseException] = []
        worker.on("error", errors.append)
        async with started(worker):
            await wait_until(lambda: len(errors) >= 2)  # reported, backed off, retried
            assert worker.is_running
            await worker.close()
        assert all("Too many queues" in str(exc) for exc in errors)


async def test_arguments_events_and_lifecycle(connect_to: Any) -> None:
    async with connect_to() as conn:

        async def processor(job: Job) -> None:
            return None

        with pytest.raises(ValueError):
            Worker("q", processor, conn, concurrency=0)
        with pytest.raises(ValueError):
            Worker("q", processor, conn, batch_size=1001)
        with pytest.raises(ValueError):
            Worker("q", processor, conn, lock_duration_ms=1000, heartbeat_interval_s=1.0)
        with pytest.raises(ValueError):
            Worker("q", processor, conn, poll_timeout_ms=60_001)
        worker = Worker("q", processor, conn, concurrency=250)
        assert worker.batch_size == 100 and worker.concurrency == 250
        with pytest.raises(ValueError):
            worker.on("finished", print)
        closed: list[str] = []

        async def on_closed() -> None:
            closed.append("async")

        worker.on("closed", lambda: closed.append("sync"))
        worker.on("closed", on_closed)
        await worker.close()  # never ran: closes at once
        assert worker.is_closed and closed == ["sync", "async"]
        with pytest.raises(RuntimeError):
            await worker.run()
