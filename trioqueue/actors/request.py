"""A command on its way from a session to a queue and back.

Sessions build :class:`Request` objects; the router and queue actors answer them through
:meth:`Request.ok` / :meth:`Request.error`, which hand the finished reply map to the
session's :class:`Replier`. The reply map carries ``reqId`` exactly as the client sent it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class Replier(Protocol):
    """Where replies go: a TCP or WebSocket session, or a join of split requests."""

    def deliver(self, reply: dict[str, Any]) -> None: ...


def deliver_all(deliveries: list[tuple[Replier, dict[str, Any]]]) -> None:
    """Hand each replier all of its replies at once, so a session sends them together."""
    if len(deliveries) == 1:
        replier, reply = deliveries[0]
        replier.deliver(reply)
        return
    grouped: dict[int, tuple[Replier, list[dict[str, Any]]]] = {}
    for replier, reply in deliveries:
        entry = grouped.get(id(replier))
        if entry is None:
            grouped[id(replier)] = (replier, [reply])
        else:
            entry[1].append(reply)
    for replier, replies in grouped.values():
        many = getattr(replier, "deliver_many", None)
        if many is not None:
            many(replies)
        else:
            for reply in replies:
                replier.deliver(reply)


class OnReply:
    """A request's replier that shows each reply to ``seen`` before handing it on (to
    act once the request is answered: by then its writes are committed)."""

    __slots__ = ("_inner", "_seen")

    def __init__(self, inner: Replier, seen: Callable[[dict[str, Any]], None]) -> None:
        self._inner = inner
        self._seen = seen

    def deliver(self, reply: dict[str, Any]) -> None:
        self._seen(reply)
        self._inner.deliver(reply)


_NO_REQ_ID = object()


class Request:
    __slots__ = ("cmd", "msg", "replier", "req_id", "frame_bytes", "json_bound", "conn")

    def __init__(
        self,
        cmd: str,
        msg: dict[str, Any],
        replier: Replier,
        conn: Any = None,
        frame_bytes: int | None = None,
        json_bound: int | None = None,
    ) -> None:
        self.cmd = cmd
        self.msg = msg
        self.replier = replier
        self.req_id = msg.get("reqId", _NO_REQ_ID)
        self.conn = conn
        self.frame_bytes = frame_bytes
        # An upper bound of the message's JSON text (UTF-16 units), measured by the
        # transport for a large frame; None: not measured.
        self.json_bound = json_bound

    def reply(self, payload: dict[str, Any]) -> dict[str, Any]:
        reply = {"ok": True}
        reply.update(payload)
        if self.req_id is not _NO_REQ_ID:
            reply["reqId"] = self.req_id
        return reply

    def error_reply(self, message: str) -> dict[str, Any]:
        reply: dict[str, Any] = {"ok": False, "error": message}
        if self.req_id is not _NO_REQ_ID:
            reply["reqId"] = self.req_id
        return reply

    def ok(self, payload: dict[str, Any]) -> None:
        self.replier.deliver(self.reply(payload))

    def error(self, message: str) -> None:
        self.replier.deliver(self.error_reply(message))
