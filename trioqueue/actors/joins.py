"""The join of a command split across queues (a multi-id command whose ids live in several
queues): each queue answers its part, and the client gets one merged reply."""

from __future__ import annotations

from typing import Any

from ..core.commands.registry import MultiId
from .request import Request


class Join:
    """Collects the sub-replies of a command split across queues, then answers once."""

    def __init__(self, request: Request, multi: MultiId, ids: list[str],
                 unknown: list[int]) -> None:
        self.request = request
        self.multi = multi
        self.ids = ids
        self.unknown = unknown
        self.positions: dict[int, list[int]] = {}
        self.parts: list[tuple[list[int], dict[str, Any]]] = []
        self.error: str | None = None
        self.expected = 0

    def part(self, positions: list[int]) -> JoinPart:
        self.expected += 1
        return JoinPart(self, positions)

    def _arrive(self, positions: list[int], reply: dict[str, Any]) -> None:
        if not reply.get("ok"):
            self.error = self.error or reply.get("error", "")
        else:
            self.parts.append((positions, reply))
        self.expected -= 1
        if self.expected == 0:
            req = self.request
            if self.error is not None:
                req.error(self.error)
            else:
                req.ok(self.multi.merge(self.ids, self.parts, self.unknown))


class JoinPart:
    def __init__(self, join: Join, positions: list[int]) -> None:
        self.join = join
        self.positions = positions

    def deliver(self, reply: dict[str, Any]) -> None:
        self.join._arrive(self.positions, reply)
