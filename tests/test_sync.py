"""trioqueue.sync from plain synchronous code: a real broker in a thread of its own.

These tests are ordinary ``def`` functions (pytest-trio's trio_mode leaves them alone),
as the code that uses ``trioqueue.sync`` is: no event loop in the test's thread.
"""

from __future__ import annotations

import inspect
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import trioqueue.sync
from trioqueue.client import (
    AuthenticationError,
    CommandError,
    ConnectionLost,
    JobFailed,
    JobNotFound,
    Queue,
    ValidationError,
    WaitTimeout,
)
from trioqueue.config import Config
from trioqueue.server.run import Server
from trioqueue.sync import SyncConnection, SyncFlowNode, SyncJob, SyncQueue

BOUND_S = 20.0  # no step of these tests may hang longer than this


class ThreadedBroker:
    """A real broker (:class:`Server`) on 127.0.0.1, on a free port, running ``trio.run``
    in a thread of its own; :meth:`stop` stops it and joins the thread (bounded)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.port = 0
        self._server: Server | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="test-broker", daemon=True)

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:
            self._error = exc
        finally:
            self._ready.set()

    async def _main(self) -> None:
        async with trio.open_nursery() as nursery:
            server: Server = await nursery.start(Server(self.config).run)
            assert server.tcp_port is not None
            self._server, self.port = server, server.tcp_port
            self._token = trio.lowlevel.current_trio_token()
            self._ready.set()

    def start(self) -> ThreadedBroker:
        self._thread.start()
        assert self._ready.wait(BOUND_S), "the broker did not start"
        if self._server is None:
            raise RuntimeError(f"the broker did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._server is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._server.stop, trio_token=self._token)
        self._thread.join(BOUND_S)
        assert not self._thread.is_alive(), "the broker thread did not stop"


@pytest.fixture
def broker(configure: Callable[..., Config]) -> Iterator[ThreadedBroker]:
    running = ThreadedBroker(configure()).start()
    yield running
    running.stop()


@pytest.fixture
def conn(broker: ThreadedBroker) -> Iterator[SyncConnection]:
    with trioqueue.sync.connect(port=broker.port) as connection:
        yield connection


def threads() -> set[threading.Thread]:
    """The live threads, but trio's worker-thread cache: those idle workers are shared
    by every trio loop of the process (the test broker's storage uses them), are not
    ours, and leave on their own after a few idle seconds."""
    return {t for t in threading.enumerate() if not t.name.startswith("Trio thread")}


def sync_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == trioqueue.sync.THREAD_NAME]


def complete(conn: SyncConnection, queue: str, result: Any = None) -> str:
    """Pull one job of ``queue`` and ACK it, over the raw protocol; its id."""
    job = conn.call("PULL", queue=queue)["job"]
    assert job is not None, f"nothing to pull in {queue}"
    conn.call("ACK", id=job["id"], result=result)
    return str(job["id"])


# ---------------------------------------------------------------------------- producer, queries


def test_add_and_read_back(conn: SyncConnection) -> None:
    emails = conn.queue("s-emails")
    assert conn.queue("s-emails") is emails
    job = emails.add("send", {"to": "a@b.c"}, priority=2, attempts=5, job_id="m1")
    assert isinstance(job, SyncJob) and job.id == "m1" and job.data == {"to": "a@b.c"}
    got = emails.get_job("m1")
    assert isinstance(got, SyncJob) and got.queue is emails
    assert (got.name, got.priority, got.max_attempts, got.state) == (
        "send", 2, 5, "prioritized")
    assert got.timestamp is not None and abs(got.timestamp - time.time() * 1000) < 60_000
    assert got.get_state() == "prioritized" == emails.get_job_state("m1")
    assert emails.get_job("nope") is None
    bulk = emails.add_bulk([{"name": "a", "data": {"i": 1}},
                            {"name": "b", "data": {"i": 2}, "opts": {"job_id": "m2"}}])
    assert [j.name for j in bulk] == ["a", "b"] and bulk[1].id == "m2"
    assert all(isinstance(j, SyncJob) for j in bulk)
    assert emails.count() == 3
    counts = emails.get_job_counts()
    assert (counts["waiting"], counts["prioritized"]) == (2, 1)
    assert emails.get_counts_per_priority() == {0: 2, 2: 1}
    listed = emails.get_jobs("waiting")
    assert [j.id for j in listed] == [bulk[0].id, "m2"]
    by_custom = emails.get_job_by_custom_id("m2")
    assert by_custom is not None and by_custom.id == "m2"
    emails.add_job_log("m1", "hello")
    assert emails.get_job_logs("m1")["count"] == 1
    got.log("again")
    assert [entry["message"] for entry in got.get_logs()["logs"]] == ["hello", "again"]
    emails.pause()
    assert emails.is_paused() is True
    emails.resume()
    assert emails.is_paused() is False
    bulk[0].remove()
    assert emails.get_job(bulk[0].id) is None
    assert emails.drain() == 2
    emails.obliterate()
    assert emails.count() == 0


def test_results_progress_and_dependencies(conn: SyncConnection) -> None:
    q = conn.queue("s-work")
    first = q.add("one", {}, job_id="d1")
    second = q.add("two", {}, job_id="d2", depends_on=["d1"])
    assert second.state is None and second.get_state() == "waiting-children"
    pulled = conn.call("PULL", queue="s-work")["job"]
    assert pulled["id"] == "d1"
    q.update_job_progress("d1", 40, "going")
    assert q.get_progress("d1") == {"progress": 40, "message": "going"}
    conn.call("ACK", id="d1", result={"n": 1})
    assert q.get_result("d1") == {"n": 1} and q.get_progress("d1") is None
    assert first.get_state() == "completed"
    assert q.get_children_values("d2") == {"s-work:d1": {"n": 1}}
    assert second.get_children_values() == {"s-work:d1": {"n": 1}}
    assert q.get_job_dependencies("d2")["processed"] == {"s-work:d1": {"n": 1}}
    assert q.get_dependencies("d2", "processed") == {"processed": {"s-work:d1": {"n": 1}},
                                                     "count": 1}
    delayed = q.add("later", {}, delay=60_000)
    q.promote_job(delayed.id)
    assert q.get_job_state(delayed.id) == "waiting"


def test_wait_job_until_finished(conn: SyncConnection) -> None:
    q = conn.queue("s-wait")
    job = q.add("w", {})
    # Completed by another thread, over the raw protocol, while this one waits.
    def later() -> None:
        time.sleep(0.2)
        complete(conn, "s-wait", 42)

    worker = threading.Thread(target=later)
    worker.start()
    assert q.wait_job_until_finished(job.id, ttl=BOUND_S) == 42
    worker.join(BOUND_S)
    done = q.add("w", {})
    complete(conn, "s-wait", "x")
    assert done.wait_until_finished(ttl=BOUND_S) == "x"  # already finished
    doomed = q.add("w", {}, attempts=1)
    pulled = conn.call("PULL", queue="s-wait")["job"]
    conn.call("FAIL", id=pulled["id"], error="boom")
    with pytest.raises(JobFailed, match="boom"):
        q.wait_job_until_finished(doomed.id, ttl=BOUND_S)
    idle = q.add("w", {})
    started = time.monotonic()
    with pytest.raises(WaitTimeout):
        q.wait_job_until_finished(idle.id, ttl=0.3)
    assert time.monotonic() - started < 5
    with pytest.raises(JobNotFound):
        q.wait_job_until_finished("ghost", ttl=BOUND_S)


def test_errors_are_the_async_clients_typed_exceptions(conn: SyncConnection) -> None:
    q = conn.queue("s-err")
    with pytest.raises(JobNotFound):
        q.remove("nope")
    with pytest.raises(JobNotFound):
        q.update_job_progress("nope", 5)
    with pytest.raises(ValidationError, match="unknown job option"):
        q.add("n", {}, atempts=3)
    with pytest.raises(ValidationError):
        q.add_bulk([{"name": "ok"}, {"name": ""}])
    assert q.count() == 0
    with pytest.raises(ValidationError):
        conn.queue("bad name!")
    with pytest.raises(CommandError, match="Unknown command"):
        conn.call("NoSuchCommand")
    with pytest.raises(ValidationError, match="reserved"):
        conn.flow_producer().add({"queue_name": "s-err", "data": {"__x": 1}})


# ---------------------------------------------------------------------------- flows


def test_flow_producer(conn: SyncConnection) -> None:
    flow = conn.flow_producer()
    node = flow.add({"name": "parent", "queue_name": "s-fp", "opts": {"job_id": "sp"},
                     "children": [{"name": "kid", "queue_name": "s-fk"},
                                  {"name": "kid", "queue_name": "s-fk"}]})
    assert isinstance(node, SyncFlowNode) and isinstance(node.job, SyncJob)
    assert node.job.state == "waiting-children"
    assert [c.job.state for c in node.children] == ["waiting", "waiting"]
    assert node.children[0].job.queue is conn.queue("s-fk")
    kids = [complete(conn, "s-fk", i) for i in range(2)]
    assert node.job.get_state() == "waiting"
    assert node.job.get_children_values() == {f"s-fk:{k}": i for i, k in enumerate(kids)}
    again = flow.get_flow("sp")
    assert again is not None and [n.job.state for n in again.walk()] == [
        "waiting", "completed", "completed"]
    assert flow.get_flow("nobody") is None
    bulk = flow.add_bulk([{"queue_name": "s-fb"}, {"queue_name": "s-fb"}])
    assert len(bulk) == 2 and conn.queue("s-fb").count() == 2
    chain = flow.add_chain([{"queue_name": "s-fc"}, {"queue_name": "s-fc"}])
    assert [j.state for j in chain] == ["waiting", "waiting-children"]
    parallel, final = flow.add_bulk_then([{"queue_name": "s-ft"}], {"queue_name": "s-ft"})
    assert final.depends_on == [parallel[0].id]


# ---------------------------------------------------------------------------- threads


def test_calls_from_four_threads_at_once(conn: SyncConnection) -> None:
    q = conn.queue("s-threads")
    barrier = threading.Barrier(4, timeout=BOUND_S)
    added: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def producer(n: int) -> None:
        try:
            barrier.wait()
            ids = [q.add("t", {"thread": n, "i": i}).id for i in range(25)]
            assert [q.get_job_state(i) for i in ids] == ["waiting"] * 25
            added[n] = ids
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=producer, args=(n,)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(BOUND_S)
    assert not errors, errors
    assert sorted(added) == [0, 1, 2, 3]
    all_ids = [i for ids in added.values() for i in ids]
    assert len(set(all_ids)) == 100 and q.count() == 100


def test_a_blocked_wait_does_not_hold_up_other_threads(conn: SyncConnection) -> None:
    q = conn.queue("s-block")
    job = q.add("slow", {})
    result: list[Any] = []
    waiter = threading.Thread(
        target=lambda: result.append(q.wait_job_until_finished(job.id, ttl=BOUND_S)))
    waiter.start()
    time.sleep(0.1)
    started = time.monotonic()
    for _ in range(10):  # the waiter's call is in flight all along
        q.add("fast", {})
    assert time.monotonic() - started < 5 and waiter.is_alive()
    complete(conn, "s-block", "ok")
    waiter.join(BOUND_S)
    assert result == ["ok"]


# ---------------------------------------------------------------------------- closing


def test_close_stops_the_loop_thread(broker: ThreadedBroker) -> None:
    before = threads()
    conn = trioqueue.sync.connect(port=broker.port)
    assert len(sync_threads()) == 1
    conn.queue("s-close").add("n", {})
    conn.close()
    assert threads() == before and sync_threads() == []
    assert conn.closed
    conn.close()  # idempotent
    with pytest.raises(ConnectionLost):
        conn.queue("s-close").count()
    with pytest.raises(ConnectionLost):
        conn.call("Ping")
    with trioqueue.sync.connect(port=broker.port) as again:  # the job was written
        assert again.queue("s-close").count() == 1
    assert threads() == before


def test_close_ends_calls_in_flight(broker: ThreadedBroker) -> None:
    before = threads()
    conn = trioqueue.sync.connect(port=broker.port)
    job = conn.queue("s-inflight").add("never", {})
    outcome: list[BaseException] = []

    def wait() -> None:
        try:
            conn.queue("s-inflight").wait_job_until_finished(job.id, ttl=None)
        except BaseException as exc:
            outcome.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.2)
    started = time.monotonic()
    conn.close()
    waiter.join(BOUND_S)
    assert not waiter.is_alive() and time.monotonic() - started < 10
    assert len(outcome) == 1 and isinstance(outcome[0], ConnectionLost), outcome
    assert threads() == before


def test_connect_fails_fast_and_leaves_nothing() -> None:
    before = threads()
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(ConnectionLost, match="cannot connect"):
        trioqueue.sync.connect(port=port, connect_timeout_s=0.3)
    assert threads() == before


def test_a_token_is_checked_at_connect(configure: Callable[..., Config]) -> None:
    broker = ThreadedBroker(configure(auth_tokens=["s3cret"])).start()
    try:
        with pytest.raises(AuthenticationError):
            trioqueue.sync.connect(port=broker.port)
        with pytest.raises(AuthenticationError):
            trioqueue.sync.connect(port=broker.port, token="wrong")
        with trioqueue.sync.connect(port=broker.port, token="s3cret") as conn:
            assert conn.queue("s-auth").count() == 0
        assert sync_threads() == []
    finally:
        broker.stop()


def test_embedded_broker_commits_on_close(tmp_path: Path) -> None:
    before = threads()
    config = Config(data_dir=str(tmp_path / "embedded"), fsync="never")
    with trioqueue.sync.connect(embedded=True, config=config) as conn:
        q = conn.queue("s-emb")
        q.add("keep", {"k": 1}, job_id="kept")
        q.add("done", {})
        assert complete(conn, "s-emb", "r") == "kept"
        assert q.wait_job_until_finished("kept", ttl=BOUND_S) == "r"
    assert threads() == before
    config = Config(data_dir=str(tmp_path / "embedded"), fsync="never")
    with trioqueue.sync.connect(embedded=True, config=config) as conn:
        q = conn.queue("s-emb")
        assert q.get_job_state("kept") == "completed" and q.count() == 1
    assert threads() == before


async def test_a_trio_program_is_told_to_use_the_async_client(
        broker: ThreadedBroker) -> None:
    with trioqueue.sync.connect(port=broker.port) as conn:
        with pytest.raises(RuntimeError, match="blocking"):
            conn.queue("s-trio").count()


# ---------------------------------------------------------------------------- the surface


SYNC_QUEUE_METHODS = [
    "add", "add_bulk", "get_job", "get_job_state", "get_job_counts",
    "get_counts_per_priority", "get_jobs", "get_job_by_custom_id", "count", "get_result",
    "get_progress", "update_job_progress", "add_job_log", "get_job_logs",
    "get_children_values", "get_job_dependencies", "get_dependencies",
    "wait_job_until_finished", "pause", "resume", "is_paused", "remove", "retry_job",
    "promote_job", "drain", "obliterate",
]


@pytest.mark.parametrize("name", SYNC_QUEUE_METHODS)
def test_sync_queue_mirrors_queue(name: str, conn: SyncConnection) -> None:
    method = getattr(conn.queue("s-surface"), name)
    assert not inspect.iscoroutinefunction(method)
    expected = list(inspect.signature(getattr(Queue, name)).parameters)[1:]
    if name == "wait_job_until_finished":  # no QueueEvents from sync code
        expected.remove("queue_events")
    assert list(inspect.signature(method).parameters) == expected
    assert method.__doc__ == getattr(Queue, name).__doc__ or name == (
        "wait_job_until_finished")
    assert getattr(SyncQueue, name) is not None


def test_sync_job_has_every_job_attribute(conn: SyncConnection) -> None:
    job = conn.queue("s-attrs").add("n", {"a": 1}, delay=5_000)
    assert set(vars(job)) <= set(SyncJob.__annotations__) | {"queue"}
    fetched = conn.queue("s-attrs").get_job(job.id)
    assert fetched is not None and fetched.delay == 5_000 and fetched.raw["id"] == job.id
