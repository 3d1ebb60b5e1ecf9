"""A store whose calls block (``apply_blocks``): the broker commits and reads it off the
trio thread, and every read of finished jobs still sees what was acknowledged."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.conftest import make_config
from trioqueue.actors.broker import Broker
from trioqueue.server.run import Server
from trioqueue.storage.memory import MemoryStorage
from trioqueue.testing import RawClient
from trioqueue.testing.faults import FaultyStorage


@pytest.fixture
async def client(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[RawClient]:
    config = make_config(tmp_path, memory=True)
    store = FaultyStorage(MemoryStorage(), apply_blocks=True)
    server: Server = await nursery.start(Server(config, Broker(config, storage=store)).run)
    assert server.tcp_port is not None and server.broker.writer.off_thread
    raw = await RawClient.connect(server.tcp_port)
    yield raw
    await raw.aclose()
    server.stop()


async def test_finished_jobs_are_read_off_thread_and_current(client: RawClient) -> None:
    ids = (await client.ok("PUSHB", queue="b", jobs=[
        {"name": "n", "data": i, "customId": f"c{i}"} for i in range(5)]))["ids"]
    pulled = await client.ok("PULLB", queue="b", count=5)
    await client.ok("ACKB", ids=[j["id"] for j in pulled["jobs"]], results=[1] * 5)
    assert (await client.ok("GetState", id=ids[0]))["state"] == "completed"
    assert (await client.ok("GetResult", id=ids[1]))["result"] == 1
    listed = await client.ok("GetJobs", queue="b", state="completed", offset=2, limit=2)
    assert [j["id"] for j in listed["jobs"]] == ids[2:4]
    # A custom id held by a finished job is retired and pushed again.
    again = await client.ok("PUSH", queue="b", name="n", data=9, jobId="c0")
    assert again["id"] == "c0"
    assert (await client.ok("GetState", id="c0"))["state"] == "waiting"
    await client.ok("Obliterate", queue="b")
    assert (await client.ok("GetJobCounts", queue="b"))["counts"]["completed"] == 0


class GatedStore(FaultyStorage):
    """Commits wait for ``gate`` (a threading.Event) once ``armed``; ``entered`` says a
    commit is waiting."""

    def __init__(self) -> None:
        super().__init__(MemoryStorage(), apply_blocks=True)
        self.armed = False
        self.entered = threading.Event()
        self.gate = threading.Event()

    def apply(self, batches: Any) -> None:
        if self.armed:
            self.entered.set()
            self.gate.wait(30)
        super().apply(batches)


async def test_job_events_wait_for_the_commit_with_the_replies(
        nursery: trio.Nursery, tmp_path: Path) -> None:
    """A subscriber never hears of a change before the commit that makes it true, even
    when the commit happens in a worker thread after the queue has moved on."""
    config = make_config(tmp_path, memory=True)
    store = GatedStore()
    server: Server = await nursery.start(Server(config, Broker(config, storage=store)).run)
    assert server.tcp_port is not None
    seen: list[dict[str, Any]] = []
    # job events only: the broker-wide ones (client:connected, queue:created) tell of
    # nothing a commit makes true
    server.broker.events.subscribe(
        lambda events: seen.extend(e for e in events if ":" not in e["eventType"]))
    client = await RawClient.connect(server.tcp_port)
    try:
        store.armed = True
        req = await client.send("PUSH", queue="ev", name="n", data=1)
        with trio.fail_after(10):
            while not store.entered.is_set():
                await trio.sleep(0.005)
        assert seen == []  # the push ran, its commit is held: no event yet
        store.gate.set()
        reply = await client.reply_to(req)
        with trio.fail_after(10):
            while not seen:
                await trio.sleep(0.005)
        assert [(e["eventType"], e["jobId"]) for e in seen] == [("pushed", reply["id"])]
    finally:
        store.gate.set()
        await client.aclose()
        server.stop()
