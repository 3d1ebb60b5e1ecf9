"""Long work on the event loop, cut in slices with a checkpoint between two.

A large frame's decoding and validation (``large/frames.py``, ``datamodel.py``) is
written as a generator that ``yield``s when its slice's time is up: it asks a
:class:`Slicer` once per value it handles. :func:`run_sliced` drives it from a trio
task, letting every other task run between two slices, so the frame holds the event
loop for about ``SLICE_S`` at a time instead of for all of its work. The
:class:`Slicer` itself is the core's (``core/large_values/slicing.py``: the actors slice work too).

Each slice ends with a collection of the young generation
(:mod:`~trioqueue.core.large_values.young_collections`), so what a slice made is traversed there.
"""

from __future__ import annotations

import trio

from ..core.large_values.slicing import (
    CHECK_EVERY,
    SLICE_S,
    Slicer,
    Steps,
    T,
    run_paused,
    run_steps,
)
from ..core.large_values.young_collections import collect_young

__all__ = ["CHECK_EVERY", "SLICE_S", "Slicer", "Steps", "run_sliced", "run_steps"]


async def run_sliced(steps: Steps[T], slicer: Slicer) -> T:
    """Run ``steps`` to the end, with a collection of the young generation and a trio
    checkpoint after each slice.

    Exceptions of the work propagate; cancellation at a checkpoint closes the generator.
    """
    return await run_paused(steps, slicer, _pause)


async def _pause() -> None:
    collect_young()
    await trio.lowlevel.checkpoint()
