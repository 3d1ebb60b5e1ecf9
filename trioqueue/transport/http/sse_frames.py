"""An SSE frame whose data holds many values, made into text once, a slice at a time.

A ``job:completed`` frame carries the job's result, which may be a million small maps
(8M characters of JSON). Encoded as the event was published, it held the event loop
for hundreds of milliseconds inside the queue's step. So a frame whose data holds
more than :data:`~.value_slices.HEAVY_VALUES` values is not encoded there: it is a
:class:`LargeFrame`, queued for each client and kept in the replay ring as it is, and
made by the first client's pump that comes to it, one slice per call of
:meth:`LargeFrame.step`, with the loop given back between two. Every client and the
ring share that one text (pieces of about :data:`~...core.json_slices.PIECE_CHARS`, handed
to the socket one at a time); once made, the frame lets go of the values.

A frame no pump ever made (no client took it) lets go of its values when the replay
ring drops it (:meth:`LargeFrame.unmade_data`): the hub hands them to the graveyard,
as freeing them in one call is as long as making them.

Counting against ``sse_max_unsent_bytes``: a large frame counts its bytes once made;
before that, at least :data:`UNMADE_BYTES` (a value takes at least one character and
a comma, so its text is at least that long).
"""

from __future__ import annotations

import logging
from typing import Any, Final

from ...core.large_values.json_slices import json_bytes_steps
from ..large.value_slices import HEAVY_VALUES, heavy
from ..slicing import Slicer, Steps
from ..wire.codec import JSON

__all__ = ["Frame", "LargeFrame", "UNMADE_BYTES", "make_frame"]

log = logging.getLogger("trioqueue.sse")

#: What a large frame not yet made counts for (the least its text can be).
UNMADE_BYTES: Final = 2 * HEAVY_VALUES


class LargeFrame:
    """One frame of many values on its way to bytes (see the module)."""

    __slots__ = ("_head", "_data", "_steps", "_slicer", "pieces", "size")

    def __init__(self, head: str, data: dict[str, Any]) -> None:
        self._head = head
        self._data: dict[str, Any] | None = data
        self._slicer = Slicer()
        self._steps: Steps[list[bytes]] | None = json_bytes_steps(
            data, self._slicer, JSON.encode_text)
        #: The frame's bytes, once made (None before).
        self.pieces: list[bytes] | None = None
        self.size = UNMADE_BYTES

    def step(self) -> bool:
        """One slice of the making; True once the frame is whole (then :attr:`pieces`
        and :attr:`size` are its bytes)."""
        steps = self._steps
        if steps is None:
            return True
        self._slicer.restart()
        try:
            next(steps)
            return False
        except StopIteration as done:
            pieces = done.value
        except (RecursionError, TypeError, ValueError) as exc:
            # (the protocol's checks let no such value in: said, never fatal)
            log.warning("an SSE frame could not be encoded: %r", exc)
            pieces = [b"null"]
        self._steps = self._data = None  # the values go (the walk held them)
        self.pieces = [self._head.encode(), *pieces, b"\n\n"]
        self.size = sum(map(len, self.pieces))
        return True

    def unmade_data(self) -> dict[str, Any] | None:
        """The frame's values when it was never made, let go of by the frame (the
        caller frees them); None once made."""
        data, self._data = self._data, None
        return data


Frame = bytes | LargeFrame


def make_frame(event_id: int, name: str, data: dict[str, Any]) -> Frame:
    """The frame ``id / event / data``: its bytes, or a :class:`LargeFrame` for data
    holding many values (looked at no further than about that many)."""
    head = f"id: {event_id}\nevent: {name}\ndata: "
    if heavy(data):
        return LargeFrame(head, data)
    return f"{head}{JSON.encode_text(data)}\n\n".encode()
