"""One client request answered by every queue (CompactMemory): the router sends an
internal command to each queue actor, and :class:`Gather` answers the client once the
last queue replied.

Each queue runs the command in its own task, as a step (or long work) of its own, so
nothing of a queue is touched from outside its actor; a queue busy with long work
answers after it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .request import Request

Reply = dict[str, Any]


class Gather:
    """Collects the queues' replies to one fanned-out request, then answers it with
    ``combine`` of those replies (a queue that refused counts as an empty reply)."""

    __slots__ = ("_request", "_combine", "_replies", "_expected")

    def __init__(self, request: Request, combine: Callable[[list[Reply]], Reply],
                 expected: int) -> None:
        self._request = request
        self._combine = combine
        self._replies: list[Reply] = []
        self._expected = expected
        if expected == 0:
            request.ok(combine([]))

    def deliver(self, reply: Reply) -> None:
        """One queue's reply (the Replier of every part)."""
        self._replies.append(reply if reply.get("ok") else {})
        self._expected -= 1
        if self._expected == 0:
            self._request.ok(self._combine(self._replies))
