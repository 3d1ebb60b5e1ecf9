"""Commands from HTTP requests, run as any client's are: through a session.

Each REST request becomes one command message handed to a fresh
:class:`~trioqueue.transport.session.Session`, so auth (checked before, by bearer
token), validation, error texts and replies are exactly those of TCP and WebSocket.

HTTP is stateless, as in bunqueue: a job pulled over REST is not tied to the request's
connection, so when the request has been answered its session is simply dropped, not
closed (closing would hand its jobs back to their queue, and forget workers it
registered). Only a request whose client went away before the reply (a long-polled
``PULL`` it no longer waits for) closes its session: that takes its parked pull out of
the queue, and hands back a job claimed for the reply no one will read.
"""

from __future__ import annotations

from typing import Any

import trio

from ...core.large_values.graveyard import Graveyard
from ..large.data_sizes import DataTooLarge, data_bound_steps, job_data_values
from ..session import SENT, Session, SessionHost
from ..slicing import Slicer, run_sliced
from .rest.api import Call, decoded_call


class _Reply:
    """Where the one reply of a request lands."""

    __slots__ = ("done", "reply")

    def __init__(self) -> None:
        self.reply: dict[str, Any] | None = None
        self.done = trio.Event()

    def send_now(self, replies: list[dict[str, Any]]) -> str:
        if self.reply is None and replies:
            self.reply = replies[0]
            self.done.set()
        return SENT


class CommandRunner:
    """Runs one command message at a time per call, for the HTTP routes."""

    def __init__(self, host: SessionHost, graveyard: Graveyard | None = None) -> None:
        self._host = host
        self._graveyard = graveyard  # where a refused large body's values go

    async def decoded(self, call: Call) -> Call:
        """``call`` with a large body decoded in slices (rest_api.decoded_call), at the
        size a frame is (``large_frame_bytes``)."""
        config = self._host.config
        return await decoded_call(call, large_bytes=config.large_frame_bytes,
                                  bound_up_to=config.max_data_bytes,
                                  graveyard=self._graveyard)

    async def run(self, msg: dict[str, Any], size_bytes: int = 0,
                  json_bound: int | None = None) -> dict[str, Any]:
        """The reply to ``msg`` (``ok`` true or false, without ``reqId``): a command as a
        TCP frame's, counted by the body's size (and JSON bound) as a frame is."""
        box = _Reply()
        session = Session(self._host, send_now=box.send_now)
        session.authenticated = True  # the HTTP layer checked the bearer token
        answered = False
        command: Any = msg
        if json_bound is None and size_bytes >= self._host.config.large_frame_bytes > 0:
            command, json_bound = await self._measured(msg)
        try:
            await session.handle([(command, size_bytes, json_bound)])
            await box.done.wait()
            answered = True
        finally:
            if not answered:
                # Cancelled (the client left, or shutdown): its parked pull and any job
                # claimed for it go back to the queue.
                session.close()
        reply = box.reply
        assert reply is not None
        reply.pop("reqId", None)
        return reply

    async def _measured(self, msg: dict[str, Any]) -> tuple[Any, int | None]:
        """A large body whose text's bound is over the data limit: its command's job
        data measured exactly in slices, as a large frame's is (``data_sizes.py``), so
        that the core walks none of it in one step; (the command, or the refusal of
        data over the limit, and the bound)."""
        slicer = Slicer()
        try:
            return msg, await run_sliced(data_bound_steps(
                msg, self._host.config.max_data_bytes, slicer), slicer)
        except DataTooLarge as exc:
            if self._graveyard is not None:
                for data in job_data_values(msg):  # (the body holds them too)
                    self._graveyard.bury(data)
            return exc.fresh(), None
