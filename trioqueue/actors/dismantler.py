"""The broker's task that takes large let-go values apart (core/large_values/graveyard.py).

A slice of :data:`SLICE_S` at a time, the loop given back between two, so freeing a
finished job's million small values never holds every other client for the whole of
it. Values still held elsewhere are tried again after :data:`HELD_WAIT_S`, twice as
long after each round that found them all still held, at most :data:`HELD_WAIT_MAX_S`
(a record read back stays in its queue's view until that queue's next step).
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any, Final

import trio

from ..core.large_values.graveyard import Graveyard

__all__ = ["Dismantler"]

#: Work of one slice, in seconds.
SLICE_S: Final = 0.0005
#: Wait before trying again values held elsewhere (a reply not yet sent, mostly).
HELD_WAIT_S: Final = 0.05
HELD_WAIT_MAX_S: Final = 1.0


class Dismantler:
    """Owns the broker's :class:`Graveyard` and the task that empties it."""

    def __init__(self) -> None:
        self.graveyard = Graveyard()
        self._buried = trio.Event()
        self.graveyard.wake = self._wake

    def _wake(self) -> None:
        self._buried.set()

    async def run(self, *, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        graveyard = self.graveyard
        clock = time.perf_counter
        while True:
            await self._buried.wait()
            self._buried = trio.Event()
            wait_s = HELD_WAIT_S
            while graveyard.pending:
                held = graveyard.dismantle(partial(_past, clock() + SLICE_S))
                if held:
                    # the rest is held elsewhere: a new burial or a wait
                    with trio.move_on_after(wait_s):
                        await self._buried.wait()
                    self._buried = trio.Event()
                    wait_s = min(2 * wait_s, HELD_WAIT_MAX_S)
                else:
                    wait_s = HELD_WAIT_S
                    await trio.lowlevel.checkpoint()


def _past(deadline: float) -> bool:
    return time.perf_counter() >= deadline
