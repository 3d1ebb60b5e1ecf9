"""Long work cut in slices: a walk that yields when its slice's time is up.

A large value's work (a frame's decoding, a reply's or an event's encoding) is written
as a generator that ``yield``s when its slice's time is up: it asks a :class:`Slicer`
once per value it handles. Whoever drives it (:func:`run_paused`, given the pause a
trio task makes: ``transport/slicing.py``'s ``run_sliced``, the actors' own) lets every
other task run between two slices, so the work holds the event loop for about
``SLICE_S`` at a time instead of for all of it. Here, not in the transport, so the
actors can slice their own work too; the pause is the caller's, so the core stays free
of the event loop's library.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Generator
from typing import Final, TypeVar

__all__ = ["CHECK_EVERY", "SLICE_S", "Slicer", "Steps", "run_paused", "run_steps"]

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


async def run_paused(steps: Steps[T], slicer: Slicer,
                     pause: Callable[[], Awaitable[None]]) -> T:
    """Run ``steps`` to the end, awaiting ``pause()`` after each slice (a trio
    checkpoint, so every other task runs between two slices) and restarting ``slicer``.

    Exceptions of the work propagate; whatever ends the run early (a cancellation in
    the pause) closes the generator.
    """
    try:
        while True:
            try:
                next(steps)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
            await pause()
            slicer.restart()
    finally:
        steps.close()
