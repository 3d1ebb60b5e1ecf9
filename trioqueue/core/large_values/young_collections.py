"""A collection of the young generation at the end of a slice of work that makes values.

The collector counts the containers made, not what they hold: decoding a frame of 500
lists of 8,000 integers made about a thousand containers, no collection ran while they
were made, and the next one, in another task's step, traversed all 4M integers. Work
done in slices (a large frame decoded, a stored value read back) calls
:func:`collect_young` at the end of each slice, so what a slice made is traversed once,
in that slice, at the cost of what it made.
"""

from __future__ import annotations

import gc

__all__ = ["collect_young"]


def collect_young() -> None:
    """Collect the young generation when the collector is on (an embedding program
    that turned it off keeps it off)."""
    if gc.isenabled():
        gc.collect(0)
