"""Durability policies of the storage writer, seen through the replies a client gets.

The broker runs on a :class:`GatedStorage`: a memory store whose ``sync()`` (the fsync,
which the writer runs in a worker thread) blocks until the test hands out a permit, and
which records which jobs each commit wrote and which commits each sync covered. So a
test can hold the disk still and watch which replies are released meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.actors.broker import Broker
from trioqueue.actors.writer import StorageFailure, StorageWriter
from trioqueue.config import Config
from trioqueue.core.job import JobRecord
from trioqueue.core.writes import PutJob, Writes
from trioqueue.server.run import Server
from trioqueue.storage.memory import MemoryStorage
from trioqueue.storage.port import Fenced
from trioqueue.testing import RawClient

Connect = Callable[[], Awaitable[RawClient]]


class GatedStorage(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.commits: list[set[str]] = []  # ids of the jobs each apply() wrote
        self.syncs_started = 0
        self.synced_commits = 0  # how many commits (in order) a finished sync covers

    def apply(self, batches: Sequence[Writes]) -> None:
        super().apply(batches)
        self.commits.append({op.job_id for b in batches for op in b.ops if type(op) is PutJob})

    def sync(self) -> None:  # runs in a worker thread
        covered = len(self.commits)  # a sync covers the commits made before it began
        self.syncs_started += 1
        if not self.permits.acquire(timeout=10):
            raise RuntimeError("the test never let this sync finish")
        super().sync()
        self.synced_commits = max(self.synced_commits, covered)

    def allow(self, n: int = 1) -> None:
        self.permits.release(n)

    def committed(self, job_id: str) -> bool:
        return any(job_id in ids for ids in self.commits)

    def synced(self, job_id: str) -> bool:
        """Whether a finished sync began after the commit that wrote this job."""
        return any(job_id in ids for ids in self.commits[: self.synced_commits])


@asynccontextmanager
async def running(tmp_path: Path, storage: GatedStorage, **overrides: Any
                  ) -> AsyncIterator[Connect]:
    """A broker on ``storage``; on exit the gate opens and the broker shuts down."""
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=str(tmp_path),
                    **overrides)
    clients: list[RawClient] = []
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            Server(config, broker=Broker(config, storage=storage)).run)

        async def connect() -> RawClient:
            assert server.tcp_port is not None
            client = await RawClient.connect(server.tcp_port)
            clients.append(client)
            return client

        try:
            yield connect
        finally:
            storage.allow(1000)  # never leave the broker's last flush stuck in a thread
            for client in clients:
                await client.aclose()
            server.stop()


async def wait_until(predicate: Callable[[], bool], timeout_s: float = 2.0) -> None:
    with trio.fail_after(timeout_s):
        while not predicate():
            await trio.sleep(0.005)


async def no_reply(client: RawClient, req_id: str, wait_s: float = 0.3) -> None:
    """Assert that ``req_id`` is not answered within ``wait_s`` (absence is under test)."""
    with trio.move_on_after(wait_s):
        reply = await client.reply_to(req_id)
        pytest.fail(f"reply released while its fsync was still running: {reply}")


# ------------------------------------------------------------------ always


async def test_always_releases_a_reply_only_after_its_sync(tmp_path: Path) -> None:
    storage = GatedStorage()
    async with running(tmp_path, storage, fsync="always") as connect:
        client = await connect()
        push = await client.send("PUSH", queue="q", name="n", data=1)
        await wait_until(lambda: storage.syncs_started == 1)
        await no_reply(client, push)
        assert len(storage.commits) == 1  # committed, but not yet on disk
        # The fsync runs off the event loop: the broker keeps answering meanwhile.
        with trio.fail_after(1):
            await client.ok("Ping")
        storage.allow()
        with trio.fail_after(2):
            reply = await client.reply_to(push)
        assert reply["ok"] is True and storage.synced(reply["id"])


async def test_always_syncs_once_per_batch_and_every_reply_is_synced(tmp_path: Path) -> None:
    storage = GatedStorage()
    storage.allow(1000)
    async with running(tmp_path, storage, fsync="always") as connect:
        client = await connect()
        await client.send_raw(b"".join(
            client.frame({"cmd": "PUSH", "queue": "q", "name": "n", "data": i, "reqId": f"p{i}"})
            for i in range(20)))
        with trio.fail_after(2):
            for i in range(20):
                reply = await client.reply_to(f"p{i}")
                assert reply["ok"] is True and storage.synced(reply["id"]), reply
        assert 1 <= storage.syncs_started < 20  # group commit: not one fsync per command


async def test_always_a_commit_made_during_a_sync_waits_for_the_next_sync(
    tmp_path: Path,
) -> None:
    storage = GatedStorage()
    async with running(tmp_path, storage, fsync="always") as connect:
        first, second, probe = await connect(), await connect(), await connect()
        a = await first.send("PUSH", queue="q", name="a", data=1)
        await wait_until(lambda: storage.syncs_started == 1)
        c = await second.send("PUSH", queue="q", name="c", data=2)
        # A lookup of an unknown id commits pending writes on the spot (read-your-writes):
        # nudge until the second push is committed while the first sync still runs.
        with trio.fail_after(2):
            while len(storage.commits) < 2:
                await probe.call("GetJob", id="no-such-job")
                await trio.sleep(0.005)
        storage.allow()  # only the first sync finishes; it began before the 2nd commit
        with trio.fail_after(2):
            assert (await first.reply_to(a))["ok"] is True
        with trio.move_on_after(0.3):
            early = await second.reply_to(c)
            assert storage.synced(early["id"]), f"released before any sync covered it: {early}"
        storage.allow()
        with trio.fail_after(2):
            late = await second.reply_to(c)
        assert storage.synced(late["id"])


# ------------------------------------------------------------------ interval


async def test_interval_plain_push_does_not_wait_but_durable_push_does(tmp_path: Path) -> None:
    storage = GatedStorage()
    async with running(tmp_path, storage, fsync="interval", fsync_interval_s=60.0) as connect:
        client = await connect()
        with trio.fail_after(1):
            plain = await client.ok("PUSH", queue="q", name="n", data=1)
        assert storage.committed(plain["id"]) and storage.syncs_started == 0

        durable = await client.send("PUSH", queue="q", name="n", data=2, durable=True)
        await wait_until(lambda: storage.syncs_started == 1)
        await no_reply(client, durable)
        storage.allow()
        with trio.fail_after(2):
            reply = await client.reply_to(durable)
        assert reply["ok"] is True and storage.synced(reply["id"])

        with trio.fail_after(1):
            await client.ok("PUSH", queue="q", name="n", data=3)
        assert storage.syncs_started == 1


async def test_interval_commits_reach_the_disk_within_the_interval(tmp_path: Path) -> None:
    storage = GatedStorage()
    storage.allow(1000)
    async with running(tmp_path, storage, fsync="interval", fsync_interval_s=0.05) as connect:
        client = await connect()
        pushed = await client.ok("PUSH", queue="q", name="n", data=1)
        await wait_until(lambda: storage.synced(pushed["id"]), timeout_s=1.0)


async def test_interval_shutdown_syncs_what_is_committed(tmp_path: Path) -> None:
    storage = GatedStorage()
    storage.allow(1000)
    async with running(tmp_path, storage, fsync="interval", fsync_interval_s=60.0) as connect:
        client = await connect()
        pushed = await client.ok("PUSH", queue="q", name="n", data=1)
        assert not storage.synced(pushed["id"])
    assert storage.synced(pushed["id"])


# ------------------------------------------------------------------ never


async def test_never_does_not_sync_per_batch_nor_at_shutdown(tmp_path: Path) -> None:
    storage = GatedStorage()  # closed gate: a sync would hold its reply back
    async with running(tmp_path, storage, fsync="never") as connect:
        client = await connect()
        with trio.fail_after(2):
            for i in range(5):
                pushed = await client.ok("PUSH", queue="q", name="n", data=i)
                assert storage.committed(pushed["id"])
        assert len(storage.commits) >= 5
        assert storage.syncs_started == 0
    assert storage.syncs_started == 0


class FailingStorage(MemoryStorage):
    """Fails every commit once armed, as a disk that went away would."""

    armed = False

    def apply(self, batches: Any) -> None:
        if self.armed:
            raise OSError("injected commit failure")
        super().apply(batches)


async def test_a_failed_commit_stops_the_broker_and_acknowledges_nothing(
    tmp_path: Path,
) -> None:
    storage = FailingStorage()
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=str(tmp_path / "d"),
                    fsync="interval")
    replies: list[dict[str, Any]] = []
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            server: Server = await nursery.start(
                Server(config, broker=Broker(config, storage=storage)).run)
            assert server.tcp_port is not None
            client = await RawClient.connect(server.tcp_port)
            await client.ok("PUSH", queue="q", name="n", data=1)
            storage.armed = True
            await client.send("PUSH", queue="q", name="n", data=2)
            with trio.fail_after(5):
                while True:  # until the broker dies and closes the connection
                    try:
                        replies.append(await client.receive())
                    except (EOFError, trio.BrokenResourceError):
                        break
                await trio.sleep_forever()
    assert caught.value.subgroup(lambda e: isinstance(e, StorageFailure)) is not None
    assert not any(r.get("ok") for r in replies), replies


async def test_timer_transitions_are_committed_without_any_reply(tmp_path: Path) -> None:
    storage = MemoryStorage()
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=str(tmp_path / "d"),
                    fsync="interval")
    async with trio.open_nursery() as nursery:
        server: Server = await nursery.start(
            Server(config, broker=Broker(config, storage=storage)).run)
        assert server.tcp_port is not None
        client = await RawClient.connect(server.tcp_port)
        pushed = await client.ok("PUSH", queue="q", name="n", data=1)
        await client.ok("PULL", queue="q", owner="w", lockTtl=30)
        # No command follows: the lock expiry alone must reach storage.
        with trio.fail_after(5):
            while True:
                live = {r["id"]: r for r in storage.load().live_jobs}
                if live[pushed["id"]]["state"] == "queued":
                    break
                await trio.sleep(0.01)
        assert live[pushed["id"]].get("attempts") == 1
        server.stop()


# ------------------------------------------------------------------ off the trio thread
#
# A store whose commit blocks (a network store) declares ``apply_blocks``; the writer
# then never calls apply() on the trio thread. These tests drive a StorageWriter
# directly: the broker's actors still commit synchronously before reads.


class BlockingStorage(MemoryStorage):
    """A store whose apply() blocks in its worker thread until the test allows it.

    ``entered`` is set (on the trio thread, through ``trio.from_thread``) while an
    apply is blocked, so a test can act during the commit without guessing its timing.
    """

    apply_blocks = True

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.entered = trio.Event()
        self.blocked = False  # an apply is waiting for its permit right now
        self.applies: list[int] = []  # batches per finished apply(), in order
        self.apply_threads: set[int] = set()
        self.syncs = 0
        self.fail = False

    def apply(self, batches: Sequence[Writes]) -> None:
        self.apply_threads.add(threading.get_ident())
        self.blocked = True
        trio.from_thread.run_sync(self.entered.set)
        try:
            if not self.permits.acquire(timeout=5):
                raise RuntimeError("the test never let this commit finish")
        finally:
            self.blocked = False
            self.entered = trio.Event()  # a fresh one for the next apply
        if self.fail:
            raise OSError("injected commit failure")
        super().apply(batches)
        self.applies.append(len(batches))

    def sync(self) -> None:
        assert not self.blocked, "fsync ran while a commit was in flight"
        self.syncs += 1

    def live_ids(self) -> list[str]:
        return [r["id"] for r in self.load().live_jobs]


class Inbox:
    """A replier that records what it was handed, and says when it was."""

    def __init__(self) -> None:
        self.replies: list[dict[str, Any]] = []
        self.arrived = trio.Event()

    def deliver(self, reply: dict[str, Any]) -> None:
        self.replies.append(reply)
        self.arrived.set()


def job_writes(job_id: str, *, durable: bool = False) -> Writes:
    w = Writes()
    w.put_job(JobRecord(id=job_id, queue="q", name="n").to_record())
    w.durable = durable
    return w


async def test_off_thread_commit_keeps_the_loop_running_and_replies_after_it() -> None:
    store = BlockingStorage()
    writer = StorageWriter(store, fsync="never")
    inbox = Inbox()
    progressed = trio.Event()

    async def another_queue() -> None:
        await store.entered.wait()
        # this task runs on the trio thread while the commit is blocked in its thread
        assert store.blocked
        progressed.set()

    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        nursery.start_soon(another_queue)
        writer.submit(job_writes("a"))
        writer.release([(inbox, {"ok": True, "id": "a"})])
        assert store.live_ids() == [] and inbox.replies == []  # nothing inline
        with trio.fail_after(5):
            await progressed.wait()
        assert inbox.replies == [] and store.live_ids() == []  # still in flight
        store.permits.release()
        with trio.fail_after(5):
            await inbox.arrived.wait()
        assert inbox.replies == [{"ok": True, "id": "a"}]
        assert store.live_ids() == ["a"]
        assert threading.get_ident() not in store.apply_threads
        nursery.cancel_scope.cancel()


async def test_off_thread_one_hop_per_batch_and_later_writes_wait_for_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = BlockingStorage()
    writer = StorageWriter(store, fsync="always")  # the fsync rides in the same hop
    hops: list[str] = []
    real_run_sync = trio.to_thread.run_sync

    async def counting_run_sync(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await real_run_sync(fn, *args, **kw)

    monkeypatch.setattr(trio.to_thread, "run_sync", counting_run_sync)
    first, second = Inbox(), Inbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        for job_id in ("a", "b", "c"):  # three queues' batches, one release each
            writer.submit(job_writes(job_id))
            writer.release([(first, {"id": job_id})])
        with trio.fail_after(5):
            await store.entered.wait()
        # released during the commit: not covered by it, so it waits for the next hop
        writer.submit(job_writes("d"))
        writer.release([(second, {"id": "d"})])
        store.permits.release()
        with trio.fail_after(5):
            while len(first.replies) < 3:
                await first.arrived.wait()
                first.arrived = trio.Event()
        assert [r["id"] for r in first.replies] == ["a", "b", "c"]
        assert second.replies == [] and store.applies == [3]
        store.permits.release()
        with trio.fail_after(5):
            await second.arrived.wait()
        assert store.applies == [3, 1] and store.syncs == 2
        assert len(hops) == 2  # one thread hop per batch, its fsync included
        assert writer.commits == 2 and writer.committed_ops == 4
        nursery.cancel_scope.cancel()


async def test_off_thread_commit_now_refuses_and_commit_waits_for_the_hop() -> None:
    store = BlockingStorage()
    writer = StorageWriter(store, fsync="interval")
    writer.submit(job_writes("a"))
    with pytest.raises(RuntimeError, match="await writer.commit"):
        writer.commit_now()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        done = trio.Event()

        async def read_your_writes() -> None:
            await writer.commit()
            assert store.live_ids() == ["a"]
            done.set()

        nursery.start_soon(read_your_writes)
        with trio.fail_after(5):
            await store.entered.wait()
        assert not done.is_set()
        store.permits.release()
        with trio.fail_after(5):
            await done.wait()
        await writer.commit()  # nothing pending: returns at once
        assert store.applies == [1]
        nursery.cancel_scope.cancel()


async def test_off_thread_failed_commit_acknowledges_nothing_and_stops() -> None:
    store = BlockingStorage()
    store.fail = True
    writer = StorageWriter(store, fsync="never")
    inbox = Inbox()
    waited: list[BaseException] = []
    waiter_done = trio.Event()

    async def read_your_writes() -> None:
        try:
            await writer.commit()
        except StorageFailure as exc:
            waited.append(exc)
        waiter_done.set()

    async with trio.open_nursery() as outside:  # the reader outlives the writer's nursery
        writer.submit(job_writes("a"))
        writer.release([(inbox, {"id": "a"})])
        outside.start_soon(read_your_writes)
        with pytest.raises(BaseExceptionGroup) as caught:
            async with trio.open_nursery() as nursery:
                await nursery.start(writer.run)
                with trio.fail_after(5):
                    await store.entered.wait()
                store.permits.release()
                await trio.sleep_forever()  # until the writer's failure ends the nursery
        with trio.fail_after(5):
            await waiter_done.wait()
    assert caught.value.subgroup(lambda e: isinstance(e, StorageFailure)) is not None
    assert len(waited) == 1  # the reader waiting on the commit raised, it did not hang
    assert writer.failed and inbox.replies == [] and store.live_ids() == []
    writer.submit(job_writes("b"))
    writer.release([(inbox, {"id": "b"})])
    assert inbox.replies == []
    with pytest.raises(StorageFailure):
        await writer.commit()


async def test_off_thread_interval_fsync_rides_in_the_writer_hop() -> None:
    store = BlockingStorage()
    store.permits.release(100)
    writer = StorageWriter(store, fsync="interval", fsync_interval_s=0.01)
    inbox = Inbox()
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        nursery.start_soon(writer.run_interval_sync)
        writer.submit(job_writes("a"))
        writer.release([(inbox, {"id": "a"})])
        with trio.fail_after(5):
            await inbox.arrived.wait()
            while store.syncs == 0:  # the interval timer, not the commit, asks for it
                await trio.sleep(0.01)
        assert store.applies == [1]
        nursery.cancel_scope.cancel()
    await writer.flush()
    assert writer.idle


async def test_inline_commit_is_commit_now_without_a_checkpoint() -> None:
    store = MemoryStorage()
    writer = StorageWriter(store, fsync="interval")
    writer.submit(job_writes("a"))
    with trio.CancelScope() as scope:
        scope.cancel()  # a checkpoint would raise Cancelled here
        await writer.commit()
    assert [r["id"] for r in store.load().live_jobs] == ["a"]


class FencedStorage(BlockingStorage):
    """A cluster's store whose next commit the fence refuses (another broker took the
    queue): nothing of it is applied."""

    def apply(self, batches: Sequence[Writes]) -> None:
        try:
            super().apply(batches)
        except OSError:
            raise Fenced.lost("q", 1) from None


async def test_a_fenced_off_writer_answers_every_reply_with_a_retriable_error() -> None:
    """A commit refused by the fence applied nothing: its replies, those released
    meanwhile and those released during the grace are answered with the reason and
    'retry' (no commit is attempted any more), and only then does the writer stop."""
    store = FencedStorage()
    store.fail = True
    writer = StorageWriter(store, fsync="never", refusal_grace_s=0.2)
    first, second, late = Inbox(), Inbox(), Inbox()
    error = ("Not applied: this broker lost the lease of queue 'q' (epoch 1) to another "
             "broker; retry")
    stopped_at: list[float] = []
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)
            writer.submit(job_writes("a"))
            writer.release([(first, {"id": "a", "reqId": "r1"})])
            with trio.fail_after(5):
                await store.entered.wait()
            writer.submit(job_writes("b"))  # (waits for the next hop)
            writer.release([(second, {"id": "b", "reqId": "r2"})])
            store.permits.release()
            with trio.fail_after(5):
                await first.arrived.wait()
            failed_at = trio.current_time()
            writer.submit(job_writes("c"))  # during the grace: refused at once
            writer.release([(late, {"id": "c", "reqId": "r3"})])
            try:
                await trio.sleep_forever()
            finally:
                stopped_at.append(trio.current_time() - failed_at)
    assert caught.value.subgroup(lambda e: isinstance(e, StorageFailure)) is not None
    assert first.replies == [{"ok": False, "error": error, "reqId": "r1"}]
    assert second.replies == [{"ok": False, "error": error, "reqId": "r2"}]
    assert late.replies == [{"ok": False, "error": error, "reqId": "r3"}]
    assert stopped_at[0] >= 0.15  # the grace, answering
    assert store.live_ids() == [] and store.applies == []
    await writer.commit()  # (fenced off: nothing more to wait for)
