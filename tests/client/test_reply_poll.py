"""``reply_poll_ms``: a command alone in flight polls for its reply, for that long only.

The broker here is a stand-in in the test's own loop that holds each reply until the
test lets it go, so what the client's thread does while it waits can be read from its
CPU time (``time.thread_time``): a polling loop spends the wait on the CPU, a sleeping
one does not. Both event loops (anyio's plugin, see conftest).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import pytest

from trioqueue.client import open_connection
from trioqueue.transport.wire.codec import CBOR
from trioqueue.transport.wire.framing import FrameDecoder, encode_frame

pytestmark = pytest.mark.anyio

HOLD_S = 0.4  # how long the stand-in holds a reply


@asynccontextmanager
async def holding_broker(hold_s: float) -> AsyncIterator[int]:
    """A listener answering each frame ``{"ok": true}`` on its ``reqId``, ``hold_s``
    after it came in; yields its port."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)

    async def answer(stream: anyio.abc.SocketStream) -> None:
        decoder = FrameDecoder(1 << 20)
        async with stream:
            async for data in stream:
                for payload in decoder.feed(data):
                    msg = CBOR.decode(payload)
                    await anyio.sleep(hold_s)
                    reply = {"ok": True, "reqId": msg["reqId"], "cmd": msg["cmd"]}
                    await stream.send(encode_frame(CBOR.encode(reply)))

    async with anyio.create_task_group() as group:
        group.start_soon(listener.serve, answer)
        try:
            yield port
        finally:
            group.cancel_scope.cancel()
    await listener.aclose()


async def _ping_cpu_s(reply_poll_ms: float) -> tuple[dict[str, Any], float, int]:
    """One Ping answered HOLD_S late: its reply, the thread's CPU seconds during the
    wait, and how many passes a task beside it made meanwhile."""
    beside = 0

    async def tick(stop: anyio.Event) -> None:
        nonlocal beside
        while not stop.is_set():
            beside += 1
            await anyio.sleep(0.01)

    async with holding_broker(HOLD_S) as port, open_connection(
            port=port, reply_poll_ms=reply_poll_ms) as conn:
        await conn.call("Ping")  # connected before the measured wait
        stop = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(tick, stop)
            started = time.thread_time()
            with anyio.fail_after(10):
                reply = await conn.call("Ping")
            cpu_s = time.thread_time() - started
            stop.set()
    return reply, cpu_s, beside


async def test_a_lone_command_polls_while_the_other_tasks_run() -> None:
    reply, cpu_s, beside = await _ping_cpu_s(reply_poll_ms=1000)
    assert reply["ok"] is True and reply["cmd"] == "Ping"
    # Polling the whole wait: most of it on the CPU (a loaded host may take some).
    assert cpu_s > HOLD_S / 4
    # ... and a task beside it kept running (about one pass per 10 ms of the wait).
    assert beside >= 10


async def test_polling_stops_after_the_window_and_the_reply_still_comes() -> None:
    reply, cpu_s, beside = await _ping_cpu_s(reply_poll_ms=20)
    assert reply["ok"] is True and reply["cmd"] == "Ping"
    # 20 ms of polling, then asleep until the reply: far less CPU than the wait.
    assert cpu_s < HOLD_S / 4
    assert beside >= 10


async def test_zero_never_polls() -> None:
    reply, cpu_s, _ = await _ping_cpu_s(reply_poll_ms=0)
    assert reply["ok"] is True
    assert cpu_s < HOLD_S / 4


@pytest.mark.parametrize("bad", [-1, 1001, True, "0.5", None])
async def test_a_bad_reply_poll_ms_is_refused(bad: Any) -> None:
    with pytest.raises(ValueError, match="reply_poll_ms must be a number of milliseconds"):
        async with open_connection(reply_poll_ms=bad):
            pass  # pragma: no cover - refused before it connects
