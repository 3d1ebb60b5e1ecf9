"""What a session answers by itself leaves in one write per read."""

from __future__ import annotations

from typing import Any

import trio

from trioqueue.config import Config
from trioqueue.transport.codec import DecodeError
from trioqueue.transport.session import SENT, Session


class _Host:
    """The three things a session takes from the broker; none is used by these reads
    (no message here reaches the router)."""

    def __init__(self) -> None:
        self.config = Config()
        self.router: Any = None
        self.events: Any = None


async def test_a_read_of_bad_frames_and_pings_is_answered_in_one_write() -> None:
    writes: list[list[dict[str, Any]]] = []

    def send_now(replies: list[dict[str, Any]]) -> str:
        writes.append(list(replies))
        return SENT

    session = Session(_Host(), send_now=send_now)
    messages: list[Any] = []
    for i in range(100):
        messages.append((DecodeError("bad"), 3, None))
        messages.append(({"cmd": "Ping", "reqId": f"p{i}"}, 20, None))
        messages.append(({"cmd": "NoSuch", "reqId": f"n{i}"}, 20, None))
        messages.append(([1, 2], 4, None))
    await session.handle(messages)
    assert len(writes) == 1
    answers = writes[0]
    assert len(answers) == 400 and session.inflight == 0
    # in the order of the frames
    assert [a.get("reqId") for a in answers[1:8]] == ["p0", "n0", None, None, "p1", "n1", None]
    assert answers[2]["error"] == "Unknown command: NoSuch"
    assert all(a["ok"] is False for a in answers[::4])


class _InlineRouter:
    """Answers every command at once, as a queue actor's inline step answers reads."""

    def __init__(self) -> None:
        self.dispatched = 0

    async def dispatch(self, routed: list[Any]) -> None:
        for _command, request in routed:
            request.replier.deliver({"ok": True, "reqId": request.msg["reqId"]})
        self.dispatched += len(routed)


async def test_a_long_pipeline_answered_inline_lets_other_tasks_run_between_chunks(
) -> None:
    host = _Host()
    host.router = _InlineRouter()
    written: list[int] = []
    session = Session(host, send_now=lambda replies: written.append(len(replies)) or SENT)
    limit = host.config.max_inflight_per_connection
    messages = [({"cmd": "GetJob", "id": f"j{i}", "reqId": f"r{i}"}, 30, None)
                for i in range(4 * limit)]
    seen: list[int] = []  # commands dispatched each time the other task ran

    async def other() -> None:
        while True:
            seen.append(host.router.dispatched)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.lowlevel.checkpoint()
        await session.handle(messages)
        nursery.cancel_scope.cancel()
    assert sum(written) == 4 * limit and session.inflight == 0
    # the other task ran while the pipeline was half done, not only before and after
    assert any(0 < n < 4 * limit for n in seen), seen
