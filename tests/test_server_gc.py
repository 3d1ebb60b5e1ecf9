"""The standalone broker's garbage-collection policy (server.tune_gc, gc_passes) and
what it rests on: the broker's own paths make no reference cycles.

tune_gc collects only the young generation, so a collection costs the young objects (a
few ms), not every live job (about a second at a million jobs). Every
``gc_full_interval_s`` a pass collects every generation and freezes what survived, so
cyclic garbage from elsewhere (an actor's crash, a library) is freed within that long,
and the next pass looks only at what was made since. A cycle that reaches an object
alive at an earlier pass is not freed, so the broker must make none: the first test
runs the paths that did (closing a connection: session <-> transport; an error kept in
a list that its own traceback reached; a raised error held by the decoder) and the
common ones, with the collector off, and checks that a full collection then finds
nothing at all.
"""

from __future__ import annotations

import gc
import json
import weakref
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url

from trioqueue.config import Config
from trioqueue.core.commands.context import Ctx
from trioqueue.core.commands.table import QUEUE_HANDLERS
from trioqueue.server.gc_passes import FullCollections
from trioqueue.server.run import Server, tune_gc
from trioqueue.testing import RawClient
from trioqueue.testing.deadline import wait_until


@pytest.fixture
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def garbage() -> Counter[str]:
    """What a full collection frees, by type (kept aside to be counted)."""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return Counter(f"{type(o).__module__}.{type(o).__name__}" for o in gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)


async def ws_reply(ws: Any) -> dict[str, Any]:
    """The next reply on a WebSocket, past the live events the broker also sends."""
    while True:
        message: dict[str, Any] = json.loads(await ws.get_message())
        if "ok" in message:
            return message


async def closed_all_but(server: Server, open_connections: int) -> None:
    await wait_until(lambda: server.broker.connections.borrowed_tokens == open_connections,
                     "the broker to close the other connections")


async def test_the_broker_makes_no_reference_cycles(
    start_server: Callable[..., Any], collector_off: None
) -> None:
    server = await start_server(idle_timeout_s=0.2)
    main = await RawClient.connect(server.tcp_port)
    # a subscription spares it from the idle timeout (no events come for that queue)
    await main.ok("SubscribeEvents", queue="keep-open")
    assert garbage() == Counter()  # a clean start for the count

    # the common paths, on a connection that stays open
    for n in range(20):
        await main.ok("PUSH", queue="q", name="j", data={"n": n})
        pulled = await main.ok("PULL", queue="q", timeout=0, owner="w")
        await main.ok("ACK", id=pulled["job"]["id"], token=pulled["token"], result={"n": n})
    await main.ok("PUSHF", jobs=[{"id": f"p{n}", "queue": "f",
                                  "input": {"name": "p", "data": {}}} for n in range(3)])
    pulled = await main.ok("PULLB", queue="f", count=3, timeout=0, owner="w")
    for job, token in zip(pulled["jobs"], pulled["tokens"], strict=True):
        await main.ok("FAIL", id=job["id"], token=token, error="boom")
    await main.ok("Obliterate", queue="f")
    # connections that close holding something: a lease, a parked pull, a wait, events
    for _ in range(3):
        client = await RawClient.connect(server.tcp_port)
        job_id = (await client.ok("PUSH", queue="c", name="j", data={}))["id"]
        await client.ok("PULL", queue="c", timeout=0, owner="w")
        await client.send("PULL", queue="empty", timeout=5000)
        await client.send("WaitJob", id=job_id, timeout=5000)
        await client.ok("SubscribeEvents", queue="c")
        await client.aclose()
    # connections the broker closes: a bad frame, a frame over the limit, idleness
    for _ in range(3):
        client = await RawClient.connect(server.tcp_port)
        await client.send_raw(b"\x00\x00\x00\x03bad")
        assert (await client.receive())["ok"] is False
        await client.send_raw(b"\xff\xff\xff\xff")
        assert "too large" in (await client.receive())["error"]
        idle = await RawClient.connect(server.tcp_port)
        await wait_until(idle.peer_closed, "the idle connection to be closed")
        await client.aclose()
        await idle.aclose()
    # WebSocket sessions, JSON and a bad message
    for _ in range(2):
        async with open_websocket_url(f"ws://127.0.0.1:{server.ws_port}/ws") as ws:
            await ws.send_message(json.dumps({"cmd": "PUSH", "queue": "w", "data": {}}))
            assert (await ws_reply(ws))["ok"] is True
            await ws.send_message("not json")
            assert (await ws_reply(ws))["ok"] is False
    await main.ok("Ping")
    await closed_all_but(server, 1)
    found = garbage()
    assert found == Counter(), found.most_common()


def test_tune_gc_collects_only_the_young_generation() -> None:
    before = gc.get_threshold()
    try:
        tune_gc(Config(gc_gen0_threshold=7_000))
        young, middle, old = gc.get_threshold()
        assert young == 7_000 and middle >= 1 << 30 and old >= 1 << 30
        gc.set_threshold(*before)
        tune_gc(Config(gc_gen0_threshold=0))  # 0: Python's own policy, untouched
        assert gc.get_threshold() == before
    finally:
        gc.set_threshold(*before)


@pytest.fixture
def tuned_gc(served_gc: None) -> Iterator[None]:
    """The standalone broker's policy in this process (serve's, tests/conftest.py), put
    back after, with nothing left frozen."""
    try:
        yield
    finally:
        gc.unfreeze()


class Node:
    """An object in a reference cycle with itself, as a crash's frames make them."""

    def __init__(self) -> None:
        self.me = self


async def test_cyclic_garbage_of_a_crashed_actor_is_freed_within_the_interval(
    start_server: Callable[..., Any], nursery: Any, tuned_gc: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A command that crashes its queue's actor leaves a cycle behind, which outlived a
    young collection before it became garbage (here: one forced then). The young
    generation alone never frees it; the broker's passes do, within
    ``gc_full_interval_s``. (The cycle is dropped before the raise: the traceback, which
    the test's log capture keeps, must not hold it.)"""
    server = await start_server(gc_full_interval_s=0.1)
    nursery.start_soon(server.collections.run)  # as serve() starts it, beside the broker
    left: list[weakref.ref[Node]] = []

    def crash(q: Any, msg: dict[str, Any], ctx: Ctx) -> Any:
        node = Node()
        left.append(weakref.ref(node))
        gc.collect(0)  # a young collection while it is held: it moves on, then
        del node  # garbage, in a generation only the passes collect
        raise RuntimeError("crashed")

    monkeypatch.setitem(QUEUE_HANDLERS, "Count", crash)
    client = await RawClient.connect(server.tcp_port)
    reply = await client.call("Count", queue="q")
    assert reply["ok"] is False
    assert left  # the cycle was made (the crash was answered)
    await wait_until(lambda: left[0]() is None, "the crash's cycle to be freed", timeout_s=5.0)
    assert server.collections.passes >= 1
    await client.ok("Ping")


def test_a_pass_freezes_what_survived_it(tuned_gc: None) -> None:
    """What a pass did not free is frozen: the next pass does not traverse it again (so a
    pass costs what was made since the last one, not every live job)."""
    passes = FullCollections(60.0)
    survivors = [Node() for _ in range(1_000)]
    frozen = gc.get_freeze_count()
    passes.collect()
    assert gc.get_freeze_count() >= frozen + len(survivors)
    assert passes.passes == 1 and passes.last_pause_s > 0
    # and garbage made after it is found by the next one
    before = passes.freed
    Node()  # a cycle, garbage at once (gen 0: the pass counts it)
    passes.collect()
    assert passes.freed > before


def test_gc_full_interval_s_is_validated() -> None:
    with pytest.raises(ValueError, match="gc_full_interval_s"):
        Config(gc_full_interval_s=-1).validate()


async def test_a_burst_of_new_objects_brings_a_pass_before_the_interval(
    nursery: Any, tuned_gc: None,
) -> None:
    """Young collections that moved ``after_objects`` on bring a pass at once, however
    long the interval: a burst of new jobs makes short passes, not one long one."""
    passes = FullCollections(3600.0, after_objects=10_000)
    nursery.start_soon(passes.run)
    await trio.lowlevel.checkpoint()  # (run has registered its callback)
    kept = []
    with trio.fail_after(5):
        while not passes.passes:
            kept.append([[] for _ in range(1_000)])  # survivors of young collections
            await trio.lowlevel.checkpoint()
    assert len(kept) * 1_000 < 200_000  # soon after the bound, not by the clock
