"""What :class:`~trioqueue.client.Queue` gives the mixins its methods are grouped in
(limits, groups, schedulers, DLQ, maintenance, webhooks): its name and its way to send
a command. One declaration, so no mixin stubs them again."""

from __future__ import annotations

from typing import Any


class QueueCommands:
    name: str

    async def _call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        raise NotImplementedError  # Queue's own

    async def _queue_call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """A command about this queue (``queue`` set to its name)."""
        return await self._call(cmd, queue=self.name, **fields)
