"""A queue actor built from in-memory fakes, without a Broker: what it needs is what it
is given (actors.ports), and nothing reaches back to the broker."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
import trio

import trioqueue
from trioqueue.actors.clock import TrioClock
from trioqueue.actors.ports import QueueLimits, limits_from
from trioqueue.actors.queue_actor import QueueActor
from trioqueue.actors.request import Replier, Request, deliver_all
from trioqueue.config import Config
from trioqueue.core.commands.table import QUEUE_HANDLERS
from trioqueue.core.writes import Writes
from trioqueue.storage.memory import MemoryStorage
from trioqueue.testing.queue import DictIndex

ACTORS = Path(trioqueue.__file__).parent / "actors"


class Committer:
    """Commits on every release, as the storage writer does without an fsync due."""

    off_thread = False  # an inline store

    def __init__(self, storage: MemoryStorage) -> None:
        self.storage = storage
        self.pending: list[Writes] = []
        self.commits = 0

    async def commit(self) -> None:
        self.commit_now()

    def submit(self, writes: Writes) -> None:
        if writes:
            self.pending.append(writes)

    def commit_now(self) -> None:
        if self.pending:
            self.storage.apply(self.pending)
            self.pending = []
            self.commits += 1

    def release(self, deliveries: list[tuple[Replier, dict[str, Any]]]) -> None:
        self.commit_now()
        if deliveries:
            deliver_all(deliveries)


class Index(DictIndex):
    def forget_queue(self, queue: str) -> None:
        for job_id in [j for j, q in self.items() if q == queue]:
            del self[job_id]


class Events:
    active = False

    def __init__(self) -> None:
        self.published: list[dict[str, Any]] = []

    def publish(self, events: list[dict[str, Any]]) -> None:
        self.published.extend(events)


class Reply:
    """A replier a test can wait on."""

    def __init__(self) -> None:
        self.got: dict[str, Any] | None = None
        self.arrived = trio.Event()

    def deliver(self, reply: dict[str, Any]) -> None:
        self.got = reply
        self.arrived.set()


def fake_actor(storage: MemoryStorage, *, committer: Committer | None = None,
               index: Index | None = None, post_notices: Any = lambda notices: None,
               post_to: Any = lambda queue, notice: False) -> QueueActor:
    """Queue ``jobs`` from the fakes above; by default its notices go nowhere."""
    return QueueActor(
        "jobs", committer=Committer(storage) if committer is None else committer,
        index=Index() if index is None else index,  # (an empty Index is falsy)
        clock=TrioClock(), post_notices=post_notices, post_to=post_to, events=Events(),
        admission=None, limits=limits_from(Config(memory=True), QueueLimits),
        storage=storage)


async def ask(actor: QueueActor, cmd: str, **msg: Any) -> dict[str, Any]:
    reply = Reply()
    actor.batches_in_flight += 1  # as the router counts a batch until the actor takes it
    await actor.send.send([Request(cmd, {"cmd": cmd, **msg}, reply)])
    with trio.fail_after(5):
        await reply.arrived.wait()
    assert reply.got is not None
    return reply.got


async def test_a_queue_actor_runs_push_and_pull_without_a_broker() -> None:
    storage = MemoryStorage()
    committer = Committer(storage)
    index = Index()
    notices: list[Any] = []
    actor = fake_actor(storage, committer=committer, index=index,
                       post_notices=notices.extend)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        pushed = await ask(actor, "PUSH", queue="jobs", data={"n": 1})
        assert pushed["ok"] is True
        job_id = pushed["id"]
        assert index.locate(job_id) == "jobs"  # the actor keeps the index it was given
        assert storage.load().live_jobs[0]["id"] == job_id  # committed before the reply

        pulled = await ask(actor, "PULL", queue="jobs", timeout=0, owner="w")
        assert pulled["ok"] is True and pulled["job"]["id"] == job_id
        assert storage.load().live_jobs[0]["state"] == "active"
        assert committer.commits == 2 and notices == []
        nursery.cancel_scope.cancel()


def test_the_actors_do_not_import_the_broker() -> None:
    """The router and the queue actor depend on actors.ports, not on Broker (which
    closed an import cycle through TYPE_CHECKING before)."""
    for module in ("queue_actor.py", "router.py"):
        tree = ast.parse((ACTORS / module).read_text())
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert "broker" not in imported and "actors.broker" not in imported, module
        assert not any(isinstance(node, ast.Attribute) and node.attr == "broker"
                       for node in ast.walk(tree)), module


async def test_a_read_pipelined_behind_a_same_queue_removal_sees_it_settled() -> None:
    """RemoveUnprocessedChildren and GetDependencies in one batch: the removal's notices
    (remove the child, which settles the parent) are applied between the two."""
    storage = MemoryStorage()
    actor: QueueActor

    def post_notices(notices: list[Any]) -> None:
        for _, notice in notices:
            actor.post(notice)

    actor = fake_actor(storage, post_notices=post_notices)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        await ask(actor, "PUSH", queue="jobs", data={}, jobId="child", delay=60_000)
        parent = await ask(actor, "PUSH", queue="jobs", data={}, jobId="parent",
                           dependsOn=["child"])
        assert parent["ok"] is True
        removed, deps = Reply(), Reply()
        actor.batches_in_flight += 1
        await actor.send.send([
            Request("RemoveUnprocessedChildren", {"cmd": "RemoveUnprocessedChildren",
                                                  "queue": "jobs", "id": "parent"}, removed),
            Request("GetDependencies", {"cmd": "GetDependencies", "queue": "jobs",
                                        "id": "parent"}, deps)])
        with trio.fail_after(5):
            await deps.arrived.wait()
        assert removed.got is not None and removed.got["ok"] is True
        assert deps.got is not None and deps.got["data"]["unprocessed"] == []
        state = await ask(actor, "GetState", queue="jobs", id="parent")
        assert state["state"] == "waiting"
        nursery.cancel_scope.cancel()


async def test_a_reply_held_for_another_queue_is_not_lost_to_a_later_crash(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A command after the held one crashes the batch: the held reply's echo still goes
    out (here to a queue that does not exist, so the reply comes at once)."""
    storage = MemoryStorage()
    index = Index()
    index["child"] = "other"  # a child in another queue
    echoes: list[tuple[str, Any]] = []

    def post_to(queue: str, notice: Any) -> bool:
        echoes.append((queue, notice[0]))
        return False

    actor = fake_actor(storage, index=index, post_to=post_to)

    def crash(*args: Any) -> Any:
        raise RuntimeError("a bug")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(actor.run)
        parent = await ask(actor, "PUSH", queue="jobs", data={}, jobId="parent",
                           dependsOn=["child"])
        assert parent["ok"] is True
        monkeypatch.setitem(QUEUE_HANDLERS, "GetState", crash)
        removed, crashed = Reply(), Reply()
        actor.batches_in_flight += 1
        await actor.send.send([
            Request("RemoveUnprocessedChildren", {"cmd": "RemoveUnprocessedChildren",
                                                  "queue": "jobs", "id": "parent"}, removed),
            Request("GetState", {"cmd": "GetState", "queue": "jobs", "id": "parent"},
                    crashed)])
        with trio.fail_after(5):
            await removed.arrived.wait()
            await crashed.arrived.wait()
        assert removed.got is not None and removed.got["ok"] is True
        assert crashed.got is not None and crashed.got["ok"] is False
        assert echoes == [("other", "echo")]
        nursery.cancel_scope.cancel()
