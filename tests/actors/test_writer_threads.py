"""Large batches committed in a worker thread, small ones inline (``thread_commit_ops``).

A store that declares ``threaded_apply`` (LMDB) gets its batches of at least
``thread_commit_ops`` operations applied in a worker thread, while the event loop serves
the other queues; smaller batches stay inline. These tests drive a StorageWriter over a
memory store whose large applies block in their thread until the test allows them.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
import trio
import trio.testing

from trioqueue.actors.writer import BEHIND_HOPS, StorageFailure, StorageWriter
from trioqueue.core.job import JobRecord
from trioqueue.core.writes import Writes
from trioqueue.storage.lmdb_store import LmdbStorage
from trioqueue.storage.memory import MemoryStorage

HOP = 4  # thread_commit_ops in these tests


class ThreadedStorage(MemoryStorage):
    """Applies of HOP operations or more block until a permit; every apply is logged."""

    threaded_apply = True

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.entered = threading.Event()  # a large apply is waiting for its permit
        self.applies: list[tuple[list[str], bool]] = []  # (job ids, on the trio thread)
        self.trio_thread = threading.get_ident()
        self.fail = False

    def apply(self, batches: Sequence[Writes]) -> None:
        ids = [op.job_id for b in batches for op in b.ops]
        if len(ids) >= HOP:
            self.entered.set()
            if not self.permits.acquire(timeout=5):
                raise RuntimeError("the test never let this commit finish")
            self.entered.clear()
            if self.fail:
                raise OSError("injected commit failure")
        super().apply(batches)
        self.applies.append((ids, threading.get_ident() == self.trio_thread))

    def live_ids(self) -> list[str]:
        return sorted(r["id"] for r in self.load().live_jobs)


class Inbox:
    def __init__(self) -> None:
        self.replies: list[str] = []
        self.arrived = trio.Event()

    def deliver(self, reply: dict[str, Any]) -> None:
        self.replies.append(reply["id"])
        self.arrived.set()

    async def wait_for(self, n: int) -> None:
        with trio.fail_after(5):
            while len(self.replies) < n:
                await self.arrived.wait()
                self.arrived = trio.Event()


def writes_of(*ids: str) -> Writes:
    w = Writes()
    for job_id in ids:
        w.put_job(JobRecord(id=job_id, queue="q", name="n").to_record())
    return w


def big(prefix: str, n: int = HOP) -> Writes:
    return writes_of(*(f"{prefix}{i}" for i in range(n)))


async def entered(store: ThreadedStorage) -> None:
    """Until a large apply is blocked in its worker thread (waited for off the loop)."""
    with trio.fail_after(5):
        assert await trio.to_thread.run_sync(store.entered.wait, 5)


async def test_a_large_batch_commits_in_a_thread_while_the_loop_runs_and_a_small_one_inline(
) -> None:
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    inbox = Inbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.submit(writes_of("s"))
        writer.release([(inbox, {"id": "s"})])
        assert inbox.replies == ["s"]  # inline: answered in the releasing step
        writer.submit(big("b"))
        writer.release([(inbox, {"id": "b"})])
        assert inbox.replies == ["s"]  # held for the writer's hop
        await entered(store)
        # the loop runs while the commit is in its thread: this task got here
        assert inbox.replies == ["s"] and "b0" not in store.live_ids()
        store.permits.release()
        await inbox.wait_for(2)
        assert inbox.replies == ["s", "b"]
        assert store.applies == [(["s"], True), ([f"b{i}" for i in range(HOP)], False)]
        assert writer.commits == 2 and writer.committed_ops == 1 + HOP
        nursery.cancel_scope.cancel()


async def test_off_by_default_and_for_a_store_that_does_not_ask_for_it() -> None:
    threaded = StorageWriter(ThreadedStorage(), fsync="never")  # thread_commit_ops 0
    assert threaded.thread_ops == 0
    plain = StorageWriter(MemoryStorage(), fsync="never", thread_commit_ops=HOP)
    assert plain.thread_ops == 0
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never")
    writer.submit(big("b"))
    store.permits.release()  # (inline on the trio thread: it must not block)
    writer.release([])
    assert store.applies == [([f"b{i}" for i in range(HOP)], True)]


async def test_replies_released_during_a_hop_wait_for_it_and_commit_after_it() -> None:
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    inbox = Inbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.submit(big("b"))
        writer.release([(inbox, {"id": "b"})])
        await entered(store)
        # a small batch during the hop: not inline (it could overtake the hop's jobs)
        writer.submit(writes_of("b0"))  # the same job again
        writer.release([(inbox, {"id": "again"})])
        assert inbox.replies == []
        store.permits.release()
        await inbox.wait_for(2)
        assert inbox.replies == ["b", "again"]
        assert [ids for ids, _ in store.applies] == [[f"b{i}" for i in range(HOP)], ["b0"]]
        nursery.cancel_scope.cancel()


class ReleasingEvent(threading.Event):
    """The writer's "hop applied" event: a wait on it (commit_now blocking the loop)
    first lets the blocked apply finish, so the test needs no second thread."""

    def __init__(self, store: ThreadedStorage) -> None:
        super().__init__()
        self.store = store
        self.waits = 0

    def wait(self, timeout: float | None = None) -> bool:
        if not self.is_set():
            self.waits += 1
            self.store.permits.release()
        # bounded: were the hop's thread not started yet, the wait would never end
        if not super().wait(5 if timeout is None else timeout):
            raise AssertionError("the hop's apply never came while the loop waited")
        return True


async def test_commit_now_during_a_hop_waits_for_its_apply_then_commits_after_it() -> None:
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    applied = writer._applied = ReleasingEvent(store)
    applied.set()
    inbox = Inbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.submit(big("b"))
        writer.release([(inbox, {"id": "b"})])
        await entered(store)
        writer.submit(writes_of("b0"))
        writer.commit_now()  # read-your-writes while the hop is in flight
        assert applied.waits == 1
        assert [ids for ids, _ in store.applies] == [[f"b{i}" for i in range(HOP)], ["b0"]]
        await inbox.wait_for(1)
        nursery.cancel_scope.cancel()


async def test_commit_now_at_the_first_sight_of_a_hop_finds_its_thread_started() -> None:
    """The writer task marks the hop in flight and hands the apply to a thread with no
    checkpoint between (trio.to_thread.run_sync has one): a session that runs right
    then and commits for a read must not wait for a thread that cannot start."""
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    applied = writer._applied = ReleasingEvent(store)
    applied.set()

    read = trio.Event()

    async def reader() -> None:
        with trio.fail_after(5):
            while not writer._hopping:
                await trio.lowlevel.checkpoint()
        writer.submit(writes_of("r"))
        writer.commit_now()
        read.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        nursery.start_soon(reader)
        await trio.lowlevel.checkpoint()  # the reader is watching before the hop starts
        writer.submit(big("b"))
        writer.release([])
        with trio.fail_after(5):
            await read.wait()
        nursery.cancel_scope.cancel()
    assert applied.waits == 1
    assert [ids for ids, _ in store.applies] == [[f"b{i}" for i in range(HOP)], ["r"]]


async def test_commit_awaits_the_hop_instead_of_blocking_the_loop() -> None:
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    done = trio.Event()

    async def read_your_writes() -> None:
        writer.submit(writes_of("r"))
        await writer.commit()
        done.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.submit(big("b"))
        writer.release([])
        await entered(store)
        nursery.start_soon(read_your_writes)
        await trio.testing.wait_all_tasks_blocked()
        assert not done.is_set()  # waiting for the hop, with the loop free
        store.permits.release()
        with trio.fail_after(5):
            await done.wait()
        assert [ids for ids, _ in store.applies][-1] == ["r"]
        assert store.live_ids() == sorted([f"b{i}" for i in range(HOP)] + ["r"])
        nursery.cancel_scope.cancel()


async def test_settle_holds_long_work_that_runs_far_ahead_of_a_hop() -> None:
    store = ThreadedStorage()
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    settled = trio.Event()

    async def slice_loop() -> None:
        await writer.settle()
        settled.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        writer.submit(big("b"))
        writer.release([])
        await entered(store)
        await writer.settle()  # a little ahead: a checkpoint only
        writer.submit(big("x", BEHIND_HOPS * HOP))  # far ahead, not yet released
        nursery.start_soon(slice_loop)
        await trio.testing.wait_all_tasks_blocked()
        assert not settled.is_set()
        store.permits.release()
        with trio.fail_after(5):
            await settled.wait()
        nursery.cancel_scope.cancel()


async def test_a_failed_hop_acknowledges_nothing_and_stops_the_writer() -> None:
    store = ThreadedStorage()
    store.fail = True
    writer = StorageWriter(store, fsync="never", thread_commit_ops=HOP)
    inbox = Inbox()
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.submit(big("b"))
            writer.release([(inbox, {"id": "b"})])
            await entered(store)
            store.permits.release()
            await trio.sleep_forever()  # until the writer's failure ends the nursery
    assert caught.value.subgroup(lambda e: isinstance(e, StorageFailure)) is not None
    assert writer.failed and inbox.replies == [] and store.live_ids() == []
    writer.submit(writes_of("s"))
    with pytest.raises(StorageFailure):  # inline again, and refused
        writer.release([(inbox, {"id": "s"})])
    assert inbox.replies == [] and store.live_ids() == []


def test_an_lmdb_read_waits_for_an_apply_in_another_thread(tmp_path: Any) -> None:
    store = LmdbStorage(tmp_path / "db")
    inside, go_on = threading.Event(), threading.Event()
    real_write = store._write

    def held_write(ops: list[tuple[Any, ...]]) -> None:
        inside.set()
        assert go_on.wait(5)
        real_write(ops)

    store._write = held_write  # type: ignore[method-assign]
    writes = Writes()
    record = JobRecord(id="j", queue="q", name="n").to_record()
    record["state"] = "completed"
    writes.finish_job(record, has_result=True, result=7)
    writer = threading.Thread(target=store.apply, args=([writes],))
    writer.start()
    assert inside.wait(5)
    seen: list[tuple[bool, Any]] = []
    reader = threading.Thread(target=lambda: seen.append(store.get_result("j")))
    reader.start()
    reader.join(0.05)  # bounded: the reader must still be waiting for the lock
    assert reader.is_alive() and seen == []
    go_on.set()
    writer.join(5)
    reader.join(5)
    assert seen == [(True, 7)]  # the whole commit, never a part of it
    store.close()
