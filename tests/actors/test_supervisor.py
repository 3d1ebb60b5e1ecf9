"""Queue actor supervision: a crashing command is answered, the queue is rebuilt, and the
broker carries on; too many crashes in a short window take the broker down instead.

Crashes are injected by wrapping a handler in ``QUEUE_HANDLERS`` with one that raises a
``RuntimeError`` when the request carries ``crash: true``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from trioqueue.config import Config
from trioqueue.core.commands.context import Ctx
from trioqueue.core.commands.table import QUEUE_HANDLERS
from trioqueue.core.errors import INTERNAL_ERROR
from trioqueue.server.run import Server
from trioqueue.testing import RawClient

StartServer = Callable[..., Any]


class InjectedCrash(RuntimeError):
    pass


def crash_on_marker(monkeypatch: pytest.MonkeyPatch, cmd: str, *, after: bool = False) -> None:
    """Make ``cmd`` raise on ``crash: true``; ``after``: only once the real handler ran."""
    real = QUEUE_HANDLERS[cmd]

    def wrapper(q: Any, msg: dict[str, Any], ctx: Ctx) -> Any:
        if msg.get("crash") is True and not after:
            raise InjectedCrash(f"injected crash in {cmd}")
        result = real(q, msg, ctx)
        if msg.get("crash") is True:
            raise InjectedCrash(f"injected crash in {cmd} after it changed the queue")
        return result

    monkeypatch.setitem(QUEUE_HANDLERS, cmd, wrapper)


async def connect(server: Server) -> RawClient:
    assert server.tcp_port is not None
    return await RawClient.connect(server.tcp_port)


def frames(client: RawClient, *messages: dict[str, Any]) -> bytes:
    """Several commands in one write, so the broker takes them as one batch."""
    return b"".join(client.frame(msg) for msg in messages)


async def test_crash_is_answered_and_the_rest_of_the_batch_is_served(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_on_marker(monkeypatch, "Count")
    server = await start_server()
    client = await connect(server)
    for i in range(3):
        await client.ok("PUSH", queue="q", name="n", data=i)
    pulled = await client.ok("PULL", queue="q", owner="worker")
    active_id, token = pulled["job"]["id"], pulled["token"]

    await client.send_raw(frames(
        client,
        {"cmd": "PUSH", "queue": "q", "name": "x", "data": "x", "reqId": "push-x"},
        {"cmd": "Count", "queue": "q", "crash": True, "reqId": "boom"},
        {"cmd": "PUSH", "queue": "q", "name": "y", "data": "y", "reqId": "push-y"},
        {"cmd": "Count", "queue": "q", "reqId": "count"},
        {"cmd": "GetState", "id": active_id, "reqId": "state"},
    ))
    with trio.fail_after(2):
        boom = await client.reply_to("boom")
        push_x = await client.reply_to("push-x")
        push_y = await client.reply_to("push-y")
        count = await client.reply_to("count")
        state = await client.reply_to("state")
    assert boom == {"ok": False, "error": INTERNAL_ERROR, "reqId": "boom"}
    assert push_x["ok"] is True and push_y["ok"] is True
    # 2 left waiting + x + y; the active job is not counted as queued.
    assert count["count"] == 4
    assert state["state"] == "active"

    # Jobs survive the restart: pushed jobs are there, the active one can be ACKed.
    for pushed in (push_x, push_y):
        assert (await client.ok("GetState", id=pushed["id"]))["state"] == "waiting"
    await client.ok("ACK", id=active_id, token=token, result="done")
    assert (await client.ok("GetState", id=active_id))["state"] == "completed"
    assert (await client.ok("GetResult", id=active_id))["result"] == "done"
    assert (await client.ok("Count", queue="q"))["count"] == 4


async def test_crashing_command_leaves_no_trace(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PUSH that crashes after changing the queue is dropped whole, custom id included."""
    crash_on_marker(monkeypatch, "PUSH", after=True)
    server = await start_server()
    client = await connect(server)
    await client.ok("PUSH", queue="q", name="n", data="kept")
    reply = await client.call("PUSH", queue="q", name="n", data="ghost", jobId="ghost",
                              crash=True)
    assert reply["ok"] is False and reply["error"] == INTERNAL_ERROR
    assert (await client.ok("Count", queue="q"))["count"] == 1
    assert (await client.ok("GetState", id="ghost"))["state"] == "unknown"
    # The custom id is free again: a new push creates a fresh job under it.
    again = await client.ok("PUSH", queue="q", name="n", data="real", jobId="ghost")
    assert again["id"] == "ghost"
    assert (await client.ok("GetJob", id="ghost"))["job"]["data"] == "real"
    assert (await client.ok("Count", queue="q"))["count"] == 2


async def test_parked_pulls_are_answered_empty_and_can_poll_again(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_on_marker(monkeypatch, "Count")
    server = await start_server()
    worker = await connect(server)
    producer = await connect(server)
    await worker.send_raw(frames(
        worker,
        {"cmd": "PULL", "queue": "q", "timeout": 5000, "reqId": "poll"},
        {"cmd": "Count", "queue": "q", "crash": True, "reqId": "boom"},
    ))
    with trio.fail_after(2):
        assert (await worker.reply_to("boom"))["error"] == INTERNAL_ERROR
        poll = await worker.reply_to("poll")
    assert poll["ok"] is True and poll["job"] is None

    again = await worker.send("PULL", queue="q", timeout=5000)
    pushed = await producer.ok("PUSH", queue="q", name="n", data=1)
    with trio.fail_after(2):
        assert (await worker.reply_to(again))["job"]["id"] == pushed["id"]


async def test_other_queues_are_unaffected_by_a_crash(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_on_marker(monkeypatch, "Count")
    server = await start_server()
    client = await connect(server)
    waiter = await connect(server)
    await client.ok("PUSH", queue="other", name="n", data=1)
    await client.ok("PUSH", queue="other", name="n", data=2)
    pulled = await client.ok("PULL", queue="other", owner="w")
    parked = await waiter.send("PULL", queue="idle", timeout=5000)

    assert (await client.call("Count", queue="q", crash=True))["error"] == INTERNAL_ERROR

    assert (await client.ok("Count", queue="other"))["count"] == 1
    await client.ok("ACK", id=pulled["job"]["id"], token=pulled["token"])
    # A long-poll parked on another queue is still parked, and still served.
    pushed = await client.ok("PUSH", queue="idle", name="n", data=3)
    with trio.fail_after(2):
        assert (await waiter.reply_to(parked))["job"]["id"] == pushed["id"]


async def test_crashes_outside_the_window_or_in_other_actors_are_tolerated(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_on_marker(monkeypatch, "Count")
    server = await start_server(actor_max_restarts=1, actor_restart_window_s=0.2)
    client = await connect(server)
    await client.ok("PUSH", queue="a", name="n", data=1)
    assert (await client.call("Count", queue="a", crash=True))["error"] == INTERNAL_ERROR
    # The limit is per actor: queue b's first crash is its own.
    assert (await client.call("Count", queue="b", crash=True))["error"] == INTERNAL_ERROR
    await trio.sleep(0.3)  # letting the restart window pass is the thing under test
    assert (await client.call("Count", queue="a", crash=True))["error"] == INTERNAL_ERROR
    assert (await client.ok("Count", queue="a"))["count"] == 1
    await client.ok("Ping")


async def test_too_many_crashes_in_the_window_take_the_broker_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_on_marker(monkeypatch, "Count")
    config = Config(host="127.0.0.1", tcp_port=0, ws_port=0, data_dir=str(tmp_path / "data"),
                    fsync="never", actor_max_restarts=2, actor_restart_window_s=10.0)
    with pytest.raises(BaseExceptionGroup) as caught:
        async with trio.open_nursery() as nursery:
            server: Server = await nursery.start(Server(config).run)
            client = await connect(server)
            try:
                for _ in range(2):
                    reply = await client.call("Count", queue="q", crash=True)
                    assert reply["error"] == INTERNAL_ERROR
                await client.send("Count", queue="q", crash=True)
                # The third crash within the window re-raises: Server.run fails, which
                # cancels this body; the deadline only guards against a hang.
                with trio.fail_after(5):
                    await trio.sleep_forever()
            finally:
                await client.aclose()
    crashes = caught.value.subgroup(InjectedCrash)
    assert crashes is not None, caught.value
    assert caught.value.subgroup(lambda e: not isinstance(e, (BaseExceptionGroup,
                                                              InjectedCrash))) is None
