"""What a session answers by itself leaves in one write per read."""

from __future__ import annotations

from typing import Any

from trioqueue.config import Config
from trioqueue.transport.http.websocket import WsConnection
from trioqueue.transport.session import SENT, Session
from trioqueue.transport.wire.codec import CBOR, JSON, DecodeError


class _Host:
    """The things a session takes from the broker; none is used by these reads (no
    message here reaches the router)."""

    def __init__(self) -> None:
        self.config = Config()
        self.router: Any = None
        self.events: Any = None
        self.ahead: Any = None
        self.large_values: Any = None


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



def test_a_long_reply_left_to_the_sender_counts_whole_at_once() -> None:
    """A WebSocket session leaves a long reply (a listing of 250 jobs) for its sender
    task to encode a slice per pass. A client that reads nothing holds up that task
    (it waits to send the reply before), so the reply must count against the
    broker-wide bound the moment the session is handed it, not once it is encoded:
    before, a listing behind a stuck send counted nothing."""
    reported: list[int] = []
    session = Session(_Host(), encode=WsConnection._encode,
                      encode_later=WsConnection._encode_later,
                      on_outbox_bytes=reported.append)
    reply = {"ok": True, "jobs": [{"id": str(i), "data": "z" * 1000} for i in range(250)]}
    for codec in (JSON, CBOR):
        reported.clear()
        session.send_frames([reply], tag=codec)
        size = len(JSON.encode_text(reply)) if codec is JSON else len(CBOR.encode(reply))
        assert reported and size * 0.95 <= reported[-1] <= size * 1.1  # (an estimate)
        session.drop_unsent()
        session.overflowed = False
