"""Long work on the event loop, cut in slices with a checkpoint between two.

A large frame's decoding and validation (``large_frames.py``, ``datamodel.py``) is
written as a generator that ``yield``s when its slice's time is up: it asks a
:class:`Slicer` once per value it handles. :func:`run_sliced` drives it from a trio
task, letting every other task run between two slices, so the frame holds the event
loop for about ``SLICE_S`` at a time instead of for all of its work.

Each slice ends with a collection of the young generation
(:mod:`~trioqueue.core.young_collections`), so what a slice made is traversed there.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Final, TypeVar

import trio

from ..core.young_collections import collect_young

T = TypeVar("T")

#: How long one slice may run before it yields, in seconds (checked every
#: ``CHECK_EVERY`` values, so a slice overruns it by at most that many values' work).
SLICE_S: Final = 0.0005
#: How many values a slice handles between two looks at the clock (a look costs about
#: as much as handling a few plain values).
CHECK_EVERY: Final = 32

Steps = Generator[None, None, T]

_clock = time.perf_counter


class Slicer:
    """Tells a sliced walk when its slice is over (see :meth:`due`)."""

    __slots__ = ("slice_s", "deadline", "count")

    def __init__(self, slice_s: float = SLICE_S) -> None:
        self.slice_s = slice_s
        self.count = 0
        self.deadline = _clock() + slice_s

    def due(self, weight: int = 1) -> bool:
        """Count ``weight`` values handled; True when the slice's time is up (the walk
        then yields). ``weight`` lets one call stand for a large piece of work (a long
        string), so that the clock is looked at right after it."""
        self.count += weight
        if self.count < CHECK_EVERY:
            return False
        self.count = 0
        return _clock() >= self.deadline

    def look_soon(self) -> None:
        """A large piece of work was just done (a long string): the next :meth:`due`
        looks at the clock."""
        self.count = CHECK_EVERY

    def restart(self) -> None:
        """A new slice begins (the driver calls this after each pause)."""
        self.count = 0
        self.deadline = _clock() + self.slice_s


def run_steps(steps: Steps[T]) -> T:
    """Every slice at once, without pausing (for synchronous callers and tests)."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]


async def run_sliced(steps: Steps[T], slicer: Slicer) -> T:
    """Run ``steps`` to the end, with a trio checkpoint after each slice.

    Exceptions of the work propagate; cancellation at a checkpoint closes the generator.
    """
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            collect_young()
            await trio.lowlevel.checkpoint()
            slicer.restart()
    finally:
        steps.close()
